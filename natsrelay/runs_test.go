package natsrelay_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// QueuedRuns lists the run of each run.status delivery of a channel's
// queue from the entries' headers, through every move of an entry (a
// large one's too), and fails, rather than miss a run, on an entry
// queued by an earlier devhook, which does not say its run.
func TestQueuedRunsFromHeaders(t *testing.T) {
	nc, s := runsStore(t, natsrelay.Config{})
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

// oddRuns are run ids a NATS header does not carry as they are: it trims
// spaces and tabs at their ends and turns line breaks into spaces.
var oddRuns = []string{" lead", "trail ", "in\r\nside", "\ttab", "  ", "é ü", `"quoted"`, `a"b`, "plain-run"}

// The runs of a queue's entries are listed as the relay reads them from
// live deliveries' bodies, whatever they hold: a run the header changed
// (" r" listed as "r") let a live delivery of the run overtake its queued
// ones, and a run of spaces listed as none.
func TestQueuedRunsKeepOddRuns(t *testing.T) {
	_, s := runsStore(t, natsrelay.Config{})
	const ch = "abcdef0123456789abcdef0123456789"
	want := map[string]string{}
	for i, run := range oddRuns {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Channel: ch, Method: "POST", Path: "/",
			ReceivedAt: time.Now().UTC(), Body: []byte(runBody(run, i))}
		if got := devhook.ParseEvent(d.Body).RunID; got != run {
			t.Fatalf("run %q read as %q", run, got)
		}
		if err := s.Enqueue(ch, d); err != nil {
			t.Fatal(err)
		}
		want[d.ID] = run
		if i == 0 { // moved to the parked deliveries and back
			if err := s.Park(ch, d.ID, "test"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Requeue(d.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := s.QueuedRuns(ch); err != nil || !maps.Equal(got, want) {
		t.Fatalf("QueuedRuns = %q, %v; want %q", got, err, want)
	}
}

// runKicks records the kicks an Endpoint gets.
type runKicks struct {
	kicks chan [2]string // id, run
}

func (e *runKicks) Deliver(context.Context, *devhook.Delivery) (*wire.Answer, error) {
	return nil, relay.ErrNoAgent
}
func (e *runKicks) Kick()                  { e.kicks <- [2]string{} }
func (e *runKicks) KickRun(id, run string) { e.kicks <- [2]string{id, run} }
func (e *runKicks) Replace()               {}

// A kick across instances tells the agent's connection the run of the
// delivery queued as the relay reads it from a live delivery's body.
func TestKickRunAcrossInstancesKeepsOddRuns(t *testing.T) {
	ns := natstest.Run(t)
	routers := make([]*natsrelay.Router, 2)
	for i := range routers {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		r, err := natsrelay.OpenRouter(context.Background(), natsrelay.Config{Conn: nc, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		routers[i] = r
	}
	const ch = "abcdef0123456789abcdef0123456789"
	e := &runKicks{kicks: make(chan [2]string, 100)}
	routers[0].Attach(ch, e)
	for i, run := range oddRuns {
		id := fmt.Sprintf("0197a3c2-0000-7000-8000-%012d", i)
		if k := kickHeard(t, routers[1], e, ch, id, run); k[1] != run {
			t.Fatalf("kick of a delivery of run %q across instances says run %q", run, k[1])
		}
	}
}

// A run.status delivery whose run id is too long for a header (as long as
// most of a message) is queued all the same, and the list of the queue's
// runs then fails rather than leave it out: its run's live deliveries,
// and every other run's, wait behind the queue until it is sent. A kick
// of it across instances says nothing of its run. Before, the run in the
// entry's header took it past max_payload: it could not be queued.
func TestRunTooLongForAHeader(t *testing.T) {
	nc, s := runsStore(t, natsrelay.Config{})
	const ch = "abcdef0123456789abcdef0123456789"
	long := strings.Repeat("r", s.PartSize()*6/10)
	d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Channel: ch, Method: "POST", Path: "/",
		ReceivedAt: time.Now().UTC(), Body: []byte(runBody(long, 0))}
	if err := s.Enqueue(ch, d); err != nil {
		t.Fatalf("queue a delivery whose run id is %d bytes: %v", len(long), err)
	}
	if runs, err := s.QueuedRuns(ch); err == nil {
		t.Fatalf("QueuedRuns = %d runs, no error; want an error", len(runs))
	}

	r := make([]*natsrelay.Router, 2)
	for i := range r {
		var err error
		r[i], err = natsrelay.OpenRouter(context.Background(), natsrelay.Config{Conn: nc, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		defer r[i].Close()
	}
	e := &runKicks{kicks: make(chan [2]string, 100)}
	r[0].Attach(ch, e)
	if k := kickHeard(t, r[1], e, ch, d.ID, long); k != [2]string{} {
		t.Fatalf("a kick of a run too long for a header says delivery %s of a run of %d bytes, want a kick of no run", k[0], len(k[1]))
	}
}

// runsStore opens a store on a NATS server of the test's, with cfg (its
// Conn and Logf set here), and returns it with its connection.
func runsStore(t *testing.T, cfg natsrelay.Config) (*nats.Conn, *natsrelay.Store) {
	t.Helper()
	ns := natstest.Run(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg.Conn, cfg.Logf = nc, t.Logf
	s, err := natsrelay.OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return nc, s
}

// kickHeard kicks delivery id of run from router r, again until the
// agent's instance listens, and returns the first kick e hears of id (or
// of no delivery): an earlier kick, repeated, is passed over.
func kickHeard(t *testing.T, r *natsrelay.Router, e *runKicks, ch, id, run string) [2]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.KickRun(ch, id, run)
		select {
		case k := <-e.kicks:
			if k[0] == id || k[0] == "" {
				return k
			}
		case <-time.After(100 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no kick reached the agent's instance")
			}
		}
	}
}

// Entries removed as QueuedRuns reads the queue (acknowledged by the
// agent's previous connection, expired) do not make it wait for them: it
// lists the others at once. Before, it waited for the count the consumer
// started with until its Timeout (10 s), and meanwhile every live
// run.status delivery of the channel waited for the list.
func TestQueuedRunsDoNotWaitForRemovedEntries(t *testing.T) {
	const timeout = 40 * time.Second
	_, s := runsStore(t, natsrelay.Config{Timeout: timeout})
	const ch = "abcdef0123456789abcdef0123456789"
	var ids []string
	for i := range 5 {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Channel: ch, Method: "POST", Path: "/",
			ReceivedAt: time.Now().UTC(), Body: []byte(runBody(fmt.Sprintf("run-%d", i), i))}
		if err := s.Enqueue(ch, d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	for _, c := range []struct {
		name   string
		remove []string
	}{
		{"the last ones", ids[3:]},
		{"all the others", ids[:3]},
	} {
		s.SetBeforeRunsFetch(func() {
			if err := s.Dequeue(ch, c.remove...); err != nil {
				t.Error(err)
			}
		})
		start := time.Now()
		runs, err := s.QueuedRuns(ch)
		took := time.Since(start)
		t.Logf("%s removed: %d runs, %v, in %s", c.name, len(runs), err, took)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range c.remove {
			if _, ok := runs[id]; ok {
				t.Fatalf("%s removed: QueuedRuns lists removed delivery %s", c.name, id)
			}
		}
		// Bounded far above a few calls on loopback, far below the Timeout.
		if took > timeout/2 {
			t.Fatalf("%s removed: QueuedRuns took %s: it waited for the removed entries", c.name, took)
		}
	}
}
