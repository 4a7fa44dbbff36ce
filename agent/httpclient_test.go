package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// nopStore is a Store for tests that only forward.
type nopStore struct{ Store }

// testAgent returns an agent that forwards with its own client, or with
// net/http when viaNetHTTP is set (a Config.Client, as before).
func testAgent(t testing.TB, viaNetHTTP bool, mod func(*Config)) *Agent {
	t.Helper()
	cfg := Config{Store: nopStore{}, Concurrency: 8}
	if viaNetHTTP {
		cfg.Client = NewClient(8, nil)
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.CloseIdleConnections)
	return a
}

// sendTo forwards one request to target and returns the attempt.
func sendTo(ctx context.Context, a *Agent, method, target string, header http.Header, body []byte) devhook.Attempt {
	at := devhook.Attempt{Target: target}
	a.send(ctx, &at, method, header, body)
	return at
}

func (p *connPool) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.idle {
		n += len(l)
	}
	return n
}

// counted is an httptest server that counts the connections it accepts
// and the requests it handles.
type counted struct {
	*httptest.Server
	accepts  atomic.Int32
	closes   atomic.Int32
	requests atomic.Int32
	closed   chan struct{} // one value for each connection closed (or hijacked)
}

// waitClosed waits, with a deadline, until the server has seen n more
// of its connections closed.
func (s *counted) waitClosed(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-s.closed:
		case <-deadline:
			t.Fatalf("the receiver's connection is still open (%d closed in all)", s.closes.Load())
		}
	}
}

// waitFor polls cond, which looks at something no event reports (what a
// socket holds), until it is true or 10 s have passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
	}
}

// idleClosedByPeer reports whether every idle connection of a's pool sees
// the receiver's close.
func idleClosedByPeer(a *Agent) bool {
	a.conns.mu.Lock()
	defer a.conns.mu.Unlock()
	for _, l := range a.conns.idle {
		for _, c := range l {
			if !c.closedByPeer() {
				return false
			}
		}
	}
	return true
}

func newCounted(t *testing.T, h http.HandlerFunc) *counted {
	t.Helper()
	s := &counted{closed: make(chan struct{}, 1024)}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h(w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepts.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closes.Add(1)
			select {
			case s.closed <- struct{}{}:
			default: // nobody waits for that many
			}
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// rawServer accepts connections and hands each to serve, with the number
// of the connection (from 1).
func rawServer(t *testing.T, serve func(n int, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(n, c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// recording reads from a connection and keeps what it read.
type recording struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recording) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

// The receiver gets the same bytes from the agent's client as from
// net/http's, and the attempts record the same answer.
func TestDirectSendsWhatNetHTTPSends(t *testing.T) {
	got := make(chan []byte, 1)
	base := rawServer(t, func(_ int, c net.Conn) {
		rec := &recording{r: c}
		br := bufio.NewReader(rec)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.Header.Get("Expect") == "100-continue" {
				io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
			}
			io.Copy(io.Discard, req.Body)
			if br.Buffered() != 0 {
				t.Errorf("%d bytes after the request", br.Buffered())
			}
			got <- bytes.Clone(rec.buf.Bytes())
			rec.buf.Reset()
			answer := "HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Rep: 1\r\nX-Rep: 2\r\nContent-Type: text/plain\r\n\r\n"
			if req.Method != http.MethodHead {
				answer += "hello"
			}
			io.WriteString(c, answer)
		}
	})
	sig := "t=1700000000,v1=" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, method, target string
		header               http.Header
		body                 []byte
	}{
		{"POST with a body", "POST", "/hook", http.Header{"Content-Type": {"application/json"}, "Service-Signature": {sig}, "User-Agent": {"sender/1.0"}, "Accept-Encoding": {"gzip"}},
			bytes.Repeat([]byte(`{"a":1}`), 200)},
		{"GET with a query", "GET", "/q?a=1&b=%20x&c=%2F", http.Header{"Accept": {"*/*"}}, nil},
		{"repeated headers", "POST", "/r", http.Header{"X-Multi": {"a", "b", "c"}, "Cookie": {"x=1", "y=2"}, "X-Empty": {""}}, []byte("body")},
		{"HEAD", "HEAD", "/h", http.Header{"X-A": {"1"}}, nil},
		{"POST with an empty body", "POST", "/e", http.Header{"Content-Type": {"application/json"}}, nil},
		{"PUT with an empty body", "PUT", "/p", nil, []byte{}},
		{"DELETE with a body", "DELETE", "/d", http.Header{}, []byte("gone")},
		{"GET with a body", "GET", "/g", http.Header{}, []byte("odd")},
		{"hop-by-hop headers", "POST", "/hop", http.Header{"Connection": {"X-Hop, keep-alive"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"},
			"Transfer-Encoding": {"chunked"}, "Te": {"trailers"}, "Upgrade": {"websocket"}, "Proxy-Authorization": {"Basic x"}, "X-Kept": {"yes"}}, []byte("x")},
		{"escaped path", "POST", "/a%2Fb/c%20d/%C3%A9", http.Header{}, []byte("x")},
		// These two go through net/http.
		{"credentials in the URL", "POST", "/auth", http.Header{}, []byte("x")},
		{"Expect: 100-continue", "POST", "/expect", http.Header{"Expect": {"100-continue"}}, []byte("x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wire [2][]byte
			var ats [2]devhook.Attempt
			for i, viaNetHTTP := range []bool{true, false} {
				a := testAgent(t, viaNetHTTP, nil)
				target := base + tc.target
				if tc.target == "/auth" {
					target = strings.Replace(target, "://", "://user:pa%20ss@", 1)
				}
				ats[i] = sendTo(context.Background(), a, tc.method, target, tc.header, tc.body)
				select {
				case wire[i] = <-got:
				case <-time.After(10 * time.Second):
					t.Fatalf("nothing received: %+v", ats[i])
				}
			}
			if tc.target == "/auth" && !bytes.Contains(wire[1], []byte("Authorization: Basic dXNlcjpwYSBzcw==\r\n")) {
				t.Errorf("no Authorization from the URL's credentials: %q", wire[1])
			}
			if !bytes.Equal(wire[0], wire[1]) {
				t.Errorf("net/http sent\n%q\nthe agent's client sent\n%q", wire[0], wire[1])
			}
			if fmt.Sprint(ats[0].Status, ats[0].Header, string(ats[0].Body), ats[0].Error) != fmt.Sprint(ats[1].Status, ats[1].Header, string(ats[1].Body), ats[1].Error) {
				t.Errorf("attempts differ:\nnet/http %d %v %q %q\ndirect   %d %v %q %q", ats[0].Status, ats[0].Header, ats[0].Body, ats[0].Error,
					ats[1].Status, ats[1].Header, ats[1].Body, ats[1].Error)
			}
			if ats[1].Status != 201 {
				t.Errorf("attempt %d %q", ats[1].Status, ats[1].Error)
			}
		})
	}
}

// Sequential forwards share one connection, and answers of every framing
// leave it usable: chunked, with no body (HEAD, 204, 304) and after 1xx.
func TestDirectKeepAlive(t *testing.T) {
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/chunked":
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/103":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusProcessing)
			w.Header().Del("Link")
			w.Write([]byte("after 1xx"))
		default:
			w.Write([]byte("ok " + r.Method))
		}
	})
	a := testAgent(t, false, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"POST", "/", 200, "ok POST"},
		{"POST", "/chunked", 200, "part0;part1;part2;"},
		{"HEAD", "/", 200, ""},
		{"GET", "/204", 204, ""},
		{"GET", "/304", 304, ""},
		{"POST", "/103", 200, "after 1xx"},
		{"GET", "/", 200, "ok GET"},
		{"POST", "/", 200, "ok POST"},
	} {
		at := sendTo(context.Background(), a, tc.method, s.URL+tc.path, http.Header{"X-A": {"1"}}, []byte("payload"))
		if at.Status != tc.status || string(at.Body) != tc.body || at.Error != "" {
			t.Errorf("%s %s: %d %q %q, want %d %q", tc.method, tc.path, at.Status, at.Body, at.Error, tc.status, tc.body)
		}
		if tc.path == "/103" && at.Header.Get("Link") != "" {
			t.Errorf("the 103's header is in the answer's: %v", at.Header)
		}
	}
	if n := s.accepts.Load(); n != 1 {
		t.Errorf("%d connections for 8 sequential forwards, want 1", n)
	}
	if n := a.conns.count(); n != 1 {
		t.Errorf("%d idle connections, want 1", n)
	}
}

// An answer with Connection: close, or from HTTP/1.0, is the end of its
// connection.
func TestDirectConnectionClose(t *testing.T) {
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		w.Write([]byte("ok"))
	})
	a := testAgent(t, false, nil)
	for i := range 3 {
		if at := sendTo(context.Background(), a, "GET", s.URL+"/close", nil, nil); at.Status != 200 || string(at.Body) != "ok" {
			t.Fatalf("forward %d: %d %q", i, at.Status, at.Error)
		}
		if n := a.conns.count(); n != 0 {
			t.Fatalf("%d idle connections after Connection: close", n)
		}
	}
	if n := s.accepts.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}

	var accepts atomic.Int32
	base := rawServer(t, func(_ int, c net.Conn) {
		accepts.Add(1)
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nold!")
		io.Copy(io.Discard, br) // until the client closes
	})
	for i := range 2 {
		if at := sendTo(context.Background(), a, "GET", base, nil, nil); at.Status != 200 || string(at.Body) != "old!" {
			t.Fatalf("HTTP/1.0 forward %d: %d %q", i, at.Status, at.Error)
		}
	}
	if n := accepts.Load(); n != 2 || a.conns.count() != 0 {
		t.Errorf("HTTP/1.0 without keep-alive: %d connections for 2 forwards, %d idle; want 2, 0", n, a.conns.count())
	}
}

// A receiver that closes an idle kept-alive connection (Node does after
// 5 s): the next forward opens another and the receiver gets it once.
func TestDirectIdleConnectionClosedByReceiver(t *testing.T) {
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	})
	a := testAgent(t, false, nil)
	if at := sendTo(context.Background(), a, "POST", s.URL, nil, []byte("1")); at.Status != 200 {
		t.Fatalf("first: %d %q", at.Status, at.Error)
	}
	s.CloseClientConnections() // closes the idle one
	s.waitClosed(t, 1)
	if peekWorks { // the close has to reach the agent's side too
		waitFor(t, "the agent does not see the receiver's close", func() bool { return idleClosedByPeer(a) })
	}
	if at := sendTo(context.Background(), a, "POST", s.URL, nil, []byte("2")); at.Status != 200 {
		t.Fatalf("second: %d %q", at.Status, at.Error)
	}
	if n, r := s.accepts.Load(), s.requests.Load(); n != 2 || r != 2 {
		t.Errorf("%d connections, %d requests; want 2, 2", n, r)
	}
}

// The receiver drops a kept-alive connection when the next request
// arrives, unread, or after reading it without an answer (a Go handler
// that panics). devhook cannot tell the two apart, and the receiver may
// have acted on the second: a request written whole is not sent again
// (as net/http does not send a POST again), so the receiver never gets
// one delivery twice from one attempt. The attempt says what happened.
func TestDirectNoRetryOfARequestWrittenWhole(t *testing.T) {
	for _, tc := range []struct {
		name     string
		drop     func(br *bufio.Reader, c net.Conn) bool // true: the request was read
		wantRead int32
	}{
		{"dropped unread", func(br *bufio.Reader, c net.Conn) bool {
			br.Peek(1)                    // the request is here:
			c.(*net.TCPConn).SetLinger(0) // drop it unread, with a reset
			return false
		}, 1},
		{"read, then dropped without an answer", func(br *bufio.Reader, c net.Conn) bool {
			req, err := http.ReadRequest(br)
			if err == nil {
				io.Copy(io.Discard, req.Body)
			}
			return err == nil
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var read, accepts, lastConn atomic.Int32
			base := rawServer(t, func(n int, c net.Conn) {
				accepts.Add(1)
				br := bufio.NewReader(c)
				for i := 1; ; i++ {
					if n == 1 && i == 2 {
						if tc.drop(br, c) {
							read.Add(1)
						}
						return
					}
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					read.Add(1)
					lastConn.Store(int32(n))
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			a := testAgent(t, false, nil)
			if at := sendTo(context.Background(), a, "POST", base, nil, []byte("x")); at.Status != 200 {
				t.Fatalf("first: %d %q", at.Status, at.Error)
			}
			at := sendTo(context.Background(), a, "POST", base, nil, []byte("x"))
			if at.Status != 0 || at.Error == "" {
				t.Errorf("second: %d %q, want no answer and why", at.Status, at.Error)
			}
			// The next forward takes a new connection and goes through.
			// The receiver answered it, so it has read it and every
			// request sent before it: a retry of the second would have
			// been read first, on the second connection (the third then
			// on a third connection, or after it on the second).
			if at := sendTo(context.Background(), a, "POST", base, nil, []byte("x")); at.Status != 200 {
				t.Fatalf("third: %d %q", at.Status, at.Error)
			}
			if n, m, c := read.Load(), accepts.Load(), lastConn.Load(); n != tc.wantRead+1 || m != 2 || c != 2 {
				t.Errorf("the receiver read %d requests on %d connections, the third on connection %d; want %d on 2, the third on the second",
					n, m, c, tc.wantRead+1)
			}
		})
	}
}

// A reused connection that the receiver drops while the request is still
// being written (a large body; it closed the idle connection as the
// request arrived) cannot have had the request acted on: it is sent again,
// once, on a new connection, and the receiver handles it once.
func TestDirectRetriesARequestCutWhileWritten(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 16<<20) // more than both socket buffers
	var handled, accepts atomic.Int32
	base := rawServer(t, func(n int, c net.Conn) {
		accepts.Add(1)
		br := bufio.NewReader(c)
		for i := 1; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if n == 1 && i == 2 {
				c.(*net.TCPConn).SetLinger(0) // only the head was read: reset
				return
			}
			io.Copy(io.Discard, req.Body)
			handled.Add(1)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	a := testAgent(t, false, nil)
	if at := sendTo(context.Background(), a, "POST", base, nil, []byte("x")); at.Status != 200 {
		t.Fatalf("first: %d %q", at.Status, at.Error)
	}
	if at := sendTo(context.Background(), a, "POST", base, nil, body); at.Status != 200 {
		t.Fatalf("second: %d %q, want it sent again and answered", at.Status, at.Error)
	}
	if n, m := handled.Load(), accepts.Load(); n != 2 || m != 2 {
		t.Errorf("the receiver handled %d requests on %d connections, want 2 on 2", n, m)
	}
}

// A receiver that dies mid-answer: an error, and no retry; nor is a new
// connection that fails before any answer retried.
func TestDirectNoRetryAfterAnAnswerBegan(t *testing.T) {
	for _, tc := range []struct {
		name, answer, wantErr string
		reuse                 bool
	}{
		{"cut in the head, fresh connection", "HTTP/1.1 200 OK\r\nContent-Le", "net/http: HTTP/1.x transport connection broken: malformed MIME header: missing colon: \"Content-Le\"", false},
		{"cut in the head, reused connection", "HTTP/1.1 200 OK\r\nContent-Le", "net/http: HTTP/1.x transport connection broken: malformed MIME header: missing colon: \"Content-Le\"", true},
		{"cut before the head, fresh connection", "", "EOF", false},
		{"cut in the body, reused connection", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "reading the receiver's answer: unexpected EOF", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got atomic.Int32
			base := rawServer(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if req.URL.Path == "/cut" {
						got.Add(1)
						io.WriteString(c, tc.answer)
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			for _, viaNetHTTP := range []bool{true, false} {
				got.Store(0)
				a := testAgent(t, viaNetHTTP, nil)
				if tc.reuse {
					if at := sendTo(context.Background(), a, "POST", base+"/", nil, []byte("x")); at.Status != 200 {
						t.Fatalf("first: %d %q", at.Status, at.Error)
					}
				}
				at := sendTo(context.Background(), a, "POST", base+"/cut", nil, []byte("x"))
				if at.Error != tc.wantErr {
					t.Errorf("net/http %v: error %q, want %q", viaNetHTTP, at.Error, tc.wantErr)
				}
				if n := got.Load(); n != 1 {
					t.Errorf("net/http %v: the receiver got %d copies, want 1", viaNetHTTP, n)
				}
			}
		})
	}
}

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

// CloseIdleConnections closes what the pool keeps.
func TestDirectCloseIdleConnections(t *testing.T) {
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) {})
	a := testAgent(t, false, nil)
	if at := sendTo(context.Background(), a, "GET", s.URL, nil, nil); at.Status != 200 || a.conns.count() != 1 {
		t.Fatalf("%d %q, %d idle", at.Status, at.Error, a.conns.count())
	}
	a.CloseIdleConnections()
	s.waitClosed(t, 1)
	if at := sendTo(context.Background(), a, "GET", s.URL, nil, nil); at.Status != 200 {
		t.Errorf("after closing: %d %q", at.Status, at.Error)
	}
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

// closedByPeer sees a receiver's close, and bytes nobody asked for, on an
// idle connection, without blocking on an open one.
func TestClosedByPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	u, _ := url.Parse("http://" + ln.Addr().String())
	for _, tc := range []struct {
		name   string
		server func(net.Conn)
		closed bool
	}{
		{"open", func(net.Conn) {}, false},
		{"closed", func(c net.Conn) { c.Close() }, true},
		{"reset", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, true},
		{"unasked bytes", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\n\r\n") }, true},
	} {
		c, err := dial(context.Background(), u, time.Now().Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		tc.server(sc)
		switch {
		case !peekWorks:
		case tc.closed: // what the receiver did has to reach this side
			waitFor(t, tc.name+": closedByPeer is still false", c.closedByPeer)
		default: // an open connection: closedByPeer answers at once
			if c.closedByPeer() {
				t.Errorf("%s: closedByPeer true, want false", tc.name)
			}
		}
		c.close()
		sc.Close()
	}
}

// outHeader sends what wire.EndToEnd leaves, with User-Agent, and copies
// only when it must.
func TestOutHeader(t *testing.T) {
	names := append([]string{}, "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "User-Agent", "Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges", "Age",
		"Alt-Svc", "Authorization", "Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Length", "Content-Location", "Content-Range", "Content-Type", "Cookie", "Date", "Etag", "Expect",
		"Expires", "Forwarded", "From", "Host", "Http2-Settings", "If-Match", "If-Modified-Since", "If-None-Match",
		"If-Range", "If-Unmodified-Since", "Last-Modified", "Link", "Location", "Max-Forwards", "Origin", "Pragma",
		"Proxy-Authentication-Info", "Range", "Referer", "Retry-After", "Server", "Set-Cookie", "Strict-Transport-Security",
		"Trailers", "Upgrade-Insecure-Requests", "Vary", "Via", "Warning", "Www-Authenticate", "X-Forwarded-For",
		"X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "X-Request-Id", "Service-Signature", "Alt-Used", "Early-Data")
	all := http.Header{}
	for _, n := range names {
		all[n] = []string{"v"}
		for _, ua := range [][]string{nil, {"sender/1"}} {
			h := http.Header{n: {"v"}, "X-Other": {"1", "2"}}
			if ua != nil && n != "User-Agent" {
				h["User-Agent"] = ua
			}
			checkOutHeader(t, h)
		}
	}
	checkOutHeader(t, all)
	checkOutHeader(t, http.Header{"Connection": {"X-A, x-b", "X-C"}, "X-A": {"1"}, "X-B": {"2"}, "X-C": {"3"}, "X-D": {"4"}, "User-Agent": {"u"}})

	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"u"}}
	if out := outHeader(h); fmt.Sprintf("%p", out) != fmt.Sprintf("%p", h) {
		t.Errorf("a header with nothing to change is copied")
	}
}

func checkOutHeader(t *testing.T, h http.Header) {
	t.Helper()
	before := fmt.Sprint(h)
	want := wire.EndToEnd(h)
	if _, ok := want["User-Agent"]; !ok {
		want["User-Agent"] = []string{""}
	}
	if got := outHeader(h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("outHeader(%v) = %v, want %v", h, got, want)
	}
	if fmt.Sprint(h) != before {
		t.Errorf("outHeader changed its argument: %v, was %v", h, before)
	}
}

// The agent's client and net/http's, forwarding the same requests to the
// same receiver, record the same attempts and open as many connections:
// answers of every framing, ones that end or keep their connection, 1xx
// before the answer, oversized ones, slow and hung receivers. Each case
// forwards three requests in turn, so that whether an answer leaves its
// connection usable shows in the count of connections.
func TestDirectAnswersAsNetHTTPDoes(t *testing.T) {
	const n = 3
	type serveFunc func(c net.Conn, br *bufio.Reader, req *http.Request) (keep bool)
	// write answers with s and keeps the connection.
	write := func(s string) serveFunc {
		return func(c net.Conn, _ *bufio.Reader, _ *http.Request) bool {
			io.WriteString(c, s)
			return true
		}
	}
	// last answers with s and closes the connection.
	last := func(s string) serveFunc {
		return func(c net.Conn, _ *bufio.Reader, _ *http.Request) bool {
			io.WriteString(c, s)
			return false
		}
	}
	ok := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("compressed answer"))
	zw.Close()
	for _, tc := range []struct {
		name   string
		method string
		body   []byte
		unread bool // serve reads the request's body itself, if at all
		mod    func(*Config)
		serve  serveFunc
		status int // of each attempt
		conns  int // for the n forwards
	}{
		{name: "Content-Length", serve: write(ok), status: 200, conns: 1},
		{name: "chunked", serve: write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), status: 200, conns: 1},
		{name: "chunked with a trailer", serve: write("HTTP/1.1 200 OK\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: t\r\n\r\n"), status: 200, conns: 1},
		{name: "chunked, cut", serve: last("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"), status: 200, conns: n},
		{name: "no Content-Length: the body ends with the connection", serve: last("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close"), status: 200, conns: n},
		{name: "HTTP/1.0 without a length", serve: last("HTTP/1.0 200 OK\r\n\r\nold"), status: 200, conns: n},
		{name: "HTTP/1.0 with keep-alive", serve: write("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: 1},
		{name: "Connection: close", serve: last("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: n},
		{name: "Connection: close, left open", serve: write("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: n},
		{name: "204", serve: write("HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"), status: 204, conns: 1},
		{name: "304", serve: write("HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n"), status: 304, conns: 1},
		{name: "HEAD", method: "HEAD", serve: write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"), status: 200, conns: 1},
		{name: "100 and 103 before the answer", serve: write("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + ok), status: 200, conns: 1},
		{name: "six 1xx before the answer", serve: write(strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n", 6) + ok), status: 200, conns: 1},
		{name: "101 without an upgrade asked for", serve: last("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nafter"), status: 101, conns: n},
		{name: "101, Upgrade among the Connection tokens", serve: last("HTTP/1.1 101 Switching Protocols\r\nConnection: keep-alive,\tupgrade\r\nUpgrade: x\r\n\r\nafter"), status: 101, conns: n},
		{name: "101 that switches nothing", serve: write("HTTP/1.1 101 Switching Protocols\r\nX-A: 1\r\n\r\n"), status: 101, conns: n},
		{name: "gzip, passed as is", serve: write(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s", gz.Len(), gz.Bytes())), status: 200, conns: 1},
		{name: "repeated headers", serve: write("HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n"), status: 200, conns: 1},
		{name: "malformed status line", serve: last("HTTP/1.1 abc OK\r\n\r\n"), conns: n},
		{name: "nothing, then the close", serve: last(""), conns: n},
		{name: "over MaxResponse", mod: func(c *Config) { c.MaxResponse = 100 },
			serve: write("HTTP/1.1 200 OK\r\nContent-Length: 150\r\n\r\n" + strings.Repeat("y", 150)), status: 200, conns: n},
		{name: "over MaxResponse, chunked", mod: func(c *Config) { c.MaxResponse = 100 },
			serve: write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n96\r\n" + strings.Repeat("y", 150) + "\r\n0\r\n\r\n"), status: 200, conns: n},
		{name: "1xx heads over 10 MB together", serve: last(strings.Repeat("HTTP/1.1 103 Early Hints\r\nX-Big: "+strings.Repeat("b", maxHeaderResponse/2)+"\r\n\r\n", 2) + ok), conns: n},
		{name: "headers over 10 MB", serve: last("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", maxHeaderResponse) + "\r\n\r\n"), conns: n},
		{name: "an answer before the body is read", body: bytes.Repeat([]byte("B"), 1<<20), unread: true,
			serve: func(c net.Conn, br *bufio.Reader, req *http.Request) bool {
				io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbig!")
				io.Copy(io.Discard, req.Body) // as Go's server does before it closes
				return false
			}, status: 413, conns: n},
		{name: "slow receiver", serve: func(c net.Conn, _ *bufio.Reader, _ *http.Request) bool {
			for i := range len(ok) {
				c.Write([]byte{ok[i]})
				time.Sleep(time.Millisecond)
			}
			return true
		}, status: 200, conns: 1},
		{name: "hung receiver", mod: func(c *Config) { c.ForwardTimeout = 100 * time.Millisecond },
			serve: func(c net.Conn, br *bufio.Reader, _ *http.Request) bool {
				io.Copy(io.Discard, br) // until the client gives up
				return false
			}, conns: n},
		{name: "hung in the body", mod: func(c *Config) { c.ForwardTimeout = 100 * time.Millisecond },
			serve: func(c net.Conn, br *bufio.Reader, _ *http.Request) bool {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart")
				io.Copy(io.Discard, br)
				return false
			}, status: 200, conns: n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := cmp.Or(tc.method, "POST")
			body := tc.body
			if body == nil && method != "HEAD" {
				body = []byte(`{"a":1}`)
			}
			var ats [2][n]devhook.Attempt
			var conns [2]int32
			for i, viaNetHTTP := range []bool{true, false} {
				var accepts atomic.Int32
				base := rawServer(t, func(_ int, c net.Conn) {
					accepts.Add(1)
					br := bufio.NewReader(c)
					for {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						if !tc.unread {
							io.Copy(io.Discard, req.Body)
						}
						if !tc.serve(c, br, req) {
							return
						}
					}
				})
				a := testAgent(t, viaNetHTTP, tc.mod)
				for j := range n {
					ats[i][j] = sendTo(context.Background(), a, method, base+"/hook", http.Header{"Content-Type": {"application/json"}}, body)
				}
				conns[i] = accepts.Load()
			}
			for j := range n {
				nh, d := &ats[0][j], &ats[1][j]
				if fmt.Sprint(nh.Status, nh.Header, nh.Body, nh.Error) != fmt.Sprint(d.Status, d.Header, d.Body, d.Error) {
					t.Errorf("forward %d:\nnet/http %d %v %q %q\ndirect   %d %v %q %q", j+1,
						nh.Status, nh.Header, trim(nh.Body), trim([]byte(nh.Error)), d.Status, d.Header, trim(d.Body), trim([]byte(d.Error)))
				}
				if d.Status != tc.status {
					t.Errorf("forward %d: %d %q, want %d", j+1, d.Status, trim([]byte(d.Error)), tc.status)
				}
			}
			if conns[0] != conns[1] || conns[1] != int32(tc.conns) {
				t.Errorf("%d forwards took %d connections through net/http, %d through the agent's client; want %d", n, conns[0], conns[1], tc.conns)
			}
		})
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

// trim shortens b for a message.
func trim(b []byte) string {
	if len(b) > 200 {
		return fmt.Sprintf("%s… (%d bytes)", b[:200], len(b))
	}
	return string(b)
}
