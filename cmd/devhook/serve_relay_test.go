package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/lifecycle"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
)

// newServedRelay makes a relay on a bbolt store in a temporary directory,
// and a listener on 127.0.0.1 for serveRelay to serve it on; the relay
// and its store are closed when the test ends.
func newServedRelay(t *testing.T) (*relay.Server, *boltrelay.Store, net.Listener) {
	t.Helper()
	rdb, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	srv, err := relay.NewServer(relay.Config{Store: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, rdb, ln
}

// When the relay stops, a delivery waiting for its agent past the grace
// period is queued (202) and its sender told so, before wait returns and
// the store may close; a delivery answered within it gets its answer.
func TestServeRelay_StopQueuesWaitingDeliveries(t *testing.T) {
	srv, rdb, ln := newServedRelay(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// The grace bounds the quick delivery's answer, then the slow one's
	// write to the queue (a bbolt fsync) and its 202: on a loaded machine
	// either took more than 300 ms. The test lasts one grace: the slow
	// delivery waits it out.
	var g lifecycle.Group
	serveRelay(&g, "the relay", srv, ln, relay.ServeConfig{})
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	base := "http://" + ln.Addr().String()

	cr, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: base, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	received := make(chan struct{}, 2)
	answer := make(chan struct{})
	go func() { // an agent that answers "quick" once told to, and never "slow"
		for {
			d, err := conn.Receive()
			if err != nil {
				return
			}
			received <- struct{}{}
			if string(d.Body) == "quick" {
				go func() {
					<-answer
					conn.Respond(d.ID, 200, nil, []byte("answered"))
				}()
			}
		}
	}()
	type result struct {
		status int
		body   string
		err    error
	}
	send := func(body string) chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := http.Post(base+"/c/"+cr.Channel+"/", "text/plain", strings.NewReader(body))
			if err != nil {
				ch <- result{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch <- result{status: resp.StatusCode, body: string(b)}
		}()
		return ch
	}
	quick, slow := send("quick"), send("slow")
	<-received
	<-received
	stop()
	close(answer) // during the grace period
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second): // two graces, and room
		t.Fatal("the relay did not stop")
	}
	if r := <-quick; r.err != nil || r.status != 200 || r.body != "answered" {
		t.Errorf("the delivery answered during the stop: %+v", r)
	}
	if r := <-slow; r.err != nil || r.status != http.StatusAccepted || !strings.Contains(r.body, `"queued":true`) {
		t.Errorf("the delivery still waiting: %+v", r)
	}
	queued, err := rdb.Queued(cr.Channel, "", 10)
	if err != nil || len(queued) != 1 || string(queued[0].Body) != "slow" {
		t.Fatalf("queue after the stop: %v, %v", queued, err)
	}
}

// A request to the relay's own API that outlives both graces is cut, and
// the stop says so (it used to drop the second Shutdown's error and leave
// the connection and its handler running).
func TestServeRelay_StopCutsRequestsPastTheGrace(t *testing.T) {
	srv, _, ln := newServedRelay(t)
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	handlerDone := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/stuck", func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		close(started)
		select { // a handler that ends when its connection does, or when told
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.Handle("/", srv)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var g lifecycle.Group
	// The request never ends by itself: a short grace bets on nothing.
	serveRelay(&g, "the relay", srv, ln, relay.ServeConfig{Handler: mux, Grace: 100 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/stuck")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-started
	stop()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "requests still running after 200ms were cut") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run: %v, want the cut requests said", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not stop")
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("the stuck request's connection was not cut")
	}
	select {
	case <-handlerDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck request's handler still runs")
	}
}
