package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// The first signal cancels the context; the second quits at once.
func TestSignalContext(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	quit := make(chan struct{})
	ctx, stop := signalContext(context.Background(), sigs, func(os.Signal) { close(quit) })
	defer stop()
	if ctx.Err() != nil {
		t.Fatal("cancelled before any signal")
	}
	sigs <- os.Interrupt
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not cancel the context")
	}
	var cause *interruptError
	if !errors.As(context.Cause(ctx), &cause) || cause.ExitCode() != 130 || cause.Error() != "interrupted by SIGINT" {
		t.Fatalf("cause %v, want the interruption by SIGINT, exit status 130", context.Cause(ctx))
	}
	select {
	case <-quit:
		t.Fatal("quit after one signal")
	default:
	}
	sigs <- os.Interrupt
	select {
	case <-quit:
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal did not quit")
	}
}

func TestPrinterStopping(t *testing.T) {
	for n, want := range map[int]string{
		0: "stopping\n",
		1: "stopping, waiting up to 5 s for 1 delivery in flight (Ctrl-C again to quit now)\n",
		3: "stopping, waiting up to 5 s for 3 deliveries in flight (Ctrl-C again to quit now)\n",
	} {
		var buf bytes.Buffer
		(&printer{}).stopping(n, &buf)
		if buf.String() != want {
			t.Errorf("%d in flight: %q, want %q", n, buf.String(), want)
		}
	}
}

// Stopping with a delivery under way: listen says it waits for it, and
// the delivery's line says the relay keeps it, not that its sender got 502.
func TestListen_StoppingWithADeliveryInFlight(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer recv.Close()
	defer close(release)
	lr := startListen(t, "--forward", recv.URL, "--data", t.TempDir())
	pub := lr.next(t, "ready")["public_url"].(string)
	sent := make(chan int, 1)
	go func() {
		res, err := (&http.Client{Timeout: 20 * time.Second}).Post(pub+"/hook", "application/json", strings.NewReader(`{}`))
		if err != nil {
			sent <- 0
			return
		}
		res.Body.Close()
		sent <- res.StatusCode
	}()
	<-arrived
	lr.cancel()
	lr.cancel = nil
	if st := lr.next(t, "stopping"); st["in_flight"] != float64(1) {
		t.Errorf("stopping line %v, want in_flight 1", st)
	}
	if code := <-sent; code != http.StatusAccepted {
		t.Errorf("the sender got %d, want 202 (the relay queued it)", code)
	}
	release <- struct{}{}
	if d := lr.next(t, "delivery"); d["cut"] != true || d["receiver_status"] != float64(200) {
		t.Errorf("delivery line %v, want cut with the receiver's 200", d)
	}
	if err := <-lr.done; err != nil {
		t.Errorf("listen: %v", err)
	}
}
