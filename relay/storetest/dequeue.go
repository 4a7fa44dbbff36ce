package storetest

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
)

// The removal of many deliveries at once (Store.Dequeue with the acks the
// relay gathered while the previous removal was made).

// Many ids in one call: those queued leave, a large one (an object on
// NATS) among them; the others (not queued, named twice, of another
// channel) are skipped without error; each delivery removed gives its
// share of the quota back once, also when the same ids are removed again.
func testDequeueMany(t *testing.T, open Open) {
	const n = 300
	s := open(t, Config{Quota: relay.Quota{ChannelDeliveries: n}})
	putChannel(t, s, "c", time.Now())
	putChannel(t, s, "o", time.Now())
	var ids []string
	var kept []*devhook.Delivery
	for i := range n {
		size := 200
		if i == 7 {
			size = 3 << 19 // 1.5 MiB: over a NATS message
		}
		d := delivery(t, "c", size)
		if err := s.Enqueue("c", d); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			ids = append(ids, d.ID)
		} else {
			kept = append(kept, d)
		}
	}
	other := delivery(t, "o", 100)
	if err := s.Enqueue("o", other); err != nil {
		t.Fatal(err)
	}
	removed := len(ids)
	ids = append(ids, ids[0], delivery(t, "c", 10).ID, other.ID)
	if err := s.Dequeue("c", ids...); err != nil {
		t.Fatalf("Dequeue of %d ids: %v", len(ids), err)
	}
	sameQueue(t, s, "c", kept)
	sameQueue(t, s, "o", []*devhook.Delivery{other})
	if err := s.Dequeue("c"); err != nil {
		t.Fatalf("Dequeue of no id: %v", err)
	}
	if err := s.Dequeue("c", ids...); err != nil {
		t.Fatalf("Dequeue of the same ids again: %v", err)
	}
	sameQueue(t, s, "c", kept)
	took, err := fill(t, s, "c", 100, n)
	if !errors.Is(err, relay.ErrChannelFull) || len(took) != removed {
		t.Fatalf("after %d removed: %d more fit, then %v; want %d, then ErrChannelFull (each removal counted once)", removed, len(took), err, removed)
	}
}

// A removal that fails (a full disk) leaves what it did not remove
// queued; made again once there is room, it removes each delivery once
// and gives its share of the quota back once.
func testDequeueFails(t *testing.T, open Open) {
	var full atomic.Bool
	s := open(t, Config{
		Quota:      relay.Quota{ChannelDeliveries: 10},
		WriteError: func() error { return diskFull(&full) },
	})
	putChannel(t, s, "c", time.Now())
	queued, err := fill(t, s, "c", 100, 20)
	if !errors.Is(err, relay.ErrChannelFull) || len(queued) != 10 {
		t.Fatalf("took %d, then %v; want 10, then ErrChannelFull", len(queued), err)
	}
	ids := make([]string, 5)
	for i, d := range queued[:5] {
		ids[i] = d.ID
	}
	full.Store(true)
	if err := s.Dequeue("c", ids...); err != nil && !errors.Is(err, relay.ErrStorageFull) {
		t.Fatalf("Dequeue on a full disk: %v, want ErrStorageFull (or none: a store that needs no room to remove)", err)
	}
	if n, err := s.QueueLen("c"); err != nil || n < 5 || n > 10 {
		t.Fatalf("QueueLen after a failed removal = %d, %v; want between 5 and 10", n, err)
	}
	full.Store(false)
	if err := s.Dequeue("c", ids...); err != nil {
		t.Fatalf("Dequeue with room again: %v", err)
	}
	sameQueue(t, s, "c", queued[5:])
	took, err := fill(t, s, "c", 100, 20)
	if !errors.Is(err, relay.ErrChannelFull) || len(took) != 5 {
		t.Fatalf("after 5 removed: %d more fit, then %v; want 5, then ErrChannelFull (each removal counted once)", len(took), err)
	}
}
