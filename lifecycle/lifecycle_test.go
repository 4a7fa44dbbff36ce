package lifecycle_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/lifecycle"
)

// journal records what the parts did, in order.
type journal struct {
	mu      sync.Mutex
	log     []string
	changed chan struct{} // a token for each entry
}

func newJournal() *journal { return &journal{changed: make(chan struct{}, 100)} }

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.log = append(j.log, s)
	j.changed <- struct{}{}
}

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.log)
}

// blocking is a part that runs until stopped, or until fail is closed,
// when it returns err.
func blocking(j *journal, name string, fail <-chan struct{}, err error) (func(context.Context) error, func(context.Context) error) {
	stopped := make(chan struct{})
	var once sync.Once
	run := func(ctx context.Context) error {
		j.add("start " + name)
		select {
		case <-stopped:
			return nil
		case <-fail:
			return err
		}
	}
	stop := func(context.Context) error {
		j.add("stop " + name)
		once.Do(func() { close(stopped) })
		return nil
	}
	return run, stop
}

// waitFor waits for n more entries.
func waitFor(t *testing.T, j *journal, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-deadline:
			t.Fatalf("only %v happened", j.get())
		case <-j.changed:
		}
	}
}

// noLeak fails when goroutines started by the test are still running.
func noLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		// Goroutines that were told to end take a moment to go: yield to
		// them, up to a deadline.
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			runtime.Gosched()
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Errorf("%d goroutines left running (%d before)", n, before)
		}
	})
}

func TestRun_ContextEndStopsAllInReverse(t *testing.T) {
	noLeak(t)
	j := newJournal()
	var g lifecycle.Group
	g.Close("store", func() error { j.add("close store"); return nil })
	run, stop := blocking(j, "relay", nil, nil)
	g.Go("relay", run, stop)
	run, stop = blocking(j, "inspector", nil, nil)
	g.Go("inspector", run, stop)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	waitFor(t, j, 2)
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run after the context ended = %v, want nil", err)
	}
	got := j.get()
	want := []string{"stop inspector", "stop relay", "close store"}
	if !slices.Equal(got[2:], want) {
		t.Errorf("stopping order %v, want %v", got[2:], want)
	}
}

// ctxKey is a key of a value in Run's context.
type ctxKey struct{}

// The end of Run's context (Ctrl-C) stops the parts one after the other,
// in reverse, as a failing part does: a part's context is canceled only
// once the parts added after it have stopped, so that the last part (an
// announcement undoing a webhook) still has the first (the agent's
// connection) while it stops.
func TestRun_ContextEndCancelsEachPartAtItsTurn(t *testing.T) {
	noLeak(t)
	j := newJournal()
	var g lifecycle.Group
	agentCtx := make(chan context.Context, 1)
	g.Go("agent", func(ctx context.Context) error {
		agentCtx <- ctx
		j.add("start agent")
		<-ctx.Done()
		j.add("agent canceled")
		return nil
	}, nil)
	release := make(chan struct{})
	g.Go("announcement", func(ctx context.Context) error {
		j.add("start announcement")
		<-ctx.Done()
		j.add("announcement canceled")
		<-release // undoing the webhook
		j.add("announcement undone")
		return nil
	}, nil)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "value"))
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	waitFor(t, j, 2)
	actx := <-agentCtx
	if actx.Value(ctxKey{}) != "value" {
		t.Error("a part's context lacks the values of Run's")
	}
	cancel()
	waitFor(t, j, 1) // the announcement's turn
	if err := actx.Err(); err != nil {
		t.Errorf("the agent's context ended (%v) while the announcement, added after it, was still stopping", err)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("Run after the context ended = %v, want nil", err)
	}
	want := []string{"announcement canceled", "announcement undone", "agent canceled"}
	if got := j.get(); !slices.Equal(got[2:], want) {
		t.Errorf("stopping order %v, want %v", got[2:], want)
	}
}

func TestRun_AFailingPartStopsTheOthers(t *testing.T) {
	noLeak(t)
	j := newJournal()
	var g lifecycle.Group
	g.Close("store", func() error { j.add("close store"); return errors.New("final flush failed") })
	fail := make(chan struct{})
	run, stop := blocking(j, "relay", fail, errors.New("listener broke"))
	g.Go("relay", run, stop)
	run, stop = blocking(j, "inspector", nil, nil)
	g.Go("inspector", run, stop)
	errc := make(chan error, 1)
	go func() { errc <- g.Run(context.Background()) }()
	waitFor(t, j, 2)
	close(fail)
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("a failed part did not stop the group")
	}
	if err == nil || !strings.Contains(err.Error(), "relay: listener broke") || !strings.Contains(err.Error(), "close store: final flush failed") {
		t.Fatalf("Run = %v, want the relay's error and the store's", err)
	}
	if !strings.HasPrefix(err.Error(), "relay: listener broke") {
		t.Errorf("the error that stopped the group does not come first: %v", err)
	}
	got := j.get()
	if want := []string{"stop inspector", "stop relay", "close store"}; !slices.Equal(got[2:], want) {
		t.Errorf("stopping order %v, want %v", got[2:], want)
	}
}

func TestRun_APartThatEndsOnItsOwn(t *testing.T) {
	noLeak(t)
	var g lifecycle.Group
	g.Go("agent", func(context.Context) error { return nil }, nil)
	g.Go("waiter", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, nil)
	err := g.Run(context.Background())
	var se *lifecycle.StoppedError
	if !errors.As(err, &se) || se.Name != "agent" {
		t.Fatalf("Run = %v, want a StoppedError of the agent", err)
	}
}

func TestRun_APartThatDoesNotStop(t *testing.T) {
	noLeak(t)
	release := make(chan struct{})
	defer close(release)
	g := lifecycle.Group{StopTimeout: 20 * time.Millisecond}
	g.Go("stuck", func(context.Context) error { <-release; return nil }, func(context.Context) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := g.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "stop stuck: it did not end within 40ms") {
		t.Fatalf("Run = %v, want the stuck part named", err)
	}
}

func TestRun_ErrorsWhileStoppingCount(t *testing.T) {
	noLeak(t)
	var g lifecycle.Group
	stopped := make(chan struct{})
	g.Go("recorder", func(context.Context) error {
		<-stopped
		return errors.New("the last batch was not written")
	}, func(context.Context) error { close(stopped); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Run(ctx); err == nil || err.Error() != "recorder: the last batch was not written" {
		t.Fatalf("Run = %v, want the recorder's error while stopping", err)
	}
}

// A real server: its listener closed under it stops the group with an
// error; a request in flight at the end of the context completes.
func TestServe(t *testing.T) {
	noLeak(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var g lifecycle.Group
	g.Serve("the inspector", &http.Server{Handler: http.NotFoundHandler()}, ln)
	errc := make(chan error, 1)
	go func() { errc <- g.Run(context.Background()) }()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ln.Close()
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("a server whose listener broke did not stop the group")
	}
	if err == nil || !strings.HasPrefix(err.Error(), "the inspector: ") {
		t.Fatalf("Run = %v, want the server's error", err)
	}
	http.DefaultClient.CloseIdleConnections()

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inflight, release := make(chan struct{}), make(chan struct{})
	var g2 lifecycle.Group
	g2.Serve("the relay", &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inflight)
		<-release
		io.WriteString(w, "done")
	})}, ln)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { errc <- g2.Run(ctx) }()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-inflight
	cancel()
	close(release)
	if err := <-errc; err != nil {
		t.Errorf("Run after the context ended = %v", err)
	}
	if s := <-got; s != "done" {
		t.Errorf("the request in flight got %q", s)
	}
	http.DefaultClient.CloseIdleConnections()
}

// A part that ends cleanly because the context ended is no cause, even
// when Run sees it end before it sees the context's end.
func TestRun_APartEndingWithTheContextIsNoCause(t *testing.T) {
	noLeak(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 {
		// Many parts: the first have ended by the time Run, having started
		// the last, looks at both the context and the parts.
		var g lifecycle.Group
		for range 50 {
			g.Go("agent", func(ctx context.Context) error { <-ctx.Done(); return nil }, nil)
		}
		if err := g.Run(ctx); err != nil {
			t.Fatalf("Run after the context ended = %v, want nil", err)
		}
	}
}

// Abandon closes what was added, servers' listeners included, in reverse,
// starts nothing, and returns the wiring's error with the closes'.
func TestAbandon(t *testing.T) {
	noLeak(t)
	j := newJournal()
	var g lifecycle.Group
	g.Close("store", func() error { j.add("close store"); return errors.New("final flush failed") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.Serve("the inspector", &http.Server{Handler: http.NotFoundHandler()}, ln)
	g.Go("agent", func(context.Context) error { j.add("start agent"); return nil }, nil)
	g.Close("inspector", func() error { j.add("close inspector"); return nil })
	wiring := errors.New("the channel could not be opened")
	err = g.Abandon(wiring)
	if !errors.Is(err, wiring) || !strings.Contains(err.Error(), "close store: final flush failed") {
		t.Fatalf("Abandon = %v, want the wiring's error and the store's", err)
	}
	if got, want := j.get(), []string{"close inspector", "close store"}; !slices.Equal(got, want) {
		t.Errorf("Abandon did %v, want %v", got, want)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("the server's listener is still open after Abandon")
	}
}

// ServeTLS serves HTTPS with srv.TLSConfig's certificate, HTTP/2 offered,
// and stops with the group.
func TestServeTLS(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.EnableHTTP2 = true
	ts.StartTLS() // for its certificate and a client that trusts it
	client := ts.Client()
	cfg := ts.TLS.Clone()
	ts.Close()
	noLeak(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var g lifecycle.Group
	g.ServeTLS("the emulator", &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}), TLSConfig: cfg}, ln)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	resp, err := client.Get("https://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "HTTP/2.0" {
		t.Errorf("served %q, want HTTP/2.0 over TLS", b)
	}
	client.CloseIdleConnections()
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run after the context ended = %v", err)
	}
}
