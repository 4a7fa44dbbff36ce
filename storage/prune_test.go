package storage_test

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// clock is a settable Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) set(t time.Time)  { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time   { return time.Unix(0, c.ns.Load()) }

// putWithAttempts records deliveries from..to-1 with two attempts each.
func putWithAttempts(t *testing.T, db *storage.DB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		mustPut(t, db, newDelivery(i))
		for k := range 2 {
			if _, err := db.AddAttempt(id(i), newAttempt(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkKept fails unless exactly deliveries from..to-1 are kept, in every
// bucket.
func checkKept(t *testing.T, db *storage.DB, from, to int) {
	t.Helper()
	n := to - from
	if got, err := db.Count(); err != nil || got != n {
		t.Errorf("Count() = %d, %v; want %d", got, err, n)
	}
	want := map[string]int{
		"deliveries": n, "bodies": n, "summaries": n, "attempts": 2 * n, "runs": n,
		"channels": 0, "queue": 0,
	}
	for name, got := range db.BucketLens() {
		if got != want[name] {
			t.Errorf("bucket %s has %d keys, want %d", name, got, want[name])
		}
	}
	list, err := db.List(devhook.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n || n > 0 && (list[0].ID != id(to-1) || list[n-1].ID != id(from)) {
		t.Errorf("List: %d rows from %v, want %d from %s to %s", len(list), summaryIDs(list), n, id(to-1), id(from))
	}
	if from > 0 {
		if _, err := db.Delivery(id(from - 1)); devhook.ErrorCode(err) != devhook.ENOTFOUND {
			t.Errorf("pruned delivery %d: error %v, want %s", from-1, err, devhook.ENOTFOUND)
		}
	}
	for r := range 7 {
		rs, err := db.RunDeliveries("run-" + string(rune('0'+r)))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rs {
			if s.ID < id(from) {
				t.Errorf("run index still lists pruned delivery %s", s.ID)
			}
		}
	}
}

func TestPrune_ByCount(t *testing.T) {
	db := MustOpenDB(t, storage.Config{MaxDeliveries: 20, MaxAge: -1})
	// Writes prune on their own, at least every MaxDeliveries/10 puts.
	putWithAttempts(t, db, 0, 45)
	if err := db.Flush(); err != nil { // as the background flusher would
		t.Fatal(err)
	}
	if n, _ := db.Count(); n > 22 {
		t.Errorf("Count() = %d after 45 puts with MaxDeliveries 20, want at most 22", n)
	}
	if _, err := db.Prune(); err != nil {
		t.Fatal(err)
	}
	checkKept(t, db, 25, 45)
	if removed, err := db.Prune(); err != nil || removed != 0 {
		t.Errorf("second Prune() = %d, %v; want 0, nil", removed, err)
	}
}

func TestPrune_ByCountInChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	const n = 12_000 // more than one pruning transaction removes
	ds := make([]*devhook.Delivery, n)
	for i := range ds {
		ds[i] = newDelivery(i)
	}
	if err := db.PutDeliveriesTx(ds); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Open prunes.
	db = MustOpenPath(t, path, storage.Config{MaxDeliveries: 100, MaxAge: -1})
	if got, err := db.Count(); err != nil || got != 100 {
		t.Fatalf("Count() after Open = %d, %v; want 100", got, err)
	}
	lens := db.BucketLens()
	if lens["deliveries"] != 100 || lens["bodies"] != 100 || lens["summaries"] != 100 || lens["runs"] != 100 {
		t.Errorf("buckets after pruning at Open: %v", lens)
	}
	list, _ := db.List(devhook.Filter{Limit: 1000})
	if len(list) != 100 || list[99].ID != id(n-100) {
		t.Errorf("kept %d, oldest %s; want 100, oldest %s", len(list), list[len(list)-1].ID, id(n-100))
	}
}

func TestPrune_ByAge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	clk := newClock(t0)
	cfg := storage.Config{MaxAge: 30 * time.Second, Now: clk.now}
	db := MustOpenPath(t, path, cfg)
	putWithAttempts(t, db, 0, 50) // received at t0+0s … t0+49s

	for _, c := range []struct {
		now     time.Duration // after t0
		removed int
		from    int
	}{
		{29 * time.Second, 0, 0},   // nothing older than 30s yet
		{40 * time.Second, 10, 10}, // 0..9 were received more than 30 s ago
		{40 * time.Second, 0, 10},
		{75 * time.Second, 35, 45},
	} {
		clk.set(t0.Add(c.now))
		removed, err := db.Prune()
		if err != nil {
			t.Fatal(err)
		}
		if removed != c.removed {
			t.Errorf("at t0+%v: Prune() removed %d, want %d", c.now, removed, c.removed)
		}
		checkKept(t, db, c.from, 50)
	}

	// Open prunes too.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(78 * time.Second))
	db = MustOpenPath(t, path, cfg)
	checkKept(t, db, 48, 50)
}

func TestPrune_Unlimited(t *testing.T) {
	db := MustOpenDB(t, storage.Config{MaxDeliveries: -1, MaxAge: -1,
		Now: func() time.Time { return t0.Add(100 * 365 * 24 * time.Hour) }})
	putWithAttempts(t, db, 0, 30)
	if removed, err := db.Prune(); err != nil || removed != 0 {
		t.Errorf("Prune() = %d, %v; want 0 with no limits", removed, err)
	}
	checkKept(t, db, 0, 30)
}

func TestPrune_Defaults(t *testing.T) {
	// Zero Config: 30 days. A delivery from 31 days before Now goes.
	clk := newClock(t0.Add(31 * 24 * time.Hour))
	db := MustOpenDB(t, storage.Config{Now: clk.now})
	putWithAttempts(t, db, 0, 3)
	if removed, err := db.Prune(); err != nil || removed != 3 {
		t.Errorf("Prune() = %d, %v; want 3 deliveries older than the default 30 days", removed, err)
	}
	checkKept(t, db, 3, 3)
}
