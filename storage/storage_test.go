package storage_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// t0 is the time of the first test delivery.
var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

// MustOpenDB opens a DB in a fresh directory and closes it when the test
// ends.
func MustOpenDB(tb testing.TB, cfg storage.Config) *storage.DB {
	tb.Helper()
	return MustOpenPath(tb, filepath.Join(tb.TempDir(), "data", "devhook.db"), cfg)
}

// MustOpenPath opens the DB at path and closes it when the test ends.
func MustOpenPath(tb testing.TB, path string, cfg storage.Config) *storage.DB {
	tb.Helper()
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return t0.Add(time.Hour) }
	}
	db, err := storage.Open(path, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// id returns the i-th test delivery id; ids sort in i order like UUIDv7s.
func id(i int) string { return fmt.Sprintf("0195b1c8-%04x-7000-8000-%012x", i>>16, i) }

// newDelivery returns the i-th test delivery, received i seconds after t0.
func newDelivery(i int) *devhook.Delivery {
	body := fmt.Appendf(nil, `{"event_type":"run.status","data":{"run_id":"run-%d","status_v2":"queued","n":%d}}`, i%7, i)
	return &devhook.Delivery{
		ID:         id(i),
		Channel:    "ch1",
		ReceivedAt: t0.Add(time.Duration(i) * time.Second),
		Method:     http.MethodPost,
		Path:       "/hook",
		Header:     http.Header{"Content-Type": {"application/json"}, devhook.SignatureHeader: {"t=1,v1=abc"}},
		Body:       body,
		Verdict:    devhook.Verdict{Result: devhook.VerdictOK, Status: 200, Text: "ok"},
		Event:      devhook.ParseEvent(body),
	}
}

func mustPut(tb testing.TB, db *storage.DB, ds ...*devhook.Delivery) {
	tb.Helper()
	for _, d := range ds {
		created, err := db.PutDelivery(d)
		if err != nil {
			tb.Fatal(err)
		}
		if !created {
			tb.Fatalf("PutDelivery(%s): created = false for a new id", d.ID)
		}
	}
}

// sameDelivery fails the test unless got equals want, times compared as
// instants and a nil body equal to an empty one.
func sameDelivery(tb testing.TB, got, want *devhook.Delivery) {
	tb.Helper()
	g, w := *got, *want
	if !g.ReceivedAt.Equal(w.ReceivedAt) {
		tb.Errorf("ReceivedAt = %v, want %v", g.ReceivedAt, w.ReceivedAt)
	}
	g.ReceivedAt, w.ReceivedAt = time.Time{}, time.Time{}
	if !bytes.Equal(g.Body, w.Body) {
		tb.Errorf("Body = %d bytes %.40q, want %d bytes %.40q", len(g.Body), g.Body, len(w.Body), w.Body)
	}
	if g.Body == nil {
		tb.Errorf("Body is nil, want a non-nil slice")
	}
	g.Body, w.Body = nil, nil
	ga, wa := g.Attempts, w.Attempts
	g.Attempts, w.Attempts = nil, nil
	if !reflect.DeepEqual(g, w) {
		tb.Errorf("delivery =\n%+v\nwant\n%+v", g, w)
	}
	if len(ga) != len(wa) {
		tb.Fatalf("%d attempts, want %d", len(ga), len(wa))
	}
	for i := range ga {
		sameAttempt(tb, ga[i], wa[i])
	}
}

func sameAttempt(tb testing.TB, got, want devhook.Attempt) {
	tb.Helper()
	if !got.StartedAt.Equal(want.StartedAt) {
		tb.Errorf("attempt %d StartedAt = %v, want %v", want.Seq, got.StartedAt, want.StartedAt)
	}
	got.StartedAt, want.StartedAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		tb.Errorf("attempt =\n%+v\nwant\n%+v", got, want)
	}
}

func TestOpen_CreatesPrivateDirAndFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "devhook.db")
	db := MustOpenPath(t, path, storage.Config{})
	if db.Path() != path {
		t.Errorf("Path() = %q, want %q", db.Path(), path)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o700 | os.ModeDir}, {path, 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode {
			t.Errorf("%s: mode %v, want %v", c.path, fi.Mode(), c.mode)
		}
	}
}

func TestOpen_Invalid(t *testing.T) {
	for _, c := range []struct {
		name string
		path string
		cfg  storage.Config
	}{
		{"empty path", "", storage.Config{}},
		{"negative lock timeout", filepath.Join(t.TempDir(), "x.db"), storage.Config{LockTimeout: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := storage.Open(c.path, c.cfg)
			if err == nil {
				db.Close()
				t.Fatal("Open succeeded")
			}
			if code := devhook.ErrorCode(err); code != devhook.EINVALID {
				t.Errorf("code %q, want %q (%v)", code, devhook.EINVALID, err)
			}
		})
	}
}

func TestOpen_Locked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	MustOpenPath(t, path, storage.Config{})
	// flock is per open file: a second Open in the same process waits
	// for the lock like another process would.
	db, err := storage.Open(path, storage.Config{LockTimeout: 100 * time.Millisecond})
	if err == nil {
		db.Close()
		t.Fatal("second Open of a locked file succeeded")
	}
	if !errors.Is(err, storage.ErrLocked) {
		t.Errorf("error %q is not ErrLocked", err)
	}
	// The package names the directory; cmd/devhook adds the flag (--data).
	for _, want := range []string{path, "another devhook", "data directory " + filepath.Dir(path)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestOpen_NotADatabase(t *testing.T) {
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(i*7 + i>>8)
	}
	otherBolt := func(t *testing.T, path string) {
		b, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = b.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucket([]byte("somebody-elses"))
			if err != nil {
				return err
			}
			return bk.Put([]byte("k"), []byte("v"))
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		write func(t *testing.T, path string)
	}{
		{"short text", func(t *testing.T, path string) {
			os.WriteFile(path, []byte("not a database\n"), 0o600)
		}},
		{"64 KiB of garbage", func(t *testing.T, path string) { os.WriteFile(path, garbage, 0o600) }},
		{"16 KiB of zeros", func(t *testing.T, path string) { os.WriteFile(path, make([]byte, 16<<10), 0o600) }},
		{"bbolt file of another program", otherBolt},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "devhook.db")
			c.write(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// A read-only Open says what to do and touches nothing.
			_, err = storage.Open(path, storage.Config{ReadOnly: true})
			if err == nil {
				t.Fatal("read-only Open succeeded")
			}
			for _, want := range []string{path, "move it away", "devhook listen"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Errorf("read-only Open changed the file: %d bytes before, %d after", len(before), len(after))
			}
			// A writable Open sets it aside, as it was, and says so.
			_, err = storage.Open(path, storage.Config{Logf: t.Logf})
			wantSetAside(t, err, path, before)
			// The next Open starts a new store.
			db, err := storage.Open(path, storage.Config{LockTimeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatalf("Open after the file was set aside: %v", err)
			}
			db.Close()
		})
	}
}

// wantSetAside checks that err says the file at path was damaged and set
// aside, and that it was: the one path.damaged-* file is before, byte for
// byte, and path is gone.
func wantSetAside(t *testing.T, err error, path string, before []byte) {
	t.Helper()
	if err == nil {
		t.Fatal("Open succeeded")
	}
	if !errors.Is(err, storage.ErrDamaged) {
		t.Errorf("error %q does not wrap ErrDamaged", err)
	}
	all, _ := filepath.Glob(path + ".damaged-*")
	var asides []string
	for _, a := range all {
		if !strings.HasSuffix(a, ".bodies") { // its body files, moved with it
			asides = append(asides, a)
		}
	}
	if len(asides) != 1 {
		t.Fatalf("set aside: %v, want one file", asides)
	}
	for _, want := range []string{path, "damaged", "moved it to " + asides[0], "kept as evidence", "start devhook again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if got, _ := os.ReadFile(asides[0]); !bytes.Equal(got, before) {
		t.Errorf("%s is not the damaged file as it was", asides[0])
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", path, err)
	}
}

func TestDelivery_RoundTrip(t *testing.T) {
	binary := make([]byte, 512)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789abcdef\x00\xff"), 5<<20/18+1)[:5<<20]
	for _, c := range []struct {
		name string
		edit func(d *devhook.Delivery)
	}{
		{"json", func(d *devhook.Delivery) {}},
		{"binary body", func(d *devhook.Delivery) { d.Body = binary; d.Event = devhook.Event{} }},
		{"nil body", func(d *devhook.Delivery) { d.Body = nil; d.Event = devhook.Event{} }},
		{"empty body", func(d *devhook.Delivery) { d.Body = []byte{}; d.Event = devhook.Event{} }},
		{"5 MiB body", func(d *devhook.Delivery) { d.Body = big; d.Event = devhook.Event{} }},
		{"repeated headers", func(d *devhook.Delivery) {
			d.Header = http.Header{
				"Set-Cookie": {"b=2", "a=1", "b=2", ""},
				"X-Empty":    {},
				"Accept":     {"text/plain", "application/json"},
			}
		}},
		{"every field", func(d *devhook.Delivery) {
			d.RawQuery = "a=1&a=2&b=%20"
			d.RemoteAddr = "203.0.113.9:4711"
			d.Queued = true
			d.Method = http.MethodPut
			d.Path = "/a/b%2Fc"
			d.ReceivedAt = time.Date(2026, 1, 2, 3, 4, 5, 6789, time.FixedZone("x", 3600))
			d.Verdict = devhook.Verdict{Result: devhook.VerdictInvalidTime, Reason: "t is 6 minutes old", Status: 400, Text: "bad t", T: 1767323045000}
		}},
		{"zero time, no header", func(d *devhook.Delivery) { d.ReceivedAt = time.Time{}; d.Header = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := MustOpenDB(t, storage.Config{})
			d := newDelivery(1)
			c.edit(d)
			mustPut(t, db, d)
			got, err := db.Delivery(d.ID)
			if err != nil {
				t.Fatal(err)
			}
			sameDelivery(t, got, d)
			// The summary agrees with Summarize.
			list, err := db.List(devhook.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			want := d.Summarize()
			if len(list) != 1 || !list[0].ReceivedAt.Equal(want.ReceivedAt) {
				t.Fatalf("List = %+v, want [%+v]", list, want)
			}
			list[0].ReceivedAt = want.ReceivedAt
			if !reflect.DeepEqual(list[0], want) {
				t.Errorf("summary =\n%+v\nwant\n%+v", list[0], want)
			}
		})
	}
}

func TestDelivery_ReturnedDataIsCopied(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	d := newDelivery(1)
	mustPut(t, db, d)
	got, err := db.Delivery(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Write more so that bbolt remaps and reuses pages; the returned body
	// and header must not change.
	want := append([]byte{}, got.Body...)
	for i := 2; i < 300; i++ {
		mustPut(t, db, newDelivery(i))
	}
	for i := range got.Body {
		got.Body[i] = 'x' // must not fault: the body is not in the read-only map
	}
	got2, _ := db.Delivery(d.ID)
	if !bytes.Equal(got2.Body, want) {
		t.Errorf("stored body changed by writing to a returned copy")
	}
}

func TestPutDelivery_Redelivery(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	d := newDelivery(1)
	mustPut(t, db, d)
	again := newDelivery(1)
	again.Body = []byte("different")
	again.Event = devhook.Event{}
	created, err := db.PutDelivery(again)
	if err != nil || created {
		t.Fatalf("PutDelivery(same id) = %v, %v; want false, nil", created, err)
	}
	got, err := db.Delivery(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameDelivery(t, got, d)
	if n, err := db.Count(); err != nil || n != 1 {
		t.Errorf("Count() = %d, %v; want 1", n, err)
	}
}

func TestPutDelivery_Invalid(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	for _, c := range []struct {
		name string
		d    *devhook.Delivery
	}{
		{"nil", nil},
		{"empty id", &devhook.Delivery{}},
		{"NUL in id", &devhook.Delivery{ID: "a\x00b"}},
		{"long id", &devhook.Delivery{ID: strings.Repeat("a", 1000)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			created, err := db.PutDelivery(c.d)
			if created || devhook.ErrorCode(err) != devhook.EINVALID {
				t.Errorf("PutDelivery = %v, %v; want false and an %s error", created, err, devhook.EINVALID)
			}
		})
	}
	if n, _ := db.Count(); n != 0 {
		t.Errorf("Count() = %d after invalid puts", n)
	}
}

func TestDelivery_NotFound(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	mustPut(t, db, newDelivery(1))
	// Ids come from URLs: ids that could never be stored are not found
	// either, rather than invalid.
	for _, id := range []string{id(2), "", "a\x00b", strings.Repeat("a", 1000)} {
		if _, err := db.Delivery(id); devhook.ErrorCode(err) != devhook.ENOTFOUND {
			t.Errorf("Delivery(%.20q) error = %v, want %s", id, err, devhook.ENOTFOUND)
		}
		if _, err := db.AddAttempt(id, devhook.Attempt{}); devhook.ErrorCode(err) != devhook.ENOTFOUND {
			t.Errorf("AddAttempt(%.20q) error = %v, want %s", id, err, devhook.ENOTFOUND)
		}
	}
}

func newAttempt(i int) devhook.Attempt {
	return devhook.Attempt{
		Kind:      devhook.AttemptForward,
		Target:    "http://127.0.0.1:8080/hook",
		StartedAt: t0.Add(time.Duration(i) * time.Millisecond),
		Duration:  devhook.Duration(time.Duration(i)*time.Millisecond + 300*time.Microsecond),
		Status:    200 + i%5,
		Header:    http.Header{"Content-Type": {"text/plain"}, "Set-Cookie": {"a=1", "b=2"}},
		Body:      []byte(fmt.Sprintf("answer %d \x00\xff", i)),
	}
}

func TestAddAttempt(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	d := newDelivery(1)
	mustPut(t, db, d)
	mustPut(t, db, newDelivery(2)) // its attempts must not mix with d's

	// More than 255 attempts, so that an encoding of seq whose byte order
	// is not numeric order would show.
	var want []devhook.Attempt
	for i := 1; i <= 260; i++ {
		a := newAttempt(i)
		switch i {
		case 2:
			a.Kind, a.Status, a.Header, a.Body, a.Error = devhook.AttemptRedelivery, 0, nil, nil, "connection refused"
		case 3:
			a.Kind = devhook.AttemptReplay
			a.Request = &devhook.Request{Method: "POST", Path: "/x", RawQuery: "q=1",
				Header: http.Header{"A": {"1", "2"}}, Body: []byte{0, 1, 2}, Resigned: true}
		}
		got, err := db.AddAttempt(d.ID, a)
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != i {
			t.Fatalf("attempt %d: Seq = %d", i, got.Seq)
		}
		a.Seq = i
		want = append(want, a)
	}
	if _, err := db.AddAttempt(id(2), newAttempt(1)); err != nil {
		t.Fatal(err)
	}
	got, err := db.Delivery(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	d.Attempts = want
	sameDelivery(t, got, d)

	// The list row shows the last attempt.
	list, err := db.List(devhook.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	last := want[len(want)-1]
	s := list[1]
	if s.ID != d.ID || s.Attempts != 260 || s.Status != last.Status || s.Duration != last.Duration || s.Error != "" {
		t.Errorf("summary = %+v, want 260 attempts, status %d, duration %v", s, last.Status, last.Duration)
	}
}

func TestConcurrentWrites(t *testing.T) {
	db := MustOpenDB(t, storage.Config{MaxDeliveries: -1})
	const writers, each = 16, 40
	shared := newDelivery(0)
	shared.ID = "shared"
	mustPut(t, db, shared)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				d := newDelivery(w*each + i)
				if _, err := db.PutDelivery(d); err != nil {
					errs <- err
					return
				}
				// Every writer adds an attempt to a shared delivery too.
				if _, err := db.AddAttempt("shared", newAttempt(i)); err != nil {
					errs <- err
					return
				}
				// A write that fails in a shared commit fails alone.
				if i%5 == 0 {
					if _, err := db.AddAttempt("missing", newAttempt(i)); devhook.ErrorCode(err) != devhook.ENOTFOUND {
						errs <- fmt.Errorf("AddAttempt(missing) error = %v, want %s", err, devhook.ENOTFOUND)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, err := db.Count(); err != nil || n != writers*each+1 {
		t.Fatalf("Count() = %d, %v; want %d", n, err, writers*each+1)
	}
	d, err := db.Delivery("shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attempts) != writers*each {
		t.Fatalf("%d attempts, want %d", len(d.Attempts), writers*each)
	}
	for i, a := range d.Attempts {
		if a.Seq != i+1 {
			t.Fatalf("attempt %d has Seq %d", i, a.Seq)
		}
	}
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := newDelivery(1)
	mustPut(t, db, d, newDelivery(2))
	a, err := db.AddAttempt(d.ID, newAttempt(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = MustOpenPath(t, path, storage.Config{})
	got, err := db.Delivery(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	d.Attempts = []devhook.Attempt{a}
	sameDelivery(t, got, d)
	if n, err := db.Count(); err != nil || n != 2 {
		t.Errorf("Count() = %d, %v; want 2", n, err)
	}
	// Seq continues after a reopen.
	if a, err := db.AddAttempt(d.ID, newAttempt(2)); err != nil || a.Seq != 2 {
		t.Errorf("AddAttempt after reopen: Seq %d, %v; want 2", a.Seq, err)
	}
}

func TestOpen_NewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return m.Put([]byte("version"), []byte{0, 0, 0, 0, 0, 0, 0, 99})
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	db, err := storage.Open(path, storage.Config{})
	if err == nil {
		db.Close()
		t.Fatal("Open of a file from a newer devhook succeeded")
	}
	if !strings.Contains(err.Error(), "newer devhook") || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("error %q does not say to upgrade", err)
	}
}

func TestPutDelivery_HostileRunID(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	for i, runID := range []string{strings.Repeat("r", 40<<10), "a\x00b"} {
		d := newDelivery(i)
		quoted, _ := json.Marshal(runID)
		d.Body = fmt.Appendf(nil, `{"event_type":"run.status","data":{"run_id":%s}}`, quoted)
		d.Event = devhook.ParseEvent(d.Body)
		if d.Event.RunID != runID {
			t.Fatalf("test body parsed to run id %.20q", d.Event.RunID)
		}
		mustPut(t, db, d)
		got, err := db.Delivery(d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Event.RunID != runID {
			t.Errorf("stored run id %.20q, want %.20q", got.Event.RunID, runID)
		}
	}
	if rs, err := db.RunDeliveries("a"); err != nil || len(rs) != 0 {
		t.Errorf(`RunDeliveries("a") = %v, %v; want none`, rs, err)
	}
}

// bboltPageSize reads the page size in the first meta page of a bbolt
// file: after the page header (16 bytes), the magic and the version.
func bboltPageSize(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 28 {
		t.Fatalf("%s: %d bytes", path, len(b))
	}
	return int(binary.LittleEndian.Uint32(b[24:]))
}

// A new store has the OS's page size (larger pages need that much free
// room for each page a commit copies, which a nearly full disk lacks); a
// store made with other pages (64 KiB, as a build of this work made
// them) opens with its own, takes new deliveries and keeps them.
func TestOpen_PageSizeOfNewAndOlderFiles(t *testing.T) {
	dir := t.TempDir()
	fresh := filepath.Join(dir, "new.db")
	db := MustOpenPath(t, fresh, storage.Config{})
	mustPut(t, db, newDelivery(1))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := bboltPageSize(t, fresh); got != os.Getpagesize() {
		t.Errorf("a new store has pages of %d bytes, want the OS's %d", got, os.Getpagesize())
	}

	older := filepath.Join(dir, "older.db")
	db, err := storage.Open(older, storage.WithPageSize(storage.Config{}, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, newDelivery(1))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, older, storage.Config{})
	mustPut(t, db, newDelivery(2))
	for i := 1; i <= 2; i++ {
		got, err := db.Delivery(newDelivery(i).ID)
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		sameDelivery(t, got, newDelivery(i))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := bboltPageSize(t, older); got != 64<<10 {
		t.Errorf("a store of 64 KiB pages has pages of %d bytes after a reopen", got)
	}
}
