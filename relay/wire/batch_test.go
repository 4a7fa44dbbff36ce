package wire

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// countConn counts the write(2)s that reach the connection.
type countConn struct {
	net.Conn
	writes atomic.Int64

	mu        sync.Mutex
	deadlines map[time.Time]bool // the write deadlines set
}

func (c *countConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	if c.deadlines == nil {
		c.deadlines = make(map[time.Time]bool)
	}
	c.deadlines[t] = true
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *countConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// echoCollector is a WebSocket server that collects every binary message
// it reads, over plain TCP or TLS.
type echoCollector struct {
	mu   sync.Mutex
	msgs [][]byte
	got  chan struct{} // a message arrived
}

func (e *echoCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{ReadBufferSize: 64 << 10}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	ws.SetReadLimit(64 << 20)
	for {
		_, m, err := ws.ReadMessage()
		if err != nil {
			return
		}
		e.mu.Lock()
		e.msgs = append(e.msgs, m)
		e.mu.Unlock()
		select {
		case e.got <- struct{}{}:
		default:
		}
	}
}

func (e *echoCollector) wait(t *testing.T, n int) [][]byte {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		e.mu.Lock()
		if len(e.msgs) >= n {
			out := append([][]byte(nil), e.msgs...)
			e.mu.Unlock()
			return out
		}
		have := len(e.msgs)
		e.mu.Unlock()
		select {
		case <-e.got:
		case <-deadline:
			t.Fatalf("the server got %d of %d messages", have, n)
		}
	}
}

// dialCorked dials url with a corkConn over a countConn under the
// WebSocket (and under TLS for wss).
func dialCorked(t *testing.T, url string, tlsConfig *tls.Config) (*websocket.Conn, *countConn) {
	t.Helper()
	var cc *countConn
	d := websocket.Dialer{TLSClientConfig: tlsConfig, NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc = &countConn{Conn: c}
		return NewCorkConn(cc), nil
	}}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws, cc
}

func TestWSWriterSendsQueuedFramesInOneWrite(t *testing.T) {
	col := &echoCollector{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(col)
	defer srv.Close()
	ws, cc := dialCorked(t, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	w := NewWriter(ws, 10*time.Second, nil)
	if w.cork == nil {
		t.Fatal("the writer did not find the corkConn under the WebSocket")
	}

	// While a write is in progress (hold stands for it), 50 callers
	// queue; release writes them in one write(2).
	const n = 50
	w.Hold()
	before := cc.writes.Load()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- w.Write([]byte(fmt.Sprintf("frame %03d:", i)), bytes.Repeat([]byte{byte(i)}, 100+i))
		}()
	}
	for {
		w.mu.Lock()
		q := len(w.queue)
		w.mu.Unlock()
		if q == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := cc.writes.Load() - before; got != 1 {
		t.Errorf("%d queued frames took %d write(2)s, want 1", n, got)
	}
	msgs := col.wait(t, n)
	seen := map[string]bool{}
	for _, m := range msgs {
		var i int
		if _, err := fmt.Sscanf(string(m[:10]), "frame %03d:", &i); err != nil {
			t.Fatalf("message %q: %v", m[:10], err)
		}
		if want := append([]byte(fmt.Sprintf("frame %03d:", i)), bytes.Repeat([]byte{byte(i)}, 100+i)...); !bytes.Equal(m, want) {
			t.Fatalf("message %d arrived changed", i)
		}
		seen[string(m[:10])] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages, want %d", len(seen), n)
	}

	// A lone write goes out at once, in one write(2).
	before = cc.writes.Load()
	if err := w.Write([]byte("alone"), nil); err != nil {
		t.Fatal(err)
	}
	if got := cc.writes.Load() - before; got != 1 {
		t.Errorf("a lone frame took %d write(2)s", got)
	}
	col.wait(t, n+1)
}

// Over TLS the cork sits under the TLS connection: records must leave in
// order, pings written beside the data included, or the peer fails them.
func TestWSWriterUnderTLSKeepsOrder(t *testing.T) {
	col := &echoCollector{got: make(chan struct{}, 1)}
	srv := httptest.NewTLSServer(col)
	defer srv.Close()
	tc := srv.Client().Transport.(*http.Transport).TLSClientConfig
	ws, cc := dialCorked(t, "wss"+strings.TrimPrefix(srv.URL, "https"), tc)
	w := NewWriter(ws, 10*time.Second, nil)
	if w.cork == nil {
		t.Fatal("the writer did not find the corkConn under TLS")
	}
	const senders, each = 32, 100
	stopPings := make(chan struct{})
	pingsDone := make(chan struct{})
	go func() {
		defer close(pingsDone)
		for {
			select {
			case <-stopPings:
				return
			default:
			}
			if err := ws.WriteControl(websocket.PingMessage, []byte("hb"), time.Now().Add(5*time.Second)); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Some frames over corkMax, so that gathering flushes midway.
				size := 200
				if i%25 == 0 {
					size = corkMax + 1000
				}
				if err := w.Write([]byte(fmt.Sprintf("%02d-%03d|", s, i)), bytes.Repeat([]byte{'x'}, size)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stopPings)
	<-pingsDone
	msgs := col.wait(t, senders*each)
	if len(msgs) != senders*each {
		t.Fatalf("%d messages, want %d", len(msgs), senders*each)
	}
	last := map[string]int{}
	for _, m := range msgs {
		var s, i int
		if _, err := fmt.Sscanf(string(m[:7]), "%02d-%03d|", &s, &i); err != nil {
			t.Fatal(err)
		}
		// Each sender's frames arrive in the order it wrote them.
		if prev, ok := last[fmt.Sprint(s)]; ok && i != prev+1 {
			t.Fatalf("sender %d: frame %d after %d", s, i, prev)
		}
		last[fmt.Sprint(s)] = i
	}
	t.Logf("%d frames in %d write(2)s", senders*each, cc.writes.Load())
}

// A write waiting behind one stuck on a peer that does not read gives up
// at its deadline, as gorilla's own write lock does.
func TestCorkConnWaitIsBoundedByTheDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // never read
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	peer := <-accepted
	defer peer.Close()
	c := NewCorkConn(raw).(*corkConn)

	stuck := make(chan error, 1)
	go func() {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := c.Write(make([]byte, 64<<20)) // fills both socket buffers and blocks
		stuck <- err
	}()
	// Wait until the stuck write holds the lock (not a fixed sleep: on a
	// loaded machine its goroutine may not have run yet).
	for deadline := time.Now().Add(10 * time.Second); len(c.lock) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first write never took the lock")
		}
		time.Sleep(time.Millisecond) // polling the lock's state
	}
	c.deadline.Store(time.Now().Add(200 * time.Millisecond).UnixNano())
	start := time.Now()
	_, err = c.Write([]byte("ping"))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the waiting write returned %v, want a deadline error", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("the waiting write took %s", waited)
	}
	if err := <-stuck; err == nil {
		t.Fatal("the stuck write succeeded")
	}
	// The stream is broken now: every later write fails.
	if _, err := c.Write([]byte("more")); err == nil {
		t.Fatal("a write after a failed one succeeded")
	}
}

// A write that fails is said to the caller that wrote alone and to the
// callers whose messages were in its batch, and onError hears of it.
func TestWSWriterSaysAFailedWrite(t *testing.T) {
	e := &echoCollector{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(e)
	defer srv.Close()
	ws, cc := dialCorked(t, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	var failed atomic.Int64
	w := NewWriter(ws, 10*time.Second, func() { failed.Add(1) })
	if err := w.Write([]byte("first"), nil); err != nil {
		t.Fatal(err)
	}
	e.wait(t, 1)
	cc.Conn.Close() // writes fail from now on
	if err := w.Write([]byte("alone"), nil); err == nil {
		t.Error("a write alone on a closed connection returned no error")
	}
	// Callers queued behind a held Writer are one batch.
	w = NewWriter(ws, 10*time.Second, func() { failed.Add(1) })
	w.Hold()
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { errs <- w.Write(fmt.Appendf(nil, "queued %d", i), nil) }()
	}
	for deadline := time.Now().Add(20 * time.Second); !queued(w, 3); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("3 callers did not queue their messages within 20 s")
		}
	}
	w.Release()
	for range 3 {
		if err := <-errs; err == nil {
			t.Error("a caller whose batch failed got no error")
		}
	}
	if failed.Load() < 2 {
		t.Errorf("onError called %d times, want one for each failed batch (2)", failed.Load())
	}
}

func queued(w *Writer, n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) == n
}

// Callers that are ready to run when a write starts join it, once the
// Writer has seen company (a batch of several messages); a Writer with
// one caller at a time writes each message at once and never yields.
func TestWSWriterGathersTheCallersReadyToRun(t *testing.T) {
	// One processor: the callers run one after the other, as on a busy
	// machine, and none overlaps another's write by itself.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	col := &echoCollector{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(col)
	defer srv.Close()
	ws, cc := dialCorked(t, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	w := NewWriter(ws, 10*time.Second, nil)

	// Lone callers: a write(2) each, and no yield to come.
	before := cc.writes.Load()
	for i := range 40 {
		if err := w.Write([]byte(fmt.Sprintf("lone %02d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := cc.writes.Load() - before; got != 40 {
		t.Errorf("40 lone frames took %d write(2)s, want 40", got)
	}
	if w.gather != 0 {
		t.Errorf("after lone frames the writer still yields (gather %d)", w.gather)
	}

	// 20 callers made ready together, by one close: without company seen
	// yet they may each write; once a batch of two has left, they gather.
	burst := func(tag string) int64 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := w.Write([]byte(fmt.Sprintf("%s %02d", tag, i)), nil); err != nil {
					t.Error(err)
				}
			}()
		}
		before := cc.writes.Load()
		close(start)
		wg.Wait()
		return cc.writes.Load() - before
	}
	w.Hold() // a batch of two: company
	for i := range 2 {
		go w.Write([]byte(fmt.Sprintf("pair %d", i)), nil)
	}
	for {
		w.mu.Lock()
		q := len(w.queue)
		w.mu.Unlock()
		if q == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.Release()
	col.wait(t, 42)
	if w.gather == 0 {
		t.Fatal("a batch of two did not set the writer yielding")
	}
	if got := burst("burst"); got > 4 {
		t.Errorf("20 callers ready together took %d write(2)s, want a few", got)
	}
	msgs := col.wait(t, 62)
	if len(msgs) != 62 {
		t.Fatalf("%d messages, want 62", len(msgs))
	}
}

// The messages of one caller are no company, however many: after the
// drain's WriteAll of a batch, a lone caller writes at once, without the
// yield meant for callers ready to join it.
func TestWSWriterTakesOneCallersBatchForNoCompany(t *testing.T) {
	col := &echoCollector{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(col)
	defer srv.Close()
	ws, _ := dialCorked(t, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	w := NewWriter(ws, 10*time.Second, nil)
	if err := w.WriteAll([]Msg{{A: []byte("queued 0")}, {A: []byte("queued 1")}, {A: []byte("queued 2")}}); err != nil {
		t.Fatal(err)
	}
	if w.gather != 0 {
		t.Errorf("after one caller's batch of 3 messages the writer yields (gather %d), want 0", w.gather)
	}
	if err := w.Write([]byte("lone"), nil); err != nil {
		t.Fatal(err)
	}
	if msgs := col.wait(t, 4); len(msgs) != 4 {
		t.Fatalf("%d messages, want 4", len(msgs))
	}
}

// Each message of a batch has the Writer's timeout from when its turn
// comes, not one deadline for the whole batch: the drain's batch of large
// queued deliveries on a slow link is written as they would be alone.
// The clock moves a timeout at each look, as if each message took that
// long.
func TestWSWriterGivesEachMessageItsTimeout(t *testing.T) {
	col := &echoCollector{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(col)
	defer srv.Close()
	ws, cc := dialCorked(t, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	const timeout = 10 * time.Second
	w := NewWriter(ws, timeout, nil)
	start := time.Now()
	var looks int
	w.now = func() time.Time { looks++; return start.Add(time.Duration(looks-1) * timeout) }
	msgs := []Msg{{A: []byte("queued 0")}, {A: []byte("queued 1")}, {A: []byte("queued 2")}}
	if err := w.WriteAll(msgs); err != nil {
		t.Fatal(err)
	}
	col.wait(t, 3)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for i := range msgs {
		if d := start.Add(time.Duration(i+1) * timeout); !cc.deadlines[d] {
			t.Errorf("message %d was not written with its own deadline (%s after the first look); deadlines set: %v", i, d.Sub(start), cc.deadlines)
		}
	}
}
