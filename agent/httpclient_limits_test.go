package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// An answer over MaxResponse is cut and flagged, and its connection not
// kept; one of exactly MaxResponse bytes is whole.
func TestDirectMaxResponse(t *testing.T) {
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.Write(bytes.Repeat([]byte("y"), n))
	})
	for _, viaNetHTTP := range []bool{true, false} {
		a := testAgent(t, viaNetHTTP, func(c *Config) { c.MaxResponse = 100 })
		for _, tc := range []struct {
			query   string
			n       int
			wantErr string
		}{
			{"n=100", 100, ""},
			{"n=100&chunked=1", 100, ""},
			{"n=101", 100, "the receiver's answer is over 100 bytes; the rest was dropped"},
			{"n=100000&chunked=1", 100, "the receiver's answer is over 100 bytes; the rest was dropped"},
			{"n=0", 0, ""},
		} {
			at := sendTo(context.Background(), a, "GET", s.URL+"/?"+tc.query, nil, nil)
			if at.Status != 200 || len(at.Body) != tc.n || at.Error != tc.wantErr {
				t.Errorf("net/http %v, %s: %d, %d bytes, %q; want 200, %d bytes, %q", viaNetHTTP, tc.query, at.Status, len(at.Body), at.Error, tc.n, tc.wantErr)
			}
			if at.Body == nil {
				t.Errorf("net/http %v, %s: nil body", viaNetHTTP, tc.query)
			}
		}
	}
	a := testAgent(t, false, func(c *Config) { c.MaxResponse = 100 })
	before := s.accepts.Load()
	sendTo(context.Background(), a, "GET", s.URL+"/?n=100", nil, nil)
	sendTo(context.Background(), a, "GET", s.URL+"/?n=1000", nil, nil)
	sendTo(context.Background(), a, "GET", s.URL+"/?n=100", nil, nil)
	if n := s.accepts.Load() - before; n != 2 {
		t.Errorf("%d connections, want 2: a cut answer's connection is closed", n)
	}
}

// ForwardTimeout and the end of ctx interrupt a forward waiting for the
// head or the body, with the words net/http's path used.
//
// Neither the time a loaded machine takes to bring the head in nor how
// much the sockets buffer is known: a case that needs the head in before
// it interrupts tries again with more room (a longer ForwardTimeout, more
// of the body streamed before the cancel) when the interruption came
// first, until the room is beyond any machine's.
func TestDirectTimeoutAndCancel(t *testing.T) {
	release := make(chan struct{})
	// arrived gets a request's X-Case when its handler holds it: for
	// /stream, once it has written X-Stream bytes of its body, which the
	// agent reads from then on.
	arrived := make(chan string, 16)
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/body":
			w.WriteHeader(200)
			w.Write([]byte("part"))
			w.(http.Flusher).Flush()
		case "/stream":
			// Streams until the agent stops reading.
			w.WriteHeader(200)
			after, _ := strconv.Atoi(r.Header.Get("X-Stream"))
			chunk := bytes.Repeat([]byte("y"), 64<<10)
			for n := 0; ; n += len(chunk) {
				if n >= after {
					select {
					case arrived <- r.Header.Get("X-Case"):
					default:
					}
					after = math.MaxInt
				}
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}
		select {
		case arrived <- r.Header.Get("X-Case"):
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	// maxStream is more than the socket buffers of both sides hold: the
	// handler has written it only once the agent reads the body.
	const maxStream = 64 << 20
	for _, tc := range []struct {
		name, path string
		cancel     bool
		status     int
		wantErr    string
		// early is the error when the interruption came before the
		// head: then the case tries again with more room.
		early string
	}{
		{"timeout", "/", false, 0, "timeout: the receiver did not answer in time", ""},
		{"timeout in the body", "/body", false, 200, "reading the receiver's answer: context deadline exceeded", "timeout: the receiver did not answer in time"},
		{"cancel", "/", true, 0, "canceled: devhook is stopping", ""},
		{"cancel in the body", "/stream", true, 200, "reading the receiver's answer: context canceled", "canceled: devhook is stopping"},
	} {
		for _, viaNetHTTP := range []bool{true, false} {
			name := fmt.Sprintf("%s, net/http %v", tc.name, viaNetHTTP)
			timeout, stream := 150*time.Millisecond, 1<<20
			for try := 1; ; try++ {
				at, took := interruptOnce(t, s, arrived, tc.path, tc.cancel, timeout, stream, fmt.Sprintf("%s, try %d", name, try), viaNetHTTP)
				if at.Status == 0 && at.Error == tc.early && tc.early != "" {
					if timeout >= 20*time.Second || stream >= maxStream {
						t.Errorf("%s: still %q with a %s timeout and %d bytes streamed", name, at.Error, timeout, stream)
						break
					}
					t.Logf("%s: %q: the interruption came before the head; trying again with more room", name, at.Error)
					timeout, stream = timeout*2, stream*4
					continue
				}
				// The interruption ends the forward at once: not at the
				// end of the handler (never) or of ForwardTimeout.
				if took > 30*time.Second {
					t.Errorf("%s: took %s after the interruption", name, took)
				}
				if at.Status != tc.status || at.Error != tc.wantErr {
					t.Errorf("%s: %d %q, want %d %q", name, at.Status, at.Error, tc.status, tc.wantErr)
				}
				break
			}
		}
	}
	// A context that is already over: not sent.
	a := testAgent(t, false, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := s.requests.Load()
	if at := sendTo(ctx, a, "POST", s.URL, nil, nil); at.Error != "canceled: devhook is stopping" || s.requests.Load() != before {
		t.Errorf("canceled before: %q", at.Error)
	}
}

// interruptOnce forwards a request to s's path, interrupted by a
// ForwardTimeout of timeout, or by the end of its context once the handler
// says it holds it (cancel; /stream: after stream bytes of the body). It
// returns the attempt and how long the forward took after the
// interruption.
func interruptOnce(t *testing.T, s *counted, arrived chan string, path string, cancel bool, timeout time.Duration, stream int, id string, viaNetHTTP bool) (devhook.Attempt, time.Duration) {
	t.Helper()
	if cancel {
		timeout = 10 * time.Minute // only the cancel ends it
	}
	a := testAgent(t, viaNetHTTP, func(c *Config) {
		c.ForwardTimeout = timeout
		c.MaxResponse = 1 << 30
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	header := http.Header{"X-Case": {id}, "X-Stream": {strconv.Itoa(stream)}}
	var cancelled atomic.Int64 // when the cancel came, in UnixNano
	canceller := make(chan struct{})
	go func() {
		defer close(canceller)
		if !cancel {
			return
		}
		for {
			select {
			case got := <-arrived:
				if got == id {
					cancelled.Store(time.Now().UnixNano())
					stop()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	start := time.Now()
	at := sendTo(ctx, a, "POST", s.URL+path, header, []byte("x"))
	end := time.Now()
	stop()
	<-canceller
	if n := a.conns.count(); n != 0 {
		t.Errorf("%s: %d idle connections", id, n)
	}
	from := start.Add(timeout)
	if cancel {
		from = time.Unix(0, cancelled.Load())
	}
	return at, end.Sub(from)
}

// The end of a forward's context ends it on a kept-alive connection too,
// whose watch on that context (context.AfterFunc) stays from one forward
// to the next; a forward with another context takes the connection over,
// and the end of the first context leaves it alone; a connection whose
// context ended while it was idle is not used.
func TestDirectContextOnAKeptConnection(t *testing.T) {
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Write([]byte("ok"))
	})
	a := testAgent(t, false, func(c *Config) { c.ForwardTimeout = 10 * time.Minute })
	ok := func(ctx context.Context, what string) {
		t.Helper()
		if at := sendTo(ctx, a, "POST", s.URL, nil, []byte("x")); at.Status != 200 {
			t.Fatalf("%s: %d %q", what, at.Status, at.Error)
		}
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	ok(ctx1, "first, ctx1")
	ok(ctx1, "second, ctx1")
	ok(ctx2, "third, ctx2")
	cancel1() // ctx2's connection is not ctx1's business any more
	ok(ctx2, "fourth, ctx2")
	if n := s.accepts.Load(); n != 1 {
		t.Errorf("%d connections for four forwards, want 1", n)
	}

	// Ended while the connection is idle: the next forward, with another
	// context, takes a new one.
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	cancel2()
	ok(ctx3, "fifth, ctx3")
	if n := s.accepts.Load(); n != 2 {
		t.Errorf("%d connections after ctx2 ended, want 2", n)
	}

	// Ended during a forward on a connection it watched already.
	ok(ctx3, "sixth, ctx3")
	done := make(chan devhook.Attempt, 1)
	go func() { done <- sendTo(ctx3, a, "POST", s.URL+"/hold", nil, []byte("x")) }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the held forward did not arrive")
	}
	cancel3()
	select {
	case at := <-done:
		if at.Status != 0 || at.Error != "canceled: devhook is stopping" {
			t.Errorf("canceled forward: %d %q", at.Status, at.Error)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the end of the context did not end the forward")
	}
	if n := s.accepts.Load(); n != 2 || a.conns.count() != 0 {
		t.Errorf("%d connections, %d idle; want 2, 0", n, a.conns.count())
	}
}

// Connection refused says where nothing listens, on both paths.
func TestDirectConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String() + "/hook?a=1"
	ln.Close()
	for _, viaNetHTTP := range []bool{true, false} {
		a := testAgent(t, viaNetHTTP, nil)
		at := sendTo(context.Background(), a, "POST", base, nil, []byte("x"))
		if want := "connection refused: is your receiver running at " + base + "?"; at.Status != 0 || at.Error != want {
			t.Errorf("net/http %v: %d %q, want %q", viaNetHTTP, at.Status, at.Error, want)
		}
	}
}

// Many forwards at once: each gets its own answer, no more connections
// are kept than Concurrency, and none serves two requests at once.
func TestDirectConcurrent(t *testing.T) {
	var inFlight sync.Map // remote address → in use
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) {
		if _, busy := inFlight.LoadOrStore(r.RemoteAddr, true); busy {
			t.Errorf("two requests at once on %s", r.RemoteAddr)
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.Path)
		inFlight.Delete(r.RemoteAddr)
		w.Write(b)
	})
	const workers, each, conc = 64, 30, 16
	a := testAgent(t, false, func(c *Config) { c.Concurrency = conc })
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("%d-%d", g, i)
				body := []byte(strings.Repeat(id+";", 1+i%50))
				at := sendTo(context.Background(), a, "POST", s.URL+"/"+id, http.Header{"X-Id": {id}}, body)
				if at.Status != 200 || !bytes.Equal(at.Body, body) || at.Header.Get("X-Path") != "/"+id {
					t.Errorf("%s: %d %q %q %q", id, at.Status, at.Error, at.Header.Get("X-Path"), at.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := a.conns.count(); n > conc {
		t.Errorf("%d idle connections, over %d", n, conc)
	}
	if n := s.requests.Load(); n != workers*each {
		t.Errorf("%d requests, want %d", n, workers*each)
	}
	t.Logf("%d connections for %d requests", s.accepts.Load(), workers*each)
}

// Unasked bytes on an idle connection (a 408 before a receiver closes it)
// make it unusable.
func TestDirectUnsolicitedBytes(t *testing.T) {
	var accepts atomic.Int32
	answered := make(chan struct{}) // the test has the answer: the 408 may go
	sent := make(chan struct{})     // the 408 is written
	base := rawServer(t, func(n int, c net.Conn) {
		accepts.Add(1)
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		select {
		case <-answered: // the connection is idle in the agent's pool
		case <-time.After(10 * time.Second):
			return
		}
		io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
		sent <- struct{}{}
		io.Copy(io.Discard, br)
	})
	a := testAgent(t, false, nil)
	for i := range 2 {
		if at := sendTo(context.Background(), a, "GET", base, nil, nil); at.Status != 200 {
			t.Fatalf("forward %d: %d %q", i, at.Status, at.Error)
		}
		answered <- struct{}{}
		<-sent
		if peekWorks { // the bytes have to reach the agent's side too
			waitFor(t, "the agent does not see the unasked bytes", func() bool { return idleClosedByPeer(a) })
		}
	}
	if n := accepts.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// A 101 that switches protocols has what follows on the connection as its
// body, read until ForwardTimeout. (net/http's path waits for the receiver
// to close: its Transport hands the connection over with the answer, and
// the request's context no longer reaches it.)
func TestDirect101TimesOut(t *testing.T) {
	base := rawServer(t, func(_ int, c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nsome")
		io.Copy(io.Discard, br) // until the client gives up
	})
	a := testAgent(t, false, func(c *Config) { c.ForwardTimeout = 100 * time.Millisecond })
	at := sendTo(context.Background(), a, "POST", base, nil, []byte("x"))
	if want := "reading the receiver's answer: context deadline exceeded"; at.Status != 101 || string(at.Body) != "some" || at.Error != want {
		t.Errorf("%d %q %q, want 101 %q %q", at.Status, at.Body, at.Error, "some", want)
	}
	if n := a.conns.count(); n != 0 {
		t.Errorf("%d idle connections after a 101", n)
	}

	// Through net/http (https receivers, Config.Client) too: its 101 body is
	// the connection itself, which the request's context no longer ends.
	viaNetHTTP := testAgent(t, true, func(c *Config) { c.ForwardTimeout = 100 * time.Millisecond })
	done := make(chan devhook.Attempt, 1)
	go func() { done <- sendTo(context.Background(), viaNetHTTP, "POST", base, nil, []byte("x")) }()
	select {
	case at := <-done:
		if at.Status != 101 || string(at.Body) != "some" || !strings.HasPrefix(at.Error, "reading the receiver's answer: ") {
			t.Errorf("via net/http: %d %q %q, want 101 %q and a read error", at.Status, at.Body, at.Error, "some")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a forward through net/http to a silent 101 did not stop at ForwardTimeout")
	}
}
