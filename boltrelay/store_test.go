package boltrelay_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
)

func mustOpen(tb testing.TB, path string) *boltrelay.Store {
	tb.Helper()
	s, err := boltrelay.Open(path, boltrelay.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func queuedDelivery(i int) *devhook.Delivery {
	return &devhook.Delivery{
		ID: fmt.Sprintf("0197a3c2-0000-7000-8000-%012d", i), Channel: "ch1", Method: "POST", Path: "/hook",
		RawQuery: "a=1&a=2", ReceivedAt: time.Unix(1_800_000_000, int64(i)).UTC(), RemoteAddr: "127.0.0.1:9",
		Header: http.Header{"X-Repeat": {"1", "2"}}, Body: []byte{0, 0xff, '\n', byte(i)}, Queued: true,
	}
}

func queuedIDsOf(ds []*devhook.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func TestStoreQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s := mustOpen(t, path)
	if got, err := s.Queued("ch1", "", 0); err != nil || len(got) != 0 {
		t.Fatalf("Queued on an empty channel = %v, %v", got, err)
	}
	for _, i := range []int{3, 1, 2, 5, 4, 1} {
		if err := s.Enqueue("ch1", queuedDelivery(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Enqueue("ch2", queuedDelivery(9)); err != nil {
		t.Fatal(err)
	}
	want := []string{queuedDelivery(1).ID, queuedDelivery(2).ID, queuedDelivery(3).ID, queuedDelivery(4).ID, queuedDelivery(5).ID}
	for _, c := range []struct {
		after string
		limit int
		want  []string
	}{
		{"", 0, want},
		{"", 2, want[:2]},
		{want[1], 2, want[2:4]},
		{want[4], 0, nil},
		{"0197a3c2-0000-7000-8000-0000000000025", 0, want[2:]}, // between two ids
	} {
		got, err := s.Queued("ch1", c.after, c.limit)
		if err != nil || !slices.Equal(queuedIDsOf(got), c.want) {
			t.Errorf("Queued(after %q, limit %d) = %v, %v; want %v", c.after, c.limit, queuedIDsOf(got), err, c.want)
		}
	}
	got, _ := s.Queued("ch1", "", 1)
	if w := queuedDelivery(1); !bytes.Equal(got[0].Body, w.Body) || !slices.Equal(got[0].Header["X-Repeat"], w.Header["X-Repeat"]) ||
		got[0].RawQuery != w.RawQuery || !got[0].ReceivedAt.Equal(w.ReceivedAt) || !got[0].Queued {
		t.Fatalf("queued delivery changed: %+v", got[0])
	}
	for _, id := range []string{want[0], want[0], want[3]} { // repeats are not errors
		if err := s.Dequeue("ch1", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Dequeue("nochannel", want[0]); err != nil {
		t.Fatal(err)
	}
	// Everything survives a reopen.
	s.Close()
	s = mustOpen(t, path)
	got, err := s.Queued("ch1", "", 0)
	if err != nil || !slices.Equal(queuedIDsOf(got), []string{want[1], want[2], want[4]}) {
		t.Fatalf("after reopen: %v, %v", queuedIDsOf(got), err)
	}
	if n, err := s.QueueLen("ch2"); err != nil || n != 1 {
		t.Fatalf("QueueLen(ch2) = %d, %v", n, err)
	}
	for _, bad := range []func() error{
		func() error { return s.Enqueue("", queuedDelivery(1)) },
		func() error { return s.Enqueue("ch1", &devhook.Delivery{}) },
		func() error { return s.Enqueue("ch1", nil) },
		func() error { return s.Dequeue("ch1", "") },
		func() error { return s.Park("ch1", strings.Repeat("x", 300), "why") },
	} {
		if err := bad(); devhook.ErrorCode(err) != devhook.EINVALID {
			t.Errorf("invalid input: %v, want EINVALID", err)
		}
	}
}

func TestStoreChannels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s := mustOpen(t, path)
	ch := relay.Channel{ID: "abc", TokenHash: []byte{1, 2, 3}, CreatedAt: time.Unix(1_800_000_000, 0).UTC()}
	if err := s.PutChannel(ch); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = mustOpen(t, path)
	got, err := s.Channel("abc")
	if err != nil || got.ID != ch.ID || !bytes.Equal(got.TokenHash, ch.TokenHash) || !got.CreatedAt.Equal(ch.CreatedAt) {
		t.Fatalf("Channel = %+v, %v", got, err)
	}
	for _, id := range []string{"nope", "", strings.Repeat("x", 300), "a\x00b"} {
		if _, err := s.Channel(id); devhook.ErrorCode(err) != devhook.ENOTFOUND {
			t.Errorf("Channel(%q): %v, want ENOTFOUND", id, err)
		}
	}
}

// A queued entry that cannot be decoded is named, the ones before it are
// returned, and Park moves it aside with its reason.
func TestStoreUnreadableAndPark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s := mustOpen(t, path)
	for _, i := range []int{1, 3} {
		if err := s.Enqueue("ch1", queuedDelivery(i)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	badID := queuedDelivery(2).ID
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("queue")).Bucket([]byte("ch1")).Put([]byte(badID), []byte{0xee, 1, 2})
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path)
	got, err := s.Queued("ch1", "", 0)
	var ue *relay.UnreadableError
	if !errors.As(err, &ue) || ue.ID != badID || !slices.Equal(queuedIDsOf(got), []string{queuedDelivery(1).ID}) {
		t.Fatalf("Queued = %v, %v; want the first delivery and an UnreadableError for %s", queuedIDsOf(got), err, badID)
	}
	if err := s.Park("ch1", badID, "cannot be read"); err != nil {
		t.Fatal(err)
	}
	if err := s.Park("ch1", queuedDelivery(3).ID, "too large"); err != nil {
		t.Fatal(err)
	}
	if err := s.Park("ch1", "not-queued", "why"); err != nil {
		t.Fatal(err)
	}
	got, err = s.Queued("ch1", "", 0)
	if err != nil || !slices.Equal(queuedIDsOf(got), []string{queuedDelivery(1).ID}) {
		t.Fatalf("after Park: %v, %v", queuedIDsOf(got), err)
	}
	parked, err := s.ListParked("ch1")
	if err != nil || len(parked) != 2 || parked[0].ID != badID || parked[0].Reason != "cannot be read" || parked[0].Delivery != nil ||
		parked[1].Reason != "too large" || parked[1].Delivery == nil {
		t.Fatalf("ListParked = %+v, %v", parked, err)
	}
	if p, err := s.ParkedDelivery(parked[1].ID); err != nil || !bytes.Equal(p.Delivery.Body, queuedDelivery(3).Body) {
		t.Fatalf("ParkedDelivery = %+v, %v", p, err)
	}
}

// A relay.db that earlier devhooks wrote (one storage.DB for agent and
// relay) keeps its channels and queue.
func TestStoreOpensCombinedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	copyFile(t, filepath.Join("testdata", "relay-combined.db"), path)
	s := mustOpen(t, path)
	ch, err := s.Channel("0123456789abcdef0123456789abcdef")
	if err != nil || len(ch.TokenHash) != 32 {
		t.Fatalf("channel of the old file: %+v, %v", ch, err)
	}
	got, err := s.Queued(ch.ID, "", 0)
	if err != nil || len(got) != 1 || string(got[0].Body) != "queued before the upgrade" {
		t.Fatalf("queue of the old file: %v, %v", got, err)
	}
}

func TestStoreRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.db")
	b, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
	b.Close()
	text := filepath.Join(dir, "text.db")
	os.WriteFile(text, bytes.Repeat([]byte("not a database\n"), 1000), 0o600)
	for _, p := range []string{foreign, text} {
		if _, err := boltrelay.Open(p, boltrelay.Config{}); err == nil || !strings.Contains(err.Error(), "move it away") {
			t.Errorf("open %s: %v, want the damaged-file error", filepath.Base(p), err)
		}
	}
	path := filepath.Join(dir, "relay.db")
	mustOpen(t, path)
	if _, err := boltrelay.Open(path, boltrelay.Config{LockTimeout: 50 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Errorf("second open: %v, want a locked error", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// Concurrent writes share commits and each returns once its own is done.
func TestStoreConcurrentWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s := mustOpen(t, path)
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.Enqueue("ch1", queuedDelivery(i)); err != nil {
				t.Error(err)
			}
			if got, err := s.Queued("ch1", queuedDelivery(i-1).ID, 1); err != nil || len(got) != 1 || got[0].ID != queuedDelivery(i).ID {
				t.Errorf("delivery %d not readable once Enqueue returned: %v %v", i, queuedIDsOf(got), err)
			}
		})
		wg.Go(func() {
			if err := s.PutChannel(relay.Channel{ID: fmt.Sprint("c", i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if q, err := s.QueueLen("ch1"); err != nil || q != n {
		t.Fatalf("QueueLen = %d, %v; want %d", q, err, n)
	}
}

// A relay.db cut short or emptied is refused with the message that says to
// move it away, as the delivery store's is: bbolt never maps it (it would
// read past the end of the file and crash), and the file is left as it was.
func TestStoreRefusesCutShortFile(t *testing.T) {
	src := filepath.Join(t.TempDir(), "relay.db")
	s := mustOpen(t, src)
	for i := range 300 {
		d := &devhook.Delivery{ID: fmt.Sprintf("id-%04d", i), Method: "POST", Path: "/", Body: bytes.Repeat([]byte{'x'}, 512)}
		if err := s.Enqueue("ch", d); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 4096, 8192, 16384, 32768} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relay.db")
			if err := os.WriteFile(path, whole[:n], 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := boltrelay.Open(path, boltrelay.Config{})
			if err == nil {
				s.Close()
				t.Fatalf("Open of the first %d of %d bytes succeeded", n, len(whole))
			}
			if !strings.Contains(err.Error(), "move it away") {
				t.Errorf("error %q does not say to move the file away", err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, whole[:n]) {
				t.Error("Open changed the file")
			}
		})
	}
}
