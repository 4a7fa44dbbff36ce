package natsrelay_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
)

// Issue 36, a real fault: removals of acknowledged deliveries while the
// instance is cut off from NATS fail; they are tried again by the
// backoff, the deliveries are not sent again meanwhile, and once NATS is
// back the queue empties by itself, each delivery having reached the
// agent once.
func TestRemovalsWhileNATSIsAway(t *testing.T) {
	ns := natstest.Run(t)
	gate := make(chan struct{})
	down := make(chan struct{}, 1)
	a := sweepingInstance(t, ns, relay.Config{ResponseTimeout: 10 * time.Second},
		nats.CustomReconnectDelay(func(int) time.Duration { <-gate; return 0 }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case down <- struct{}{}:
			default:
			}
		}))
	cr := openOn(t, a)
	const n = 3
	for i := range n {
		if resp, body := send(t, a.URL+"/c/"+cr.Channel+"/x", "queued"); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %d with no agent: %s %q", i, resp.Status, body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: a.URL, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var ids []string
	for range n {
		d, err := conn.Receive()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	// Cut off from NATS, then acknowledged.
	id, err := a.nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	<-down
	for _, id := range ids {
		conn.Ack(id)
	}
	errs := func() int {
		resp, err := http.Get(a.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return metricInt(t, resp, "devhook_relay_queue_remove_errors_total")
	}
	deadline := time.Now().Add(30 * time.Second)
	for errs() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no removal failed twice with NATS away")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(gate) // A reconnects
	deadline = time.Now().Add(30 * time.Second)
	for {
		if n, err := a.store.QueueLen(cr.Channel); err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue did not empty within 30 s of NATS coming back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Nothing was sent again on this connection: the next frame is a
	// live delivery.
	go func() {
		if resp, err := http.Post(a.URL+"/c/"+cr.Channel+"/x", "text/plain", strings.NewReader("live")); err == nil {
			resp.Body.Close()
		}
	}()
	d, err := conn.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if d.Queued || string(d.Body) != "live" {
		t.Fatalf("after the removals, the agent got %q (queued %v), want the live delivery: a queued one was sent again", d.Body, d.Queued)
	}
	conn.Respond(d.ID, http.StatusOK, nil, nil)
}

// metricInt reads a counter from a /metrics answer; 0 when it is not there.
func metricInt(t *testing.T, resp *http.Response, name string) int {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}
