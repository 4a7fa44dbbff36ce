package natsrelay_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/wire"
)

// QueuedRuns lists the run of each run.status delivery of a channel's
// queue from the entries' headers, through every move of an entry (a
// large one's too), and fails, rather than miss a run, on an entry
// queued by an earlier devhook, which does not say its run.
func TestQueuedRunsFromHeaders(t *testing.T) {
	ns := natstest.Run(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := natsrelay.OpenStore(context.Background(), natsrelay.Config{Conn: nc, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	const ch = "abcdef0123456789abcdef0123456789"
	if runs, err := s.QueuedRuns(ch); err != nil || len(runs) != 0 {
		t.Fatalf("QueuedRuns of an empty queue = %v, %v", runs, err)
	}
	want := map[string]string{}
	var ids []string
	for i, run := range []string{"run-a", "run-b", "", "run-a", "run-c"} {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Channel: ch, Method: "POST", Path: "/",
			ReceivedAt: time.Now().UTC(), Body: []byte(runBody(run, i))}
		if run == "" {
			d.Body = []byte("not a run")
		}
		if i == 4 { // larger than a message: its entry points to an object
			d.Body = []byte(strings.Replace(runBody(run, i), `"status"`, `"log":"`+strings.Repeat("x", s.PartSize()+1)+`","status"`, 1))
		}
		if err := s.Enqueue(ch, d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
		if run != "" {
			want[d.ID] = run
		}
	}
	check := func(when string) {
		t.Helper()
		if got, err := s.QueuedRuns(ch); err != nil || !maps.Equal(got, want) {
			t.Fatalf("%s: QueuedRuns = %v, %v; want %v", when, got, err, want)
		}
	}
	check("queued")
	if err := s.Dequeue(ch, ids[0]); err != nil {
		t.Fatal(err)
	}
	delete(want, ids[0])
	check("dequeued")
	if err := s.Park(ch, ids[1], "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.Park(ch, ids[4], "test"); err != nil {
		t.Fatal(err)
	}
	delete(want, ids[1])
	delete(want, ids[4])
	check("parked")
	if _, err := s.Requeue(ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Requeue(ids[4]); err != nil {
		t.Fatal(err)
	}
	want[ids[1]], want[ids[4]] = "run-b", "run-c"
	check("requeued")

	// An entry as an earlier devhook queued it: no run header.
	old := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Channel: ch, Method: "POST", Path: "/", Body: []byte(runBody("run-old", 0))}
	frame, err := wire.EncodeDelivery(old)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := nc.JetStream()
	if _, err := js.Publish("devhook.queue."+ch+"."+old.ID, frame); err != nil {
		t.Fatal(err)
	}
	if got, err := s.QueuedRuns(ch); err == nil || !strings.Contains(err.Error(), "earlier devhook") {
		t.Fatalf("QueuedRuns with an entry of an earlier devhook = %v, %v; want an error", got, err)
	}
}
