package natsrelay_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/wire"
)

// lookup opens the cluster's Store as devhook relay parked --nats does:
// its own connection, nothing created.
func lookup(t *testing.T, url, prefix string) (*natsrelay.Store, error) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return natsrelay.LookupStore(context.Background(), natsrelay.Config{Conn: nc, Prefix: prefix})
}

// Parked deliveries of the cluster are listed over every channel with
// their reason, times and size, shown with their body, requeued (the
// agent, connected to another relay, gets it at once) and dropped; the
// relays' /metrics counts them.
func TestParkedListShowRequeueDrop(t *testing.T) {
	ns := natstest.Run(t)
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr1, cr2 := openOn(t, a), openOn(t, a)
	var ids []string
	for i, cr := range []wire.Credentials{cr1, cr2, cr2} {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Method: "POST", Path: "/p",
			Header: http.Header{"X-Multi": {"a", "b"}}, Body: bytes.Repeat([]byte{'x'}, 10+i), ReceivedAt: time.Unix(1_800_000_000, 0).UTC()}
		if err := a.store.Enqueue(cr.Channel, d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	if err := a.store.Park(cr1.Channel, ids[0], "cannot be framed: too large"); err != nil {
		t.Fatal(err)
	}
	if err := a.store.Park(cr2.Channel, ids[2], "cannot be read"); err != nil {
		t.Fatal(err)
	}
	_, m := send(t, a.URL+"/metrics", "")
	if !strings.Contains(m, "\ndevhook_relay_parked_deliveries 2\n") || !strings.Contains(m, "\ndevhook_relay_queue_depth 1\n") {
		t.Fatalf("metrics: want 2 parked, 1 queued:\n%s", m)
	}

	s, err := lookup(t, ns.ClientURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.ListParked("")
	if err != nil || len(list) != 2 {
		t.Fatalf("ListParked = %+v, %v", list, err)
	}
	p := list[0]
	if p.Channel != cr1.Channel || p.ID != ids[0] || p.Reason != "cannot be framed: too large" || p.Size != 10 ||
		!p.ReceivedAt.Equal(time.Unix(1_800_000_000, 0)) || time.Since(p.ParkedAt) > time.Minute || p.Delivery == nil || p.Delivery.Body != nil {
		t.Fatalf("listed %+v, want channel, id, reason, size, times and no body", p)
	}
	if only, err := s.ListParked(cr2.Channel); err != nil || len(only) != 1 || only[0].ID != ids[2] || only[0].Size != 12 {
		t.Fatalf("ListParked(channel 2) = %+v, %v", only, err)
	}
	p, err = s.ParkedDelivery(ids[2])
	if err != nil || p.Channel != cr2.Channel || string(p.Delivery.Body) != "xxxxxxxxxxxx" || p.Delivery.Header["X-Multi"][1] != "b" {
		t.Fatalf("ParkedDelivery = %+v, %v", p, err)
	}
	for _, id := range []string{ids[1], uuid.Must(uuid.NewV7()).String(), "../x"} { // queued; unknown; invalid
		if _, err := s.ParkedDelivery(id); devhook.ErrorCode(err) != devhook.ENOTFOUND {
			t.Errorf("ParkedDelivery(%s) = %v, want not found", id, err)
		}
	}

	// Requeued within the queue's duplicate window (it was queued a
	// moment ago), and sent at once to the agent on the other relay,
	// whose queue was empty when it connected: only the kick tells it.
	ag := dialAgent(t, b.URL, cr1, 200)
	if resp, _ := send(t, cr1.PublicURL+"/live", "live"); resp.StatusCode != 200 {
		t.Fatalf("live delivery: %s", resp.Status)
	}
	if d := ag.next(t); d.Path != "/live" {
		t.Fatalf("agent got %+v, want the live delivery", d)
	}
	if p, err := s.Requeue(ids[0]); err != nil || p.Channel != cr1.Channel {
		t.Fatalf("Requeue = %+v, %v", p, err)
	}
	if d := ag.next(t); d.ID != ids[0] || len(d.Body) != 10 || !d.Queued {
		t.Fatalf("agent got %+v, want the requeued %s", d, ids[0])
	}
	if _, err := s.Requeue(ids[0]); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("Requeue twice = %v, want not found", err)
	}

	if p, err := s.DropParked(ids[2]); err != nil || p.Channel != cr2.Channel {
		t.Fatalf("DropParked = %+v, %v", p, err)
	}
	if list, err := s.ListParked(""); err != nil || len(list) != 0 {
		t.Fatalf("after requeue and drop: %+v, %v", list, err)
	}
	if q, err := a.store.Queued(cr2.Channel, "", 0); err != nil || len(q) != 1 || q[0].ID != ids[1] {
		t.Fatalf("queue of channel 2: %v, %v; want only the delivery never parked", q, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := a.store.Counts()
		if err == nil && n.Parked == 0 && n.Queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Counts = %+v, %v; want nothing parked, 1 queued", n, err)
		}
		time.Sleep(10 * time.Millisecond) // the agent's ack of the requeued delivery
	}
}

// LookupStore changes nothing: without a relay cluster under the prefix,
// it says to check --nats-prefix.
func TestLookupStoreFindsOnlyAnExistingCluster(t *testing.T) {
	ns := natstest.Run(t)
	if _, err := lookup(t, ns.ClientURL(), ""); err == nil || !strings.Contains(err.Error(), "--nats-prefix") {
		t.Fatalf("no cluster yet: %v", err)
	}
	startInstance(t, ns)
	if _, err := lookup(t, ns.ClientURL(), "other"); err == nil || !strings.Contains(err.Error(), `prefix "other"`) {
		t.Fatalf("another prefix: %v", err)
	}
	if _, err := lookup(t, ns.ClientURL(), ""); err != nil {
		t.Fatal(err)
	}
}

// A parked delivery too large for one NATS message (a server at its
// defaults) is listed with its size, shown whole, requeued whole to an
// agent on another relay, and dropped with its object.
func TestParkedLargeDelivery(t *testing.T) {
	ns := natstest.Run(t) // max_payload 1 MiB
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr := openOn(t, a)
	body := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	var ids []string
	for range 2 {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Method: "POST", Path: "/large", Body: body, ReceivedAt: time.Now().UTC()}
		if err := a.store.Enqueue(cr.Channel, d); err != nil {
			t.Fatal(err)
		}
		if err := a.store.Park(cr.Channel, d.ID, "test"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	s, err := lookup(t, ns.ClientURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.ListParked(cr.Channel)
	if err != nil || len(list) != 2 || list[0].Size != len(body) || list[0].Delivery == nil || list[0].Delivery.Body != nil {
		t.Fatalf("ListParked = %+v, %v; want two of %d bytes, without bodies", list, err, len(body))
	}
	if p, err := s.ParkedDelivery(ids[0]); err != nil || !bytes.Equal(p.Delivery.Body, body) {
		t.Fatalf("ParkedDelivery: %v (%d bytes)", err, len(p.Delivery.Body))
	}
	ag := dialAgent(t, b.URL, cr, 200)
	if _, err := s.Requeue(ids[0]); err != nil {
		t.Fatal(err)
	}
	if d := ag.next(t); d.ID != ids[0] || !bytes.Equal(d.Body, body) {
		t.Fatalf("agent got %s with %d bytes, want %s whole", d.ID, len(d.Body), ids[0])
	}
	if _, err := s.DropParked(ids[1]); err != nil {
		t.Fatal(err)
	}
	if list, err := s.ListParked(""); err != nil || len(list) != 0 {
		t.Fatalf("after requeue and drop: %+v, %v", list, err)
	}
	// The dropped delivery's object is gone; the requeued one's stays
	// until the agent's ack removes it.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	obj, err := js.ObjectStore(context.Background(), "devhook_large")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.GetInfo(context.Background(), cr.Channel+"."+ids[1]); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("the dropped delivery's object: %v, want not found", err)
	}
}
