package storage_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// logRecorder is a Config.Logf that keeps what it hears.
type logRecorder struct {
	mu sync.Mutex
	l  []string
	ch chan string
}

func newLogRecorder() *logRecorder { return &logRecorder{ch: make(chan string, 1000)} }

func (r *logRecorder) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.l = append(r.l, line)
	r.mu.Unlock()
	if r.ch != nil {
		select {
		case r.ch <- line:
		default:
		}
	}
}

func (r *logRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.l)
}

// waitFor returns the first line, heard from now on, that contains every
// one of want, waiting up to 10 s.
func (r *logRecorder) waitFor(t *testing.T, want ...string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line := <-r.ch:
			if containsAll(line, want...) {
				return line
			}
		case <-timeout:
			t.Fatalf("no log line with %q within 10 s; heard %q", want, r.lines())
		}
	}
}

func containsAll(s string, want ...string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// Every failure mode of the files beside the store, from its fixture, with
// what Open must do.
func TestOpen_DamagedFiles(t *testing.T) {
	all := make([]int, fixtureN)
	for i := range all {
		all[i] = i
	}
	allBut := slices.DeleteFunc(slices.Clone(all), func(i int) bool { return i == fixtureDamaged })
	for _, c := range []struct {
		fixture  string
		file     string   // its name in the data directory
		wantErr  []string // nil: Open succeeds
		kept     []int    // deliveries recorded, each with its attempt
		setAside bool     // renamed to <file>.damaged-<time>
		wantLog  [][]string
	}{
		{fixture: "journal-intact.journal0", file: "devhook.db.journal0", kept: all},
		{fixture: "journal-torn-tail.journal0", file: "devhook.db.journal0", kept: all},
		{fixture: "journal-damaged-middle.journal0", file: "devhook.db.journal0", kept: allBut, setAside: true,
			wantLog: [][]string{{"1 attempt(s)", "not recorded"}, {"was damaged", "23 intact records", "kept as"}}},
		{fixture: "journal-damaged-length.journal0", file: "devhook.db.journal0", kept: allBut, setAside: true,
			wantLog: [][]string{{"1 attempt(s)", "not recorded"}, {"was damaged", "23 intact records", "kept as"}}},
		{fixture: "journal-wrong-magic.journal0", file: "devhook.db.journal1", setAside: true,
			wantLog: [][]string{{"not a devhook journal", "magic", "nothing was read", "kept as"}}},
		{fixture: "journal-newer-version.journal0", file: "devhook.db.journal0",
			wantErr: []string{"newer devhook", "upgrade devhook", "journal format 99"}},
		{fixture: "journal2-intact.journal0", file: "devhook.db.journal0", kept: all},
		{fixture: "journal2-torn-tail.journal0", file: "devhook.db.journal1", kept: all},
		{fixture: "journal2-truncated.journal0", file: "devhook.db.journal0", kept: []int{0, 1, 2, 3}},
		{fixture: "journal2-damaged-middle.journal0", file: "devhook.db.journal0", kept: allBut, setAside: true,
			wantLog: [][]string{{"1 attempt(s)", "not recorded"}, {"was damaged", "23 intact records", "kept as"}}},
		{fixture: "journal2-damaged-start.journal0", file: "devhook.db.journal0", kept: all, setAside: true,
			wantLog: [][]string{{"was damaged", "start sequence number", "24 intact records", "kept as"}}},
		// The earlier round's records after the last round's are
		// bbolt's already: not read (here, with an empty store beside
		// it, they would be there).
		{fixture: "journal2-stale-tail.journal0", file: "devhook.db.journal0", kept: []int{fixtureN, fixtureN + 1}},
		{fixture: "journal2-damaged-stale.journal0", file: "devhook.db.journal0", kept: []int{fixtureN, fixtureN + 1}, setAside: true,
			wantLog: [][]string{{"was damaged", "earlier round damaged", "4 intact records", "kept as"}}},
		{fixture: "journal2-junk-after.journal0", file: "devhook.db.journal1", kept: all, setAside: true,
			wantLog: [][]string{{"was damaged", "1 bytes after the end of what was written to it are not zeros", "24 intact records", "kept as"}}},
		{fixture: "journal2-zeros.journal0", file: "devhook.db.journal1"},
		{fixture: "journal2-empty.journal0", file: "devhook.db.journal0"},
		{fixture: "journal2-newer-version.journal0", file: "devhook.db.journal0",
			wantErr: []string{"newer devhook", "upgrade devhook", "journal format 3"}},
		{fixture: "db-truncated.db", file: "devhook.db", wantErr: []string{"cut short", "kept as evidence"}, setAside: true},
		{fixture: "db-empty.db", file: "devhook.db", wantErr: []string{"empty", "kept as evidence"}, setAside: true},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			dir := t.TempDir()
			fixture := copyFixture(t, c.fixture, dir, c.file)
			path := filepath.Join(dir, "devhook.db")
			logs := newLogRecorder()
			db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1,
				Now: func() time.Time { return t0 }, Logf: logs.logf})
			if c.wantErr != nil {
				if err == nil {
					db.Close()
					t.Fatal("Open succeeded")
				}
				if !containsAll(err.Error(), c.wantErr...) {
					t.Errorf("error %q, want it to say %q", err, c.wantErr)
				}
				if c.setAside {
					wantSetAside(t, err, filepath.Join(dir, c.file), fixture)
				} else if got, _ := os.ReadFile(filepath.Join(dir, c.file)); !bytes.Equal(got, fixture) {
					t.Errorf("Open changed %s", c.file)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if n, err := db.Count(); err != nil || n != len(c.kept) {
				t.Errorf("Count() = %d, %v; want %d", n, err, len(c.kept))
			}
			for _, i := range c.kept {
				d, err := db.Delivery(id(i))
				if err != nil {
					t.Fatalf("delivery %d: %v", i, err)
				}
				if len(d.Attempts) != 1 || d.Attempts[0].Status != newAttempt(i).Status {
					t.Errorf("delivery %d has attempts %+v, want its one attempt", i, d.Attempts)
				}
			}
			aside := filepath.Join(dir, c.file+".damaged-"+t0.UTC().Format("20060102T150405Z"))
			got, err := os.ReadFile(aside)
			switch {
			case c.setAside && err != nil:
				t.Errorf("the damaged file was not set aside: %v", err)
			case c.setAside && !bytes.Equal(got, fixture):
				t.Errorf("the file set aside is not the damaged file as it was")
			case !c.setAside && err == nil:
				t.Errorf("%s set aside, want it applied and removed", c.file)
			}
			if _, err := os.Stat(filepath.Join(dir, c.file)); !os.IsNotExist(err) {
				t.Errorf("%s still there after Open: %v", c.file, err)
			}
			lines := logs.lines()
			if len(lines) != len(c.wantLog) {
				t.Errorf("logged %q, want %d lines", lines, len(c.wantLog))
			}
			for _, want := range c.wantLog {
				if !slices.ContainsFunc(lines, func(l string) bool { return containsAll(l, want...) }) {
					t.Errorf("logged %q, want a line with %q", lines, want)
				}
			}
			if c.setAside && !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, aside) }) {
				t.Errorf("logged %q, want the name of the file set aside, %s", lines, aside)
			}
		})
	}
}

// A deliveries file cut to any length is refused with the message that
// says what to do, never a crash (bbolt would read past its mapping), and
// is left as it was; unless the cut takes only space bbolt has not used
// yet, and the store opens whole.
func TestOpen_TruncatedStore(t *testing.T) {
	whole := storeFixture(t)
	var sizes []int
	for n := 0; n <= 64<<10; n += 4 << 10 {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 1, 79, 80, 4095, 4097, 8191, 12345, 40000, 65535, len(whole)-4096, len(whole)-1)
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "devhook.db")
			if err := os.WriteFile(path, whole[:n], 0o600); err != nil {
				t.Fatal(err)
			}
			ro, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1, ReadOnly: true})
			if err == nil {
				ro.Close()
			} else if !strings.Contains(err.Error(), "move it away") {
				t.Errorf("read-only: error %q does not say to move the file away", err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, whole[:n]) {
				t.Fatalf("a read-only Open changed the file")
			}
			db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
			if err == nil {
				defer db.Close()
				if n <= 64<<10 {
					t.Fatalf("Open of the first %d of %d bytes succeeded", n, len(whole))
				}
				if c, err := db.Count(); err != nil || c != 200 {
					t.Fatalf("opened the first %d bytes: Count() = %d, %v; want the 200 deliveries", n, c, err)
				}
				if _, err := db.Delivery(id(199)); err != nil {
					t.Fatalf("opened the first %d bytes: %v", n, err)
				}
				return
			}
			wantSetAside(t, err, path, whole[:n])
		})
	}
}

// While bbolt cannot take writes (a full disk), writes still go to the
// journal and reads see them; the store resumes by itself when bbolt takes
// writes again. Past journalMaxBytes waiting, writes fail, and succeed
// again afterwards.
func TestJournal_DatabaseRefusesWrites(t *testing.T) {
	logs := newLogRecorder()
	path := filepath.Join(t.TempDir(), "devhook.db")
	cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: logs.logf}
	db := MustOpenPath(t, path, cfg)
	mustPut(t, db, newDelivery(0))
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxSize(int(fi.Size()))
	const n = 300
	for i := 1; i < n; i++ {
		mustPut(t, db, newDelivery(i))
		if _, err := db.AddAttempt(id(i), newAttempt(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err == nil {
		t.Fatal("Flush succeeded beyond the database's size limit")
	}
	logs.waitFor(t, "cannot write to", path)

	// Reads work, and see every write.
	if c, err := db.Count(); err != nil || c != n {
		t.Errorf("Count() = %d, %v; want %d", c, err, n)
	}
	list, err := db.List(devhook.Filter{Limit: 3})
	if err != nil || len(list) != 3 || list[0].ID != id(n-1) || list[0].Attempts != 1 || list[0].Status != newAttempt(n-1).Status {
		t.Errorf("List = %+v, %v; want the newest first, with its attempt", list, err)
	}
	if d, err := db.Delivery(id(n / 2)); err != nil || len(d.Attempts) != 1 {
		t.Errorf("Delivery = %+v, %v; want it with its attempt", d, err)
	}
	if rs, err := db.RunDeliveries("run-3"); err != nil || len(rs) != (n-3+6)/7 || rs[0].ID != id(3) {
		t.Errorf("RunDeliveries(run-3) = %d, %v; want %d, oldest first", len(rs), err, (n-3+6)/7)
	}

	// Writes fail once too much waits, and the journal keeps its records.
	big := newDelivery(n)
	big.Body = bytes.Repeat([]byte("b"), 1<<20)
	var werr error
	for i := n; i < n+40 && werr == nil; i++ {
		big.ID = id(i)
		_, werr = db.PutDelivery(big)
	}
	if werr == nil || !strings.Contains(werr.Error(), "cannot take them") {
		t.Fatalf("PutDelivery with 40 MiB waiting: %v, want an error", werr)
	}

	// Space returns: the flusher retries by itself.
	db.SetMaxSize(0)
	logs.waitFor(t, "takes writes again")
	if p := db.Pending(); p != 0 {
		t.Errorf("%d records pending after the database took writes again", p)
	}
	big.ID = id(n + 100)
	if _, err := db.PutDelivery(big); err != nil {
		t.Errorf("PutDelivery after the database took writes again: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, cfg)
	if d, err := db.Delivery(id(n / 2)); err != nil || len(d.Attempts) != 1 {
		t.Errorf("after reopening: %+v, %v; want delivery %d with its attempt", d, err, n/2)
	}
}

// A record that bbolt refuses (here: an attempt of a delivery whose
// summary is damaged) is kept aside and reported; the rest of its batch is
// applied, and the flush does not fail.
func TestJournal_RecordTheDatabaseRefuses(t *testing.T) {
	logs := newLogRecorder()
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{Logf: logs.logf})
	mustPut(t, db, newDelivery(1))
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	release := db.HoldFlushes()
	if _, err := db.AddAttempt(id(1), newAttempt(1)); err != nil {
		t.Fatal(err)
	}
	if err := db.CorruptSummary(id(1)); err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, newDelivery(2))
	if _, err := db.AddAttempt(id(2), newAttempt(2)); err != nil {
		t.Fatal(err)
	}
	release()
	if err := db.Flush(); err != nil {
		t.Fatalf("Flush: %v, want the other records applied", err)
	}
	if p := db.Pending(); p != 0 {
		t.Errorf("%d records still pending", p)
	}
	if d, err := db.Delivery(id(2)); err != nil || len(d.Attempts) != 1 {
		t.Errorf("delivery 2: %+v, %v; want it with its attempt", d, err)
	}
	if !slices.ContainsFunc(logs.lines(), func(l string) bool { return containsAll(l, "could not apply", path+".rejected") }) {
		t.Errorf("logged %q, want the rejected record reported", logs.lines())
	}
	if n, problem, err := storage.JournalRecords(path + ".rejected"); err != nil || n != 1 || problem != "" {
		t.Errorf("rejected file: %d records, %q, %v; want the one attempt", n, problem, err)
	}
}

// An attempt journaled for a delivery that retention removes before the
// attempt is applied is reported, not dropped silently.
func TestJournal_AttemptOfPrunedDelivery(t *testing.T) {
	logs := newLogRecorder()
	clk := newClock(t0)
	db := MustOpenDB(t, storage.Config{MaxAge: time.Hour, Now: clk.now, Logf: logs.logf})
	mustPut(t, db, newDelivery(0))
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	release := db.HoldFlushes()
	if _, err := db.AddAttempt(id(0), newAttempt(0)); err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(2 * time.Hour))
	if n, err := db.PruneApplied(); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want the delivery removed", n, err)
	}
	release()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(logs.lines(), func(l string) bool { return containsAll(l, "1 attempt(s)", "not recorded") }) {
		t.Errorf("logged %q, want the dropped attempt reported", logs.lines())
	}
}

// diskFullChildEnv makes the test binary run TestJournal_DiskFull's
// scenario in the directory it names, a small tmpfs of its own.
const diskFullChildEnv = "DEVHOOK_STORAGE_DISKFULL_DIR"

// On a full disk PutDelivery fails with ENOSPC and reads go on; once space
// returns, writes succeed again and nothing acknowledged is lost. The
// scenario runs in a child process with a private 4 MiB tmpfs (it needs
// root and unshare).
func TestJournal_DiskFull(t *testing.T) {
	if dir := os.Getenv(diskFullChildEnv); dir != "" {
		diskFullScenario(t, dir)
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare to mount a private tmpfs")
	}
	dir := t.TempDir()
	cmd := exec.Command("unshare", "-m", "sh", "-c",
		`mount -t tmpfs -o size=4m tmpfs "$0" || exit 77; exec "$1" -test.run='^TestJournal_DiskFull$' -test.v`, dir, os.Args[0])
	cmd.Env = append(os.Environ(), diskFullChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 77 {
		t.Skipf("cannot mount a tmpfs here: %s", out)
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestJournal_DiskFull")) {
		t.Fatalf("child did not run the scenario:\n%s", out)
	}
}

func diskFullScenario(t *testing.T, dir string) {
	path := filepath.Join(dir, "devhook.db")
	logs := newLogRecorder()
	cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: logs.logf}
	db := MustOpenPath(t, path, cfg)
	acked := 0
	var bodies [][]byte // of the deliveries acknowledged, by index
	for ; acked < 10; acked++ {
		mustPut(t, db, newDelivery(acked))
		bodies = append(bodies, newDelivery(acked).Body)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 16<<10)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	filler.Close()

	var werr error
	for i := acked; i < 10000; i++ {
		d := newDelivery(i)
		d.Body = append(d.Body, chunk...)
		if _, werr = db.PutDelivery(d); werr != nil {
			break
		}
		bodies = append(bodies, d.Body)
		acked++
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("PutDelivery on a full disk: %v, want ENOSPC", werr)
	}
	if n, err := db.Count(); err != nil || n != acked {
		t.Errorf("Count() on a full disk = %d, %v; want %d", n, err, acked)
	}
	if list, err := db.List(devhook.Filter{Limit: 1}); err != nil || len(list) != 1 || list[0].ID != id(acked-1) {
		t.Errorf("List on a full disk = %+v, %v; want the last delivery acknowledged", list, err)
	}

	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	last := newDelivery(acked)
	last.Body = append(last.Body, chunk...)
	mustPut(t, db, last)
	bodies = append(bodies, last.Body)
	acked++
	if err := db.Flush(); err != nil {
		t.Fatalf("Flush once space returned: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, cfg)
	if n, err := db.Count(); err != nil || n != acked {
		t.Errorf("after reopening: Count() = %d, %v; want every one of the %d acknowledged", n, err, acked)
	}
	// Their bodies, in body files (bodyfiles.go), whose writes failed
	// while the disk was full, byte for byte.
	for i, want := range bodies {
		if d, err := db.Delivery(id(i)); err != nil || !bytes.Equal(d.Body, want) {
			t.Fatalf("after reopening: delivery %d: %v, body intact: %v (%d bytes, want %d; starts %q)", i, err, err == nil && bytes.Equal(d.Body, want), len(d.Body), len(want), d.Body[:min(len(d.Body), 90)])
		}
	}
	if names, err := os.ReadDir(path + ".bodies"); err != nil || len(names) == 0 {
		t.Errorf("body files: %v, %v; want the large bodies there", names, err)
	}

	// Writers at once, whose records share writes, on a disk that fills
	// again: a call acknowledged is kept, a call refused is not, whichever
	// write its record shared.
	filler, err = os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(0)
	for {
		n, err := filler.Write(chunk)
		size += int64(n)
		if err != nil {
			break
		}
	}
	// Room for a hundred deliveries or so: the disk fills under the writers.
	if err := filler.Truncate(size - 512<<10); err != nil {
		t.Fatal(err)
	}
	filler.Close()
	const writers = 8
	var mu sync.Mutex
	attempts := map[int]int{} // acknowledged deliveries → their acknowledged attempts
	var refused []int
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 1000 {
				i := 100_000 + w*1000 + k
				d := newDelivery(i)
				d.Body = append(d.Body, chunk[:4<<10]...)
				if _, err := db.PutDelivery(d); err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						t.Errorf("PutDelivery on a full disk: %v, want ENOSPC", err)
					}
					mu.Lock()
					refused = append(refused, i)
					mu.Unlock()
					return
				}
				mu.Lock()
				attempts[i] = 0
				mu.Unlock()
				if _, err := db.AddAttempt(d.ID, newAttempt(i)); err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						t.Errorf("AddAttempt on a full disk: %v, want ENOSPC", err)
					}
					return
				}
				mu.Lock()
				attempts[i] = 1
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(refused) == 0 || len(attempts) < writers {
		t.Fatalf("%d deliveries acknowledged, %d refused: want the disk to fill under the writers", len(attempts), len(refused))
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, cfg)
	if n, err := db.Count(); err != nil || n != acked+len(attempts) {
		t.Errorf("after reopening: Count() = %d, %v; want the %d acknowledged", n, err, acked+len(attempts))
	}
	for i, n := range attempts {
		want := append(newDelivery(i).Body, chunk[:4<<10]...)
		if d, err := db.Delivery(id(i)); err != nil || len(d.Attempts) != n {
			t.Errorf("delivery %d: %v; want it with its %d acknowledged attempt(s)", i, err, n)
		} else if !bytes.Equal(d.Body, want) {
			t.Errorf("delivery %d: its body (%d bytes) is not the one acknowledged", i, len(d.Body))
		} else if n == 1 && d.Attempts[0].Seq != 1 {
			t.Errorf("delivery %d: attempt Seq %d, want 1", i, d.Attempts[0].Seq)
		}
	}
	for _, i := range refused {
		if _, err := db.Delivery(id(i)); devhook.ErrorCode(err) != devhook.ENOTFOUND {
			t.Errorf("delivery %d, refused: %v, want not found", i, err)
		}
	}
	t.Logf("%d writers on a full disk: %d deliveries acknowledged, %d refused", writers, len(attempts), len(refused))
}
