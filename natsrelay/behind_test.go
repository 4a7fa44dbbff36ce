package natsrelay_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

func runBody(run string, i int) string {
	return fmt.Sprintf(`{"event_type":"run.status","data":{"run_id":%q,"status":"s%d"}}`, run, i)
}

// heldAgent answers every delivery at once but acknowledges the queued
// ones only once release is closed: the relay's window (64) fills, and
// the rest of the queue stays unsent until then.
type heldAgent struct {
	got     chan *devhook.Delivery
	release chan struct{}
	done    chan error
}

func dialHeldAgent(t *testing.T, url string, cr wire.Credentials) *heldAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: url, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	a := &heldAgent{got: make(chan *devhook.Delivery, 1000), release: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		var held []string
		for {
			d, err := conn.Receive()
			if err != nil {
				a.done <- err
				return
			}
			conn.Respond(d.ID, http.StatusOK, nil, []byte("taken"))
			if d.Queued {
				held = append(held, d.ID)
			}
			select {
			case <-a.release:
				for _, id := range held {
					conn.Ack(id)
				}
				held = held[:0]
			default:
			}
			a.got <- d
		}
	}()
	t.Cleanup(func() { conn.Close(); <-a.done })
	return a
}

// On a cluster, a run's live delivery does not overtake the deliveries
// of its run still queued when the agent connects to another instance
// than the one the live delivery comes to: it is queued behind them
// (202) and reaches the agent after them. A live delivery of a run with
// nothing queued is not held behind the backlog: it goes to the agent at
// once (the store lists the queue's runs at connect).
func TestLiveRunDeliveryBehindItsQueueAcrossInstances(t *testing.T) {
	ns := natstest.Run(t)
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr := openOn(t, a)
	const queued = 100 // over the relay's window of 64
	for i := range queued {
		if resp, body := send(t, a.URL+"/c/"+cr.Channel+"/q", runBody("run-q", i)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("queued %d with no agent: %s %q", i, resp.Status, body)
		}
	}
	ag := dialHeldAgent(t, b.URL, cr)
	var first *devhook.Delivery
	select { // the drain has begun
	case first = <-ag.got:
	case <-time.After(30 * time.Second):
		t.Fatal("no queued delivery reached the agent")
	}
	if !first.Queued {
		t.Fatalf("first delivery %+v is not a queued one", first)
	}
	// While the queue is behind (acks held), through the instance
	// without the agent.
	resp, body := send(t, a.URL+"/c/"+cr.Channel+"/live", runBody("run-q", queued))
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(body, `"queued":true`) {
		t.Errorf("live delivery of the queued run while its queue is unsent: %s %q, want 202", resp.Status, body)
	}
	resp, body = send(t, a.URL+"/c/"+cr.Channel+"/other", runBody("run-other", 0))
	if resp.StatusCode != http.StatusOK || body != "taken" {
		t.Errorf("live delivery of a run with nothing queued: %s %q, want the agent's 200", resp.Status, body)
	}
	close(ag.release)
	// run-q's deliveries reach the agent in their order, the live one last.
	if devhook.ParseEvent(first.Body).Status != "s0" {
		t.Fatalf("first delivery %s", first.Body)
	}
	next := 1
	deadline := time.After(30 * time.Second)
	for next <= queued {
		select {
		case d := <-ag.got:
			ev := devhook.ParseEvent(d.Body)
			if ev.RunID != "run-q" {
				continue
			}
			if want := fmt.Sprintf("s%d", next); ev.Status != want {
				t.Fatalf("run-q's delivery %s came where %s was due", ev.Status, want)
			}
			next++
		case err := <-ag.done:
			t.Fatalf("agent's connection ended: %v", err)
		case <-deadline:
			t.Fatalf("run-q's deliveries stopped at %d of %d", next, queued+1)
		}
	}
}
