package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The first signal cancels the context; the second quits at once.
func TestSignalContext(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	quit := make(chan struct{})
	ctx, stop := signalContext(context.Background(), signalWatch{Signals: sigs, Quit: func(os.Signal) { close(quit) }})
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

// A SIGPIPE stops the command only when an output is closed (a broken
// socket raises it too), with a cause that names the output and the
// status SIGPIPE gives; Ctrl-C after it is the first, not the second.
func TestSignalContext_ClosedOutput(t *testing.T) {
	sigs, pipes := make(chan os.Signal), make(chan os.Signal)
	broken := make(chan string, 1)
	quit := make(chan struct{})
	ctx, stop := signalContext(context.Background(), signalWatch{Signals: sigs, Pipes: pipes,
		Broken: func() string { return <-broken }, Quit: func(os.Signal) { close(quit) }})
	defer stop()
	broken <- ""
	pipes <- syscall.SIGPIPE // a socket's
	broken <- "standard output"
	pipes <- syscall.SIGPIPE // received once the first is handled
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a closed standard output did not cancel the context")
	}
	var cause *interruptError
	if !errors.As(context.Cause(ctx), &cause) || cause.ExitCode() != 141 || cause.Error() != "standard output closed (broken pipe)" {
		t.Fatalf("cause %v, want the closed standard output, exit status 141", context.Cause(ctx))
	}
	if err := stopReason(ctx, nil); err == nil || err.Error() != "stopped: standard output closed (broken pipe)" {
		t.Errorf("stopReason = %v", err)
	}
	sigs <- os.Interrupt
	select { // taken only by a watch that did not quit on the first
	case sigs <- os.Interrupt:
	case <-time.After(5 * time.Second):
		t.Fatal("the first Ctrl-C after a closed output quit")
	}
	select {
	case <-quit:
	case <-time.After(5 * time.Second):
		t.Fatal("the second Ctrl-C did not quit")
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
