package agent

import (
	"context"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// countingStore counts the deliveries read, and has none.
type countingStore struct {
	Store
	reads int
}

func (s *countingStore) Delivery(id string) (*devhook.Delivery, error) {
	s.reads++
	return nil, devhook.Errorf(devhook.ENOTFOUND, "no delivery %s", id)
}

// An owed delivery whose receiver's share of the retries is full is put
// off without reading it from the store, each time twice as long as the
// last, up to the retry backoff's ceiling: many owed to a receiver that
// hangs cost a look each at a pace that slows, not a read a second each.
func TestOverShareWaitsLonger(t *testing.T) {
	now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	store := &countingStore{}
	a, err := New(Config{Store: store, Forward: []string{"localhost:9001", "localhost:9002"},
		RetryMinBackoff: time.Second, RetryMaxBackoff: 8 * time.Second,
		Now: func() time.Time { return now }, Rand: func(n int64) int64 { return n / 2 }}) // jitter: the wait itself
	if err != nil {
		t.Fatal(err)
	}
	target := a.targets[0]
	for range a.retryShares.limit {
		if ok, _ := a.retryShares.take(target); !ok {
			t.Fatal("the share filled before its limit")
		}
	}
	a.owed.add("d1", "", nil, now, now, false)
	var waits []time.Duration
	for range 6 {
		due, _, _ := a.owed.due(now.Add(time.Hour), 1)
		if len(due) != 1 {
			t.Fatalf("due: %d entries", len(due))
		}
		a.retryOne(context.Background(), due[0])
		a.owed.mu.Lock()
		waits = append(waits, a.owed.byID["d1"].next.Sub(now))
		a.owed.mu.Unlock()
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	if store.reads != 0 {
		t.Errorf("%d reads of the delivery over its receiver's share", store.reads)
	}
}
