package natsrelay_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
	"github.com/nats-io/nats.go"
)

// With NATS gone, a delivery for an agent on another instance is answered
// 503 with Retry-After within LostWait of the loss (1 s; asserted with
// slack: under 3 s), whether it was waiting for the agent's answer when
// NATS went, or arrived after, large or small; a delivery for an agent on
// the instance it arrives at still gets the agent's answer.
func TestNATSAwayAnsweredWithinBound(t *testing.T) {
	const bound = 3 * time.Second // LostWait, 1 s, with slack for a loaded machine
	ns := natstest.Run(t)
	cfg := natsrelay.Config{ResponseTimeout: 20 * time.Second, LostWait: time.Second}
	a, b := startInstanceWith(t, ns, cfg), startInstanceWith(t, ns, cfg)
	cr := openOn(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: a.URL, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	// The agent answers when told to.
	got, answer, done := make(chan string, 8), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			d, err := conn.Receive()
			if err != nil {
				return
			}
			got <- string(d.Body)
			if string(d.Body) == "slow" {
				<-answer
			}
			conn.Respond(d.ID, http.StatusOK, nil, []byte("ok"))
		}
	}()
	defer func() { conn.Close(); <-done }()
	for _, in := range []*instance{a, b} {
		if resp, _ := send(t, in.URL+"/c/"+cr.Channel+"/x", "warm"); resp.StatusCode != http.StatusOK {
			t.Fatalf("with NATS up: %s", resp.Status)
		}
		<-got
	}

	// A delivery waits for the agent's answer through B when NATS goes.
	slow := make(chan *http.Response, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(b.URL+"/c/"+cr.Channel+"/x", "text/plain", strings.NewReader("slow"))
		if err != nil {
			t.Error(err)
		} else {
			resp.Body.Close()
		}
		slow <- resp
	}()
	if body := <-got; body != "slow" {
		t.Fatalf("agent got %q", body)
	}
	killed := time.Now()
	ns.Shutdown()
	resp := <-slow
	elapsed := time.Since(killed)
	if resp == nil {
		t.FailNow()
	}
	t.Logf("waiting for the answer when NATS went: %s, %s after the kill", resp.Status, elapsed)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || elapsed > bound {
		t.Fatalf("waiting for the answer when NATS went: %s, Retry-After %q, after %s (bound %s)", resp.Status, resp.Header.Get("Retry-After"), elapsed, bound)
	}
	close(answer)

	// Deliveries that arrive while NATS is away, small and large.
	for _, body := range []string{"after", bigBody(wire.DefaultMaxBody, 2)} {
		start := time.Now()
		resp, _ := send(t, b.URL+"/c/"+cr.Channel+"/x", body)
		elapsed := time.Since(start)
		t.Logf("%d bytes sent with NATS away: %s after %s", len(body), resp.Status, elapsed)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || elapsed > bound {
			t.Fatalf("%d bytes sent with NATS away: %s, Retry-After %q, after %s (bound %s)", len(body), resp.Status, resp.Header.Get("Retry-After"), elapsed, bound)
		}
	}
	// The agent's own instance still passes deliveries to it.
	if resp, _ := send(t, a.URL+"/c/"+cr.Channel+"/x", "local"); resp.StatusCode != http.StatusOK {
		t.Fatalf("to the agent's own instance with NATS away: %s", resp.Status)
	}
	if body := <-got; body != "local" {
		t.Fatalf("agent got %q", body)
	}
}

// With the NATS server killed under a cluster, a delivery that needs NATS
// is answered 503 with Retry-After, on the instance that holds its channel
// (it cannot be queued) as on one that has not seen the channel (it cannot
// be read: that was a 500 without Retry-After). The relay's log says that
// the connection to NATS is lost, since when, and what the sender got,
// never "context canceled": the loss canceled the call, not a caller. The
// loss is said once per instance (ConnLog), and the store's failures at
// most once per 10 s per instance, not once per delivery.
func TestNATSAwaySaysWhyAndWhatTheSenderGot(t *testing.T) {
	ns := natstest.Run(t)
	var mu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	cfg := natsrelay.Config{Logf: logf, LostWait: time.Second}
	opts := func() []nats.Option {
		return append(natsrelay.ReconnectOptions(), (&natsrelay.ConnLog{Logf: logf}).Options()...)
	}
	a, b := startInstanceWith(t, ns, cfg, opts()...), startInstanceWith(t, ns, cfg, opts()...)
	cr := openOn(t, a)
	defer func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("the relays' log:\n%s", strings.Join(logs, "\n"))
			mu.Unlock()
		}
	}()

	killed := time.Now()
	ns.Shutdown()
	const sends = 10
	for i := range sends {
		for _, in := range []*instance{a, b} {
			resp, body := send(t, in.URL+"/c/"+cr.Channel+"/x", fmt.Sprintf("away %d", i))
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("delivery %d to %s with NATS away: %s, Retry-After %q, %q; want 503 with Retry-After: 1", i, in.URL, resp.Status, resp.Header.Get("Retry-After"), body)
			}
		}
	}
	elapsed := time.Since(killed)

	mu.Lock()
	defer mu.Unlock()
	var queued, read, lost int
	for _, l := range logs {
		if strings.Contains(l, "context canceled") {
			t.Errorf("a line blames a cancel for the loss of NATS: %s", l)
		}
		switch {
		case strings.HasPrefix(l, "relay: NATS connection lost"):
			lost++
		case strings.HasPrefix(l, "relay: queue delivery"):
			queued++
		case strings.HasPrefix(l, "relay: read channel"):
			read++
		default:
			continue
		}
		if strings.HasPrefix(l, "relay: NATS") {
			continue
		}
		for _, want := range []string{"the connection to NATS is lost (since 20", "its sender got 503 with Retry-After: 1"} {
			if !strings.Contains(l, want) {
				t.Errorf("line %q does not say %q", l, want)
			}
		}
	}
	if lost != 2 {
		t.Errorf("the loss said %d times, want once for each of the 2 instances", lost)
	}
	if queued == 0 || read == 0 {
		t.Errorf("the failures to queue (%d lines) and to read the channel (%d) are not both said", queued, read)
	}
	// At most one line every 10 s for each instance: bounded from above
	// by the time the sends took.
	if most := 2 * (1 + int(elapsed/(10*time.Second))); queued+read > most {
		t.Errorf("%d lines of the store's failures for %d refusals in %s, want at most %d", queued+read, 2*sends, elapsed.Round(time.Millisecond), most)
	}
}

// Why says what ended a call: the loss of NATS rather than the context
// canceled by it, and nats.go's refusal to send on a connection that is
// down (it keeps nothing for the reconnect) as the loss, which it is.
// The errors of a loss are injected here: the race they come from (a call
// that saw the connection up, sent as it went) is not one a test can
// bring about at will.
func TestWhy(t *testing.T) {
	away := fmt.Errorf("%w (since 2026-01-02T03:04:05.000Z)", natsrelay.ErrNATSAway)
	lost, cancel := context.WithCancelCause(context.Background())
	cancel(away)
	for _, tt := range []struct {
		name string
		ctx  context.Context
		err  error
		want string
		away bool
	}{
		{"canceled by the loss", lost, fmt.Errorf("jetstream: %w", context.Canceled), away.Error(), true},
		{"refused to send after the loss", lost, nats.ErrReconnectBufExceeded, away.Error(), true},
		{"another error after the loss", lost, nats.ErrConnectionClosed, away.Error() + " (" + nats.ErrConnectionClosed.Error() + ")", true},
		{"refused to send before the handler ran", context.Background(), nats.ErrReconnectBufExceeded, "natsrelay: the connection to NATS is lost (nats.go refused to send: " + nats.ErrReconnectBufExceeded.Error() + ")", true},
		{"no loss", context.Background(), nats.ErrTimeout, nats.ErrTimeout.Error(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := natsrelay.Why(tt.ctx, tt.err)
			if err.Error() != tt.want || errors.Is(err, natsrelay.ErrNATSAway) != tt.away {
				t.Errorf("Why = %q (the loss: %v), want %q (%v)", err, errors.Is(err, natsrelay.ErrNATSAway), tt.want, tt.away)
			}
		})
	}
}
