package boltrelay_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

// parkedIDs are the channel/id of each parked delivery.
func parkedIDs(ps []relay.Parked) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Channel + "/" + p.ID
	}
	return out
}

// Parked deliveries are listed over every channel with their reason, time
// and size, shown with their body, put back in their queue, and dropped;
// Counts counts them for /metrics.
func TestStoreParkedListShowRequeueDrop(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "relay.db"))
	d1, d2, d3 := queuedDelivery(1), queuedDelivery(2), queuedDelivery(3)
	d3.Channel = "ch2"
	for _, d := range []*devhook.Delivery{d1, d2, d3} {
		if err := s.Enqueue(d.Channel, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []*devhook.Delivery{d1, d3} {
		if err := s.Park(d.Channel, d.ID, "cannot be framed: "+d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Counts(); err != nil || n.Queued != 1 || n.Parked != 2 {
		t.Fatalf("Counts = %+v, %v; want 1 queued, 2 parked", n, err)
	}

	list, err := s.ListParked("")
	if err != nil || !slices.Equal(parkedIDs(list), []string{"ch1/" + d1.ID, "ch2/" + d3.ID}) {
		t.Fatalf("ListParked = %v, %v", parkedIDs(list), err)
	}
	p := list[0]
	if p.Reason != "cannot be framed: "+d1.ID || !p.ReceivedAt.Equal(d1.ReceivedAt) || p.Size != len(d1.Body) ||
		p.Delivery == nil || p.Delivery.Body != nil || p.Delivery.Path != d1.Path {
		t.Fatalf("listed %+v (delivery %+v), want its reason, time, size, and no body", p, p.Delivery)
	}
	if only, err := s.ListParked("ch2"); err != nil || !slices.Equal(parkedIDs(only), []string{"ch2/" + d3.ID}) {
		t.Fatalf("ListParked(ch2) = %v, %v", parkedIDs(only), err)
	}

	p, err = s.ParkedDelivery(d3.ID)
	if err != nil || p.Channel != "ch2" || !bytes.Equal(p.Delivery.Body, d3.Body) || !slices.Equal(p.Delivery.Header["X-Repeat"], []string{"1", "2"}) {
		t.Fatalf("ParkedDelivery = %+v, %v", p, err)
	}
	for _, id := range []string{d2.ID, "nope"} { // queued, not parked; unknown
		if _, err := s.ParkedDelivery(id); devhook.ErrorCode(err) != devhook.ENOTFOUND {
			t.Errorf("ParkedDelivery(%s) = %v, want not found", id, err)
		}
	}

	// Requeue: back in its queue, whole, and sent after what is queued.
	if p, err := s.Requeue(d1.ID); err != nil || p.Channel != "ch1" {
		t.Fatalf("Requeue = %+v, %v", p, err)
	}
	q, err := s.Queued("ch1", "", 0)
	if err != nil || !slices.Equal(queuedIDsOf(q), []string{d1.ID, d2.ID}) || !bytes.Equal(q[0].Body, d1.Body) {
		t.Fatalf("queue after Requeue = %v, %v", queuedIDsOf(q), err)
	}
	if _, err := s.Requeue(d1.ID); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("Requeue twice = %v, want not found", err)
	}

	// Drop: gone, and nothing else.
	if p, err := s.DropParked(d3.ID); err != nil || p.Channel != "ch2" {
		t.Fatalf("DropParked = %+v, %v", p, err)
	}
	if list, err := s.ListParked(""); err != nil || len(list) != 0 {
		t.Fatalf("after requeue and drop: %v, %v", parkedIDs(list), err)
	}
	if n, err := s.Counts(); err != nil || n.Queued != 2 || n.Parked != 0 {
		t.Fatalf("Counts = %+v, %v; want 2 queued, 0 parked", n, err)
	}
	if q, _ := s.Queued("ch2", "", 0); len(q) != 0 {
		t.Fatalf("a dropped delivery came back: %v", queuedIDsOf(q))
	}
}

// A parked entry whose delivery cannot be decoded is listed with its
// id's time, can be requeued (to be parked again, or sent by a newer
// relay) and dropped.
func TestStoreParkedUndecodable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s := mustOpen(t, path)
	if err := s.Enqueue("ch1", queuedDelivery(1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	const id = "0197a3c2-1234-7000-8000-000000000009" // UUIDv7
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("queue")).Bucket([]byte("ch1")).Put([]byte(id), []byte{0xee, 1, 2})
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path)
	if err := s.Park("ch1", id, "cannot be read"); err != nil {
		t.Fatal(err)
	}
	p, err := s.ParkedDelivery(id)
	if err != nil || p.Delivery != nil || p.Size != -1 || !p.ReceivedAt.Equal(time.UnixMilli(0x0197a3c21234).UTC()) {
		t.Fatalf("ParkedDelivery = %+v, %v; want no delivery, size -1, the id's time", p, err)
	}
	if _, err := s.Requeue(id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Queued("ch1", "", 0); !errors.As(err, new(*relay.UnreadableError)) {
		t.Fatalf("requeued undecodable entry: %v, want it unreadable in the queue again", err)
	}
}

// A running relay holds relay.db: another process waits LockTimeout and
// gets ErrLocked. Once it is free, a read-only open reads and cannot write.
func TestStoreReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	s, err := boltrelay.Open(path, boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := queuedDelivery(1)
	if err := s.Enqueue("ch1", d); err != nil {
		t.Fatal(err)
	}
	if err := s.Park("ch1", d.ID, "why"); err != nil {
		t.Fatal(err)
	}
	if _, err := boltrelay.Open(path, boltrelay.Config{ReadOnly: true, LockTimeout: 50 * time.Millisecond}); !errors.Is(err, storage.ErrLocked) {
		t.Fatalf("read-only open of a held file: %v, want ErrLocked", err)
	}
	s.Close()
	ro, err := boltrelay.Open(path, boltrelay.Config{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if list, err := ro.ListParked(""); err != nil || len(list) != 1 || list[0].Reason != "why" {
		t.Fatalf("read-only ListParked = %+v, %v", list, err)
	}
	if _, err := ro.DropParked(d.ID); err == nil {
		t.Fatal("a read-only store dropped a delivery")
	}
	if _, err := boltrelay.Open(filepath.Join(t.TempDir(), "none.db"), boltrelay.Config{ReadOnly: true}); err == nil {
		t.Fatal("a read-only open created a file")
	}
}
