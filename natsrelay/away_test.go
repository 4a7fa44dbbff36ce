package natsrelay_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
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
