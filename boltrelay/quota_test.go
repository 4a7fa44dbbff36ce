package boltrelay_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/storetest"
	"github.com/devhook/devhook/storage"
)

// The shared suite of relay stores: quotas, expiry, idle channels, a full
// disk, against relay.db.
func TestStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Store {
		s, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{
			Quota: cfg.Quota, WriteError: cfg.WriteError,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// fillQueue enqueues deliveries of size bytes to channel until the store
// refuses one with ErrChannelFull, and returns how many it took.
func fillQueue(t *testing.T, s *boltrelay.Store, channel string, size int) int {
	t.Helper()
	body := bytes.Repeat([]byte("b"), size)
	for n := 0; ; n++ {
		id, _ := uuid.NewV7()
		err := s.Enqueue(channel, &devhook.Delivery{ID: id.String(), Channel: channel, Method: "POST", Path: "/", Body: body, ReceivedAt: time.Now()})
		if errors.Is(err, relay.ErrChannelFull) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// drainQueue dequeues every delivery of channel, as an agent's acks do.
func drainQueue(t *testing.T, s *boltrelay.Store, channel string) {
	t.Helper()
	for {
		ds, err := s.Queued(channel, "", 16)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return
		}
		for _, d := range ds {
			if err := s.Dequeue(channel, d.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// Floods and drains, again and again: relay.db stays within the quota and
// bbolt's overhead, as the pages freed by each drain are reused by the
// next flood.
func TestStore_FileBoundedAcrossFloods(t *testing.T) {
	const quota = 8 << 20
	path := filepath.Join(t.TempDir(), "relay.db")
	s, err := boltrelay.Open(path, boltrelay.Config{Quota: relay.Quota{ChannelBytes: quota, TotalBytes: quota}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutChannel(relay.Channel{ID: "flood", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var first int64
	for round := range 6 {
		// Bodies of several sizes, so that freed runs of pages must be
		// reused by entries of other lengths.
		size := []int{64 << 10, 5 << 10, 200 << 10}[round%3]
		n := fillQueue(t, s, "flood", size)
		full := fileSize(t, path)
		drainQueue(t, s, "flood")
		t.Logf("round %d: %d deliveries of %d bytes; relay.db %d bytes full", round, n, size, full)
		if round == 0 {
			first = full
		}
		// bbolt's overhead: a page per leaf, half-empty branch pages, the
		// freelist, and file growth in steps.
		if full > 2*quota+4<<20 {
			t.Fatalf("round %d: relay.db is %d bytes with a quota of %d", round, full, quota)
		}
	}
	if last := fileSize(t, path); last > first+first/2 {
		t.Fatalf("relay.db grew from %d to %d bytes over the floods: freed pages not reused", first, last)
	}
}

// Compaction gives the pages of a drained flood back to the disk and
// keeps what is queued and parked, byte for byte; a running relay (the
// file locked) is refused with ErrLocked and its file left alone.
func TestCompact(t *testing.T) {
	const quota = 8 << 20
	path := filepath.Join(t.TempDir(), "relay.db")
	s, err := boltrelay.Open(path, boltrelay.Config{Quota: relay.Quota{ChannelBytes: quota, TotalBytes: quota}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutChannel(relay.Channel{ID: "flood", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	fillQueue(t, s, "flood", 64<<10)
	drainQueue(t, s, "flood")
	var kept []*devhook.Delivery
	for i := range 3 {
		id, _ := uuid.NewV7()
		d := &devhook.Delivery{ID: id.String(), Channel: "flood", Method: "POST", Path: "/", Body: bytes.Repeat([]byte{byte('a' + i)}, 10<<10), ReceivedAt: time.Now().UTC()}
		if err := s.Enqueue("flood", d); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, d)
	}
	if err := s.Park("flood", kept[2].ID, "too large for the agent"); err != nil {
		t.Fatal(err)
	}

	before := fileSize(t, path)
	if _, err := boltrelay.Compact(path, 50*time.Millisecond); !errors.Is(err, storage.ErrLocked) {
		t.Fatalf("compacting the file of a running relay: %v, want ErrLocked", err)
	}
	if got := fileSize(t, path); got != before {
		t.Fatalf("a refused compaction changed the file: %d → %d bytes", before, got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A copy left by a compaction that was killed: replaced.
	if err := os.WriteFile(path+".compact", []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := boltrelay.Compact(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("relay.db: %d → %d bytes", res.Before, res.After)
	if res.Before != before || res.After != fileSize(t, path) || res.After > 1<<20 {
		t.Fatalf("compaction: %+v (file %d before, %d after); want the drained flood's pages given back", res, before, fileSize(t, path))
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the compacted copy is left beside: %v", err)
	}

	s = mustOpen(t, path)
	got, err := s.Queued("flood", "", 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("after compaction: %d queued, %v; want 2", len(got), err)
	}
	for i, d := range got {
		if d.ID != kept[i].ID || !bytes.Equal(d.Body, kept[i].Body) {
			t.Fatalf("after compaction, delivery %d is %s", i, d.ID)
		}
	}
	p, err := s.ParkedDelivery(kept[2].ID)
	if err != nil || p.Reason != "too large for the agent" || !bytes.Equal(p.Delivery.Body, kept[2].Body) {
		t.Fatalf("parked after compaction: %+v, %v", p, err)
	}
	if _, err := s.Channel("flood"); err != nil {
		t.Fatal(err)
	}
	if b, n, _ := s.QueueUsage("flood"); n != 2 || b < 20<<10 {
		t.Fatalf("after compaction the quota counts %d deliveries, %d bytes", n, b)
	}
}
