package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A relay whose server fails (its listener closed under it) stops by
// itself with that error, rather than running on until Ctrl-C.
func TestRelayServe_StopsWhenItsServerFails(t *testing.T) {
	lns := make(chan net.Listener, 1)
	o := &relayOptions{listenTCP: func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, addr)
		if err == nil {
			lns <- ln
		}
		return ln, err
	}}
	cmd := newRelayServeCmdWith(o)
	var out bytes.Buffer // read once the command returned
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--addr", "127.0.0.1:0", "--data", t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var ln net.Listener
	select {
	case ln = <-lns:
	case err := <-done:
		t.Fatalf("relay serve ended at start: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("relay serve did not listen")
	}
	// It serves: then its listener breaks.
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay serve does not answer: %v", err)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	ln.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("relay serve stopped with %v, want its server's error", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("relay serve runs on after its server failed")
	}
}
