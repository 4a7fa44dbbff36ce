package boltrelay_test

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

// runDelivery is queued delivery i of channel: a run.status body of
// about size bytes, of run "run-<i%runs>" (no run when runs is 0).
func runDelivery(i, runs, size int) *devhook.Delivery {
	var b bytes.Buffer
	b.WriteString(`{"event_type":"run.status","data":{`)
	if runs > 0 {
		fmt.Fprintf(&b, `"run_id":"run-%d",`, i%runs)
	}
	b.WriteString(`"status":"running","log":"`)
	for b.Len() < size-4 {
		b.WriteByte('x')
	}
	b.WriteString(`"}}`)
	return &devhook.Delivery{
		ID:      fmt.Sprintf("0197a3c2-0000-7000-8000-%012d", i),
		Channel: "ch1", Method: "POST", Path: "/hook", ReceivedAt: time.Unix(1_800_000_000, int64(i)).UTC(),
		Body: b.Bytes(), Queued: true,
	}
}

// fillRuns queues n deliveries of runs runs with bodies of size bytes in
// channel ch1, a hundred per transaction's worth of Enqueues.
func fillRuns(tb testing.TB, s *boltrelay.Store, n, runs, size int) {
	tb.Helper()
	for i := range n {
		if err := s.Enqueue("ch1", runDelivery(i, runs, size)); err != nil {
			tb.Fatal(err)
		}
	}
}

// What an agent's connect costs the store: one QueuedRuns of a queue of
// 10,000 deliveries of 4 KiB, of 100 runs.
func BenchmarkQueuedRuns(b *testing.B) {
	s, err := boltrelay.Open(filepath.Join(b.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fillRuns(b, s, 10_000, 100, 4<<10)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		runs, err := s.QueuedRuns("ch1")
		if err != nil || len(runs) != 10_000 {
			b.Fatalf("QueuedRuns = %d runs, %v", len(runs), err)
		}
	}
}

// maxRunsBytesPer and maxRunsAllocsPer bound what QueuedRuns allocates,
// per queued delivery of a run: its id and run as strings and its share
// of the map, whatever the size of its body (32 KiB here).
const (
	maxRunsBytesPer  = 512
	maxRunsAllocsPer = 3
)

// TestQueuedRuns_AllocationsDoNotGrowWithBodies: listing the runs of a
// queue at an agent's connect reads the runs, not the deliveries: the
// relay is reachable from the internet, and a queue of large bodies
// (within the quotas) must not make each connect read and allocate them
// all.
func TestQueuedRuns_AllocationsDoNotGrowWithBodies(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "relay.db"))
	const n = 500
	fillRuns(t, s, n, 50, 32<<10)
	list := func() {
		runs, err := s.QueuedRuns("ch1")
		if err != nil || len(runs) != n {
			t.Fatalf("QueuedRuns = %d runs, %v; want %d", len(runs), err, n)
		}
	}
	list()
	allocs := testing.AllocsPerRun(5, list)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const rounds = 5
	for range rounds {
		list()
	}
	runtime.ReadMemStats(&after)
	bytesPer := float64(after.TotalAlloc-before.TotalAlloc) / rounds / n
	if allocs > maxRunsAllocsPer*n || bytesPer > maxRunsBytesPer {
		t.Errorf("QueuedRuns of %d deliveries of 32 KiB allocates %.0f times and %.0f bytes per delivery, over the %d times and %d bytes pinned: it reads their bodies? (go test -bench QueuedRuns -memprofile)",
			n, allocs, bytesPer, maxRunsAllocsPer*n, maxRunsBytesPer)
	} else {
		t.Logf("%.0f allocations, %.0f bytes per queued delivery", allocs, bytesPer)
	}
}

// runsOfQueue is what QueuedRuns must say: the runs of the deliveries
// channel's queue holds, read from the deliveries themselves.
func runsOfQueue(t *testing.T, s *boltrelay.Store, channel string) map[string]string {
	t.Helper()
	ds, err := s.Queued(channel, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, d := range ds {
		if run := devhook.ParseEvent(d.Body).RunID; run != "" {
			want[d.ID] = run
		}
	}
	return want
}

func checkRuns(t *testing.T, s *boltrelay.Store, channel, when string) {
	t.Helper()
	got, err := s.QueuedRuns(channel)
	if want := runsOfQueue(t, s, channel); err != nil || !maps.Equal(got, want) {
		t.Fatalf("%s: QueuedRuns(%s) = %v, %v; want %v", when, channel, got, err, want)
	}
}

// runsIndexAgrees checks, in the file at path (closed), that every
// queue has an index of its runs with the same keys, and no index is
// left without its queue.
func runsIndexAgrees(t *testing.T, path string) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	keys := func(b *bolt.Bucket) (ks []string) {
		if b != nil {
			b.ForEach(func(k, _ []byte) error { ks = append(ks, string(k)); return nil })
		}
		return ks
	}
	b.View(func(tx *bolt.Tx) error {
		queue, runs := tx.Bucket([]byte("queue")), tx.Bucket([]byte("queueruns"))
		if runs == nil {
			t.Fatal("no queueruns bucket")
		}
		queue.ForEachBucket(func(ch []byte) error {
			if q, r := keys(queue.Bucket(ch)), keys(runs.Bucket(ch)); !slices.Equal(q, r) {
				t.Errorf("channel %s: queue %v, index of its runs %v", ch, q, r)
			}
			return nil
		})
		runs.ForEachBucket(func(ch []byte) error {
			if queue.Bucket(ch) == nil && len(keys(runs.Bucket(ch))) > 0 {
				t.Errorf("channel %s: an index of runs without a queue", ch)
			}
			return nil
		})
		return nil
	})
}

// The index of the queue's runs follows every way a delivery enters or
// leaves the queue.
func TestQueuedRuns_FollowsTheQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s, err := boltrelay.Open(path, boltrelay.Config{Quota: relay.Quota{MaxAge: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 12 {
		d := runDelivery(i, 3, 100)
		if i%4 == 3 {
			d = runDelivery(i, 0, 100) // no run
		}
		if err := s.Enqueue("ch1", d); err != nil {
			t.Fatal(err)
		}
		if err := s.Enqueue("ch1", d); err != nil { // kept once
			t.Fatal(err)
		}
	}
	checkRuns(t, s, "ch1", "enqueued")
	if err := s.Dequeue("ch1", runDelivery(0, 3, 0).ID, runDelivery(3, 3, 0).ID, runDelivery(5, 3, 0).ID, "not-queued"); err != nil {
		t.Fatal(err)
	}
	checkRuns(t, s, "ch1", "dequeued")
	if err := s.Park("ch1", runDelivery(1, 3, 0).ID, "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.Park("ch1", runDelivery(2, 3, 0).ID, "test"); err != nil {
		t.Fatal(err)
	}
	checkRuns(t, s, "ch1", "parked")
	if _, err := s.Requeue(runDelivery(1, 3, 0).ID); err != nil {
		t.Fatal(err)
	}
	checkRuns(t, s, "ch1", "requeued")
	if got, _ := s.QueuedRuns("ch1"); got[runDelivery(1, 3, 0).ID] != "run-1" {
		t.Fatalf("the requeued delivery's run: %q", got[runDelivery(1, 3, 0).ID])
	}

	// Expired, and a queue whose channel is gone removed.
	for i := 100; i < 103; i++ {
		if err := s.Enqueue("ch2", runDelivery(i, 3, 100)); err != nil {
			t.Fatal(err)
		}
		if err := s.Enqueue("ghost", runDelivery(i, 3, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutChannel(relay.Channel{ID: "ch1", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutChannel(relay.Channel{ID: "ch2", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveIdleChannels(time.Unix(0, 0), nil); err != nil {
		t.Fatal(err)
	}
	checkRuns(t, s, "ghost", "removed")
	checkRuns(t, s, "ch2", "before expiry")
	if _, err := s.Expire(relay.IDTime(runDelivery(102, 3, 0).ID).Add(2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkRuns(t, s, "ch2", "expired")
	checkRuns(t, s, "ch1", "expired")
	s.Close()
	runsIndexAgrees(t, path)
}

// A relay.db without the index (written before it), or with one an
// earlier devhook did not keep, gets it right when it is opened.
func TestQueuedRuns_FilesOfEarlierDevhooks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s := mustOpen(t, path)
	for i := range 6 {
		if err := s.Enqueue("ch1", runDelivery(i, 2, 100)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	raw := func(fn func(tx *bolt.Tx) error) {
		t.Helper()
		b, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	// Written before the index.
	raw(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("queueruns")) })
	ro, err := boltrelay.Open(path, boltrelay.Config{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	checkRuns(t, ro, "ch1", "read-only, without the index")
	ro.Close()
	s = mustOpen(t, path)
	checkRuns(t, s, "ch1", "opened without the index")
	s.Close()
	runsIndexAgrees(t, path)

	// Written to by an earlier devhook after: one delivery queued, one
	// removed, one channel's queue removed, without the index.
	raw(func(tx *bolt.Tx) error {
		q := tx.Bucket([]byte("queue"))
		ch1 := q.Bucket([]byte("ch1"))
		d := runDelivery(7, 2, 100)
		if err := ch1.Put([]byte(d.ID), storage.AppendDelivery(nil, d)); err != nil {
			return err
		}
		return ch1.Delete([]byte(runDelivery(2, 2, 0).ID))
	})
	s = mustOpen(t, path)
	checkRuns(t, s, "ch1", "opened after an earlier devhook")
	if got, _ := s.QueuedRuns("ch1"); got[runDelivery(7, 2, 0).ID] != "run-1" || len(got) != 6 {
		t.Fatalf("QueuedRuns = %v", got)
	}
	s.Close()
	runsIndexAgrees(t, path)

	// The combined file of earlier devhooks: its one queued delivery is of
	// no run.
	combined := filepath.Join(t.TempDir(), "relay.db")
	copyFile(t, filepath.Join("testdata", "relay-combined.db"), combined)
	s = mustOpen(t, combined)
	if got, err := s.QueuedRuns("0123456789abcdef0123456789abcdef"); err != nil || len(got) != 0 {
		t.Fatalf("QueuedRuns of the combined file = %v, %v", got, err)
	}
}

// An index damaged where a channel's bucket should be (a value in its
// place) is made again at Open: it neither refuses the channel's
// deliveries nor leaves its runs unlisted.
func TestQueuedRuns_DamagedIndexIsMadeAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s := mustOpen(t, path)
	for i := range 4 {
		if err := s.Enqueue("ch1", runDelivery(i, 2, 100)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		runs := tx.Bucket([]byte("queueruns"))
		if err := runs.DeleteBucket([]byte("ch1")); err != nil {
			return err
		}
		if err := runs.Put([]byte("ch1"), []byte("damaged")); err != nil {
			return err
		}
		return runs.Put([]byte("ch2"), []byte("damaged")) // a channel with no queue
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path)
	checkRuns(t, s, "ch1", "opened with a damaged index")
	for _, ch := range []string{"ch1", "ch2"} {
		if err := s.Enqueue(ch, runDelivery(10, 2, 100)); err != nil {
			t.Fatalf("enqueue in %s with a damaged index: %v", ch, err)
		}
		checkRuns(t, s, ch, "enqueued")
	}
	s.Close()
	runsIndexAgrees(t, path)
}
