package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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

// idleChecked returns whether the one idle connection of a's pool was
// checked by closedByPeer before the request it just served.
func idleChecked(t *testing.T, a *Agent) bool {
	t.Helper()
	a.conns.mu.Lock()
	defer a.conns.mu.Unlock()
	var cs []*hconn
	for _, l := range a.conns.idle {
		cs = append(cs, l...)
	}
	if len(cs) != 1 {
		t.Fatalf("%d idle connections, want 1", len(cs))
	}
	return cs[0].checked
}

// frozenClock stops the clock of a's pool at a time the test moves.
func frozenClock(a *Agent) *time.Time {
	now := time.Unix(1_000_000, 0)
	a.conns.now = func() time.Time { return now }
	return &now
}

// A connection is looked at (closedByPeer, a system call) before its
// first reuse and after it has been idle for uncheckedIdle, not before a
// reuse soon after its answer.
func TestDirectQuickReuseUnchecked(t *testing.T) {
	if uncheckedIdle == 0 {
		t.Skip("every reuse is checked here")
	}
	s := newCounted(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	a := testAgent(t, false, nil)
	now := frozenClock(a)
	for i, tc := range []struct {
		idle    time.Duration // before the forward
		checked bool
	}{
		{0, false}, // a new connection
		{0, true},  // its first reuse
		{0, false},
		{uncheckedIdle - time.Millisecond, false},
		{uncheckedIdle, true},
		{time.Millisecond, false},
	} {
		*now = now.Add(tc.idle)
		if at := sendTo(context.Background(), a, "POST", s.URL, nil, []byte("x")); at.Status != 200 {
			t.Fatalf("forward %d: %d %q", i+1, at.Status, at.Error)
		}
		if got := idleChecked(t, a); got != tc.checked {
			t.Errorf("forward %d, after %s idle: checked %v, want %v", i+1, tc.idle, got, tc.checked)
		}
	}
	if n := s.accepts.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// A receiver that drops kept-alive connections soon after an answer
// (within uncheckedIdle), without saying so. One that drops each
// connection after its first answer is found by the check of a
// connection's first reuse. One that drops a connection later costs the
// forward written on it unchecked a second write: the receiver's FIN did
// not acknowledge it, so it is sent again on a new connection; from then
// on every reuse of a connection to it is checked. No forward fails, and
// the receiver never gets a request twice.
func TestDirectReceiverDroppingConnectionsSoonAfterAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers int // on a connection, before the receiver drops it
		failed  []int
	}{
		{"after each answer", 1, nil},
		{"after the second answer", 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[string]int{}        // X-Id → times received
			dropped := make(chan bool, 16) // after each answer: whether the connection was dropped
			base := rawServer(t, func(_ int, c net.Conn) {
				br := bufio.NewReader(c)
				for i := 1; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					mu.Lock()
					got[req.Header.Get("X-Id")]++
					mu.Unlock()
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					if i == tc.answers {
						c.Close()
						dropped <- true
						return
					}
					dropped <- false
				}
			})
			a := testAgent(t, false, nil)
			frozenClock(a) // every reuse comes within uncheckedIdle
			var failed []int
			for i := 1; i <= 8; i++ {
				at := sendTo(context.Background(), a, "POST", base, http.Header{"X-Id": {strconv.Itoa(i)}}, []byte("x"))
				if at.Status != 200 {
					failed = append(failed, i)
					if at.Error == "" {
						t.Errorf("forward %d: %d without an error", i, at.Status)
					}
				}
				if at.Status != 200 {
					continue
				}
				select {
				case d := <-dropped:
					if d { // the drop has to reach the agent's side
						waitFor(t, "the agent does not see the receiver's close", func() bool { return idleClosedByPeer(a) })
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("forward %d: the receiver did not say whether it dropped the connection", i)
				}
			}
			if !slices.Equal(failed, tc.failed) {
				t.Errorf("forwards %v failed, want %v", failed, tc.failed)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i <= 8; i++ {
				want := 1
				if slices.Contains(tc.failed, i) {
					want = 0
				}
				if n := got[strconv.Itoa(i)]; n != want {
					t.Errorf("the receiver got forward %d %d times, want %d", i, n, want)
				}
			}
			if uncheckedIdle > 0 && !a.conns.checked[strings.TrimPrefix(base, "http://")] {
				t.Errorf("the receiver's connections are not checked before every reuse")
			}
		})
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
// arrives, unread, with a reset, or after reading it without an answer (a
// Go handler that panics), on the connection's first reuse (checked by
// closedByPeer) or a later one (unchecked). The receiver may have acted on
// the request: its TCP acknowledged it, or its reset does not say. It is
// not sent again (as net/http does not send a POST again), so the receiver
// never gets one delivery twice from one attempt. The attempt says what
// happened.
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
		}, 0},
		{"read, then dropped without an answer", func(br *bufio.Reader, c net.Conn) bool {
			req, err := http.ReadRequest(br)
			if err == nil {
				io.Copy(io.Discard, req.Body)
			}
			return err == nil
		}, 1},
	} {
		for _, dropAt := range []int{2, 3} { // the first reuse, checked; the second, not
			t.Run(fmt.Sprintf("%s, request %d", tc.name, dropAt), func(t *testing.T) {
				var read, accepts, lastConn atomic.Int32
				base := rawServer(t, func(n int, c net.Conn) {
					accepts.Add(1)
					br := bufio.NewReader(c)
					for i := 1; ; i++ {
						if n == 1 && i == dropAt {
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
				frozenClock(a) // every reuse comes within uncheckedIdle
				for i := 1; i < dropAt; i++ {
					if at := sendTo(context.Background(), a, "POST", base, nil, []byte("x")); at.Status != 200 {
						t.Fatalf("forward %d: %d %q", i, at.Status, at.Error)
					}
				}
				at := sendTo(context.Background(), a, "POST", base, nil, []byte("x"))
				if at.Status != 0 || at.Error == "" {
					t.Errorf("forward %d: %d %q, want no answer and why", dropAt, at.Status, at.Error)
				}
				// The next forward takes a new connection and goes
				// through. The receiver answered it, so it has read it
				// and every request sent before it: a retry of the
				// dropped one would have been read first, on the second
				// connection.
				if at := sendTo(context.Background(), a, "POST", base, nil, []byte("x")); at.Status != 200 {
					t.Fatalf("forward %d: %d %q", dropAt+1, at.Status, at.Error)
				}
				want := int32(dropAt) + tc.wantRead
				if n, m, c := read.Load(), accepts.Load(), lastConn.Load(); n != want || m != 2 || c != 2 {
					t.Errorf("the receiver read %d requests on %d connections, the last on connection %d; want %d on 2, the last on the second",
						n, m, c, want)
				}
			})
		}
	}
}

// A receiver that closes a kept-alive connection as idle, with a FIN,
// just before the next request reaches it, on a reuse unchecked
// (within uncheckedIdle): its FIN acknowledged no byte of the request,
// so the request is sent again on a new connection, and the receiver
// handles it once. Where that cannot be told (not Linux), every reuse is
// checked and the request goes on a new connection at once.
func TestDirectRetriesARequestWrittenOnAConnectionClosedAsIdle(t *testing.T) {
	var handled, accepts atomic.Int32
	closed := make(chan struct{})
	base := rawServer(t, func(n int, c net.Conn) {
		accepts.Add(1)
		br := bufio.NewReader(c)
		for i := 1; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			handled.Add(1)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if n == 1 && i == 2 {
				c.Close() // idle: closed before the third arrives
				close(closed)
				return
			}
		}
	})
	a := testAgent(t, false, nil)
	frozenClock(a) // every reuse comes within uncheckedIdle
	for i := 1; i <= 2; i++ {
		if at := sendTo(context.Background(), a, "POST", base, nil, []byte("x")); at.Status != 200 {
			t.Fatalf("forward %d: %d %q", i, at.Status, at.Error)
		}
	}
	<-closed
	waitFor(t, "the agent does not see the receiver's close", func() bool { return idleClosedByPeer(a) })
	if at := sendTo(context.Background(), a, "POST", base, nil, []byte("x")); at.Status != 200 {
		t.Fatalf("forward 3: %d %q, want it sent again and answered", at.Status, at.Error)
	}
	if n, m := handled.Load(), accepts.Load(); n != 3 || m != 2 {
		t.Errorf("the receiver handled %d requests on %d connections, want 3 on 2", n, m)
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
