package relay_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
	"github.com/devhook/devhook/relay/wire"
)

// runCountless is a relay.Store that cannot count the runs of a queue
// (nor its length): it hides boltrelay's optional methods.
type runCountless struct{ relay.Store }

// liveRunAnswered posts a live run.status delivery of run in status and
// has the agent answer it 201. It fails t unless the delivery reaches the
// agent live, before anything else, and returns the sender's status.
func liveRunAnswered(t *testing.T, conn *relayclient.Conn, cr wire.Credentials, run, status string) int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(cr.PublicURL+"/", "application/json", strings.NewReader(runBody(t, run, status)))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	type got struct {
		id     string
		queued bool
		err    error
	}
	recv := make(chan got, 1)
	go func() {
		d, err := conn.Receive()
		if err != nil {
			recv <- got{err: err}
			return
		}
		recv <- got{id: d.ID, queued: d.Queued}
	}()
	select {
	case st := <-done:
		t.Fatalf("live run.status of run %s answered %d without reaching the agent", run, st)
	case g := <-recv:
		if g.err != nil || g.queued {
			t.Fatalf("the agent got a queued delivery, or none (%v), where the live one of run %s was due", g.err, run)
		}
		conn.Respond(g.id, http.StatusCreated, nil, nil)
	case <-time.After(20 * time.Second):
		t.Fatalf("live run.status of run %s: no answer and nothing at the agent within 20s", run)
	}
	return <-done
}

// Issue 39: a backlog holds up the live run.status deliveries of its own
// runs, not the channel's: one of a run with nothing queued goes to the
// agent at once while the backlog is being sent; one of a run with a
// delivery not yet sent is queued behind it (202) and comes after it.
func TestLiveRunDeliveryWaitsOnlyBehindItsRun(t *testing.T) {
	_, hs, _ := relaytest.New(t, relay.Config{Window: 1})
	cr := relaytest.Open(t, hs)
	var want []string
	for _, st := range []string{"queued", "running"} {
		body := runBody(t, "a", st)
		if code, _ := post(t, cr.PublicURL+"/", body); code != http.StatusAccepted {
			t.Fatalf("with no agent: %d", code)
		}
		want = append(want, body)
	}
	conn := relaytest.Dial(t, hs, cr)
	first := relaytest.Receive(t, conn, 10*time.Second) // the window is full: run a's running is not sent
	if string(first.Body) != want[0] {
		t.Fatalf("first queued delivery %s", first.Body)
	}
	if st := liveRunAnswered(t, conn, cr, "b", "queued"); st != http.StatusCreated {
		t.Fatalf("live run.status of run b, with nothing of it queued: %d, want the agent's 201", st)
	}
	held := runBody(t, "a", "succeeded")
	if code, answer := post(t, cr.PublicURL+"/", held); code != http.StatusAccepted || !strings.Contains(answer, `"queued":true`) {
		t.Fatalf("live run.status of run a, with a delivery of it not yet sent: %d %q, want 202", code, answer)
	}
	want = append(want, held)
	conn.Ack(first.ID)
	for _, w := range want[1:] {
		d := relaytest.Receive(t, conn, 10*time.Second)
		if string(d.Body) != w {
			t.Fatalf("got %s, want %s", d.Body, w)
		}
		conn.Ack(d.ID)
	}
}

// Where the relay cannot tell the runs of what is queued, every
// run.status delivery of the channel waits behind the queue until it is
// sent: with a store that cannot count the queue's runs, and after a
// delivery queued through a router that does not say its run (not a
// relay.RunKicker).
func TestLiveRunDeliveriesWaitWhenRunsAreUnknown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    func(db *boltrelay.Store) relay.Config
		queued int // deliveries queued before the agent connects
	}{
		{"store without run counts", func(db *boltrelay.Store) relay.Config {
			return relay.Config{Store: runCountless{db}, Window: 1}
		}, 2},
		{"router without runs", func(db *boltrelay.Store) relay.Config {
			return relay.Config{Store: db, Router: runBlindRouter{relay.NewHub()}, Window: 1}
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, hs, _ := relaytest.NewWith(t, tc.cfg)
			cr := relaytest.Open(t, hs)
			for i := range tc.queued {
				if code, _ := post(t, cr.PublicURL+"/", runBody(t, "a", fmt.Sprint("s", i))); code != http.StatusAccepted {
					t.Fatalf("with no agent: %d", code)
				}
			}
			conn := relaytest.Dial(t, hs, cr)
			first := relaytest.Receive(t, conn, 10*time.Second) // the window is full
			// Queued behind run a's: through a router without runs, the
			// connection learns only that something was queued.
			if code, _ := post(t, cr.PublicURL+"/", runBody(t, "a", "succeeded")); code != http.StatusAccepted {
				t.Fatalf("run a behind its queue: %d, want 202", code)
			}
			if code, answer := post(t, cr.PublicURL+"/", runBody(t, "b", "queued")); code != http.StatusAccepted || !strings.Contains(answer, `"queued":true`) {
				t.Fatalf("run b, the queue's runs unknown: %d %q, want 202", code, answer)
			}
			conn.Ack(first.ID)
			for range tc.queued + 1 {
				conn.Ack(relaytest.Receive(t, conn, 10*time.Second).ID)
			}
		})
	}
}

// listGate is a store whose list of the queue's runs waits until its
// gate opens: the list an agent's connect reads, held up as a long read
// on a loaded machine is.
type listGate struct {
	*boltrelay.Store
	gate chan struct{}
}

func (s listGate) QueuedRuns(channel string) (map[string]string, error) {
	<-s.gate
	return s.Store.QueuedRuns(channel)
}

// Issue 39: just after the agent connects to a backlog, while the store
// lists the runs the queue holds, a live run.status delivery waits for
// that list rather than be queued behind the whole backlog (202, or 429
// once the queue is full): of a run with nothing queued, it goes to the
// agent live.
func TestLiveRunDeliveryWaitsForTheQueuesRuns(t *testing.T) {
	var st listGate
	_, hs, _ := relaytest.NewWith(t, func(db *boltrelay.Store) relay.Config {
		st = listGate{db, make(chan struct{})}
		return relay.Config{Store: st, Window: 1}
	})
	var once sync.Once
	openGate := func() { once.Do(func() { close(st.gate) }) }
	t.Cleanup(openGate) // before the Server closes: its drain may wait on it
	cr := relaytest.Open(t, hs)
	if code, _ := post(t, cr.PublicURL+"/", runBody(t, "a", "queued")); code != http.StatusAccepted {
		t.Fatalf("with no agent: %d", code)
	}
	conn := relaytest.Dial(t, hs, cr)
	body := runBody(t, "b", "queued")
	answer := make(chan int, 1)
	go func() {
		resp, err := http.Post(cr.PublicURL+"/", "application/json", strings.NewReader(body))
		if err != nil {
			answer <- 0
			return
		}
		resp.Body.Close()
		answer <- resp.StatusCode
	}()
	relaytest.WaitFor(t, "the relay holding the live delivery's body", func() bool {
		_, m := get(t, hs.URL+"/metrics")
		n, _ := strconv.Atoi(metricValue(m, "devhook_relay_inflight_bytes"))
		return n >= len(body)
	})
	// It is routed now: before the list, it must not be answered. (A
	// wait that only makes the old code's early 202 likely to be seen;
	// the new code passes whatever it lasts.)
	select {
	case code := <-answer:
		t.Fatalf("answered %d while the queue's runs were being listed, want it held until they are", code)
	case <-time.After(time.Second):
	}
	openGate()
	got := map[string]bool{}
	for range 2 {
		d := relaytest.Receive(t, conn, 10*time.Second)
		got[string(d.Body)] = d.Queued
		if !d.Queued {
			conn.Respond(d.ID, http.StatusCreated, nil, nil)
		} else {
			conn.Ack(d.ID)
		}
	}
	if queued, ok := got[body]; !ok || queued {
		t.Fatalf("run b's live delivery: received %v, queued %v; want it live", ok, queued)
	}
	if code := <-answer; code != http.StatusCreated {
		t.Fatalf("run b's live delivery answered %d, want the agent's 201", code)
	}
}

// enqueueGate is a store whose Enqueue of a body holding mark returns
// only once gate opens: the delivery is queued (the drain can read it),
// its kick not yet made.
type enqueueGate struct {
	*boltrelay.Store
	mark string
	gate chan struct{}
}

func (s enqueueGate) Enqueue(channel string, d *devhook.Delivery) error {
	err := s.Store.Enqueue(channel, d)
	if strings.Contains(string(d.Body), s.mark) {
		<-s.gate
	}
	return err
}

// Issue 39: the relay knows the queue's unsent run.status deliveries by
// id, not by a count per run: a delivery of run x that the drain sends
// before its kick arrives (D, queued between P and E as its id was made
// before E's) does not count as E sent. While E is unsent, a live
// delivery of run x is queued behind it, never sent ahead.
func TestLiveRunDeliveryNotAheadOfAnUnsentOneOfItsRun(t *testing.T) {
	late := runBody(t, "x", "late-d")
	var st enqueueGate
	_, hs, db := relaytest.NewWith(t, func(db *boltrelay.Store) relay.Config {
		st = enqueueGate{db, "late-d", make(chan struct{})}
		return relay.Config{Store: st, Window: 1}
	})
	var once sync.Once
	openGate := func() { once.Do(func() { close(st.gate) }) }
	t.Cleanup(openGate)
	cr := relaytest.Open(t, hs)
	if code, _ := post(t, cr.PublicURL+"/", runBody(t, "p", "queued")); code != http.StatusAccepted {
		t.Fatalf("P with no agent: %d", code)
	}
	// D arrives (its id made, after P's), its body still coming.
	raw := rawRequest(t, hs, cr, "Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(late)), late[:10])
	relaytest.WaitFor(t, "the relay reading D's body", func() bool {
		_, m := get(t, hs.URL+"/metrics")
		n, _ := strconv.Atoi(metricValue(m, "devhook_relay_inflight_bytes"))
		return n >= 10
	})
	e := runBody(t, "x", "queued-e")
	if code, _ := post(t, cr.PublicURL+"/", e); code != http.StatusAccepted {
		t.Fatalf("E with no agent: %d", code)
	}
	conn := relaytest.Dial(t, hs, cr)
	p := relaytest.Receive(t, conn, 10*time.Second) // the window is full
	if devhook.ParseEvent(p.Body).RunID != "p" {
		t.Fatalf("first queued delivery %s, want P", p.Body)
	}
	// D comes whole: run x has E unsent, so D is queued, between P and E;
	// its kick waits.
	if _, err := raw.Write([]byte(late[10:])); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, "D queued", func() bool {
		n, err := db.QueueLen(cr.Channel)
		return err == nil && n == 3
	})
	conn.Ack(p.ID) // the drain reads on from P: D
	if d := relaytest.Receive(t, conn, 10*time.Second); string(d.Body) != late {
		t.Fatalf("second queued delivery %s, want D", d.Body)
	}
	// E is not sent yet (the window is full): a live delivery of run x
	// waits behind it.
	answer := make(chan string, 1)
	l := runBody(t, "x", "live-l")
	go func() {
		resp, err := http.Post(cr.PublicURL+"/", "application/json", strings.NewReader(l))
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- fmt.Sprint(resp.StatusCode, " ", string(b))
	}()
	got := make(chan *devhook.Delivery, 1)
	go func() {
		if d, err := conn.Receive(); err == nil {
			got <- d
		}
	}()
	select {
	case a := <-answer:
		if !strings.HasPrefix(a, "202 ") || !strings.Contains(a, `"queued":true`) {
			t.Fatalf("live delivery of run x with E unsent: %s, want 202 queued", a)
		}
	case d := <-got:
		t.Fatalf("the agent got %s (queued %v) while E, of its run, was unsent", d.Body, d.Queued)
	case <-time.After(20 * time.Second):
		t.Fatal("live delivery of run x: no answer within 20s")
	}
}
