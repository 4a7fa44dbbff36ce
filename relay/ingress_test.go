package relay_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// ingressRelay is a relay served as devhook relay serves it (behind
// LimitListener, through an IngressListener) or by net/http's server
// alone, with one agent on one channel.
type ingressRelay struct {
	srv  *relay.Server
	hs   *httptest.Server
	il   *relay.IngressListener // nil when plain
	addr string
	cr   wire.Credentials
}

// testRelay configures newIngressRelay. Zero values mean defaults.
type testRelay struct {
	plain bool                 // net/http's server alone, without an IngressListener
	lc    relay.ListenerConfig // its header timeout and limit are the http.Server's too
	cfg   relay.Config         // Store and Logf are set by newIngressRelay
	// answer is the agent's answer to a delivery's body; a status of 0
	// leaves it unanswered. nil: 200, text/plain, the body echoed, and
	// X-Method.
	answer func(body []byte) (int, http.Header, []byte)
}

func newIngressRelay(tb testing.TB, o testRelay) *ingressRelay {
	tb.Helper()
	db, err := boltrelay.Open(filepath.Join(tb.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	cfg := o.cfg
	cfg.Store, cfg.Logf = db, tb.Logf
	srv, err := relay.NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ReadHeaderTimeout, hs.Config.MaxHeaderBytes = o.lc.ReadHeaderTimeout, o.lc.MaxHeaderBytes
	r := &ingressRelay{srv: srv, hs: hs, addr: hs.Listener.Addr().String()}
	hs.Listener = relay.LimitListener(hs.Listener, 1<<16)
	if !o.plain {
		r.il = relay.NewIngressListener(srv, hs.Listener, o.lc)
		hs.Listener = r.il
	}
	hs.Start()
	tb.Cleanup(func() {
		srv.Close()
		hs.Close()
		if r.il == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.il.Shutdown(ctx)
	})
	if r.cr, err = srv.OpenChannel(nil); err != nil {
		tb.Fatal(err)
	}
	conn, err := relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: hs.URL, Credentials: r.cr})
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			d, err := conn.Receive()
			if err != nil {
				return
			}
			if o.answer == nil {
				conn.Respond(d.ID, 200, http.Header{"Content-Type": {"text/plain"}, "X-Method": {d.Method}}, d.Body)
			} else if status, h, b := o.answer(d.Body); status != 0 {
				conn.Respond(d.ID, status, h, b)
			} else {
				continue // never answered
			}
			if d.Queued {
				conn.Ack(d.ID) // as an agent does, once it recorded one
			}
		}
	}()
	tb.Cleanup(func() { conn.Close(); wg.Wait() })
	return r
}

func (r *ingressRelay) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func (r *ingressRelay) post(body string, extra ...string) string {
	h := strings.Join(append([]string{"Host: relay"}, extra...), "\r\n")
	return fmt.Sprintf("POST /c/%s/hook HTTP/1.1\r\n%s\r\nContent-Length: %d\r\n\r\n%s", r.cr.Channel, h, len(body), body)
}

func readAnswer(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading an answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading an answer's body: %v", err)
	}
	return resp, string(b)
}

func TestIngress_KeepAliveAndPipelining(t *testing.T) {
	r := newIngressRelay(t, testRelay{})
	c, br := r.dial(t)
	for i := range 3 {
		// Two requests in one write, then one alone.
		if i != 1 {
			io.WriteString(c, r.post(fmt.Sprint("a", i))+map[bool]string{true: r.post(fmt.Sprint("b", i))}[i == 0])
		} else {
			io.WriteString(c, r.post(fmt.Sprint("a", i)))
		}
		resp, body := readAnswer(t, br, "POST")
		if resp.StatusCode != 200 || body != fmt.Sprint("a", i) || resp.Header.Get("Devhook-Delivery") == "" ||
			resp.ContentLength != int64(len(body)) || resp.Close || resp.Header.Get("Date") == "" {
			t.Fatalf("answer %d: %d %q %v", i, resp.StatusCode, body, resp.Header)
		}
		if i == 0 {
			if _, body := readAnswer(t, br, "POST"); body != "b0" {
				t.Fatalf("pipelined answer: %q", body)
			}
		}
	}
}

// A request that is not a delivery hands the connection, with what was
// read of it, to net/http, which serves that request and ends the
// connection: the next request comes on a new one, whose header the
// IngressListener looks at (TestHostile_KeptAliveRequestsChecked).
func TestIngress_HandsOverOtherRequests(t *testing.T) {
	r := newIngressRelay(t, testRelay{})
	c, br := r.dial(t)
	io.WriteString(c, r.post("one"))
	if _, body := readAnswer(t, br, "POST"); body != "one" {
		t.Fatalf("delivery: %q", body)
	}
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"+r.post("two"))
	if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != 200 || !strings.HasPrefix(body, "ok") || !resp.Close {
		t.Fatalf("healthz: %d %q %v, want 200 ok and Connection: close", resp.StatusCode, body, resp.Header)
	}
	if b, err := br.ReadByte(); err == nil {
		t.Fatalf("the connection went on after a request handed over (%q)", b)
	}
	c, br = r.dial(t)
	io.WriteString(c, r.post("two"))
	if _, body := readAnswer(t, br, "POST"); body != "two" {
		t.Fatalf("delivery on a new connection after the handover: %q", body)
	}
	// The API and an agent's WebSocket work through the listener: the
	// agent of newIngressRelay connected through it.
	resp, err := http.Post("http://"+r.addr+"/v1/channels", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("open a channel: %s", resp.Status)
	}
}

func TestIngress_ChunkedAndExpectContinue(t *testing.T) {
	r := newIngressRelay(t, testRelay{})
	c, br := r.dial(t)
	fmt.Fprintf(c, "POST /c/%s/ HTTP/1.1\r\nHost: relay\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", r.cr.Channel)
	if resp, body := readAnswer(t, br, "POST"); resp.StatusCode != 200 || body != "abcde" {
		t.Fatalf("chunked: %d %q", resp.StatusCode, body)
	}
	// 100 Continue comes before the body is sent, then the answer.
	fmt.Fprintf(c, "POST /c/%s/ HTTP/1.1\r\nHost: relay\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", r.cr.Channel)
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("before the body: %q %v", line, err)
	}
	if line, _ := br.ReadString('\n'); line != "\r\n" {
		t.Fatalf("after 100 Continue: %q", line)
	}
	io.WriteString(c, "hello")
	if resp, body := readAnswer(t, br, "POST"); resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("after 100 Continue: %d %q", resp.StatusCode, body)
	}
	// HEAD: an answer without a body, the connection kept.
	fmt.Fprintf(c, "HEAD /c/%s/ HTTP/1.1\r\nHost: relay\r\n\r\n", r.cr.Channel)
	if resp, body := readAnswer(t, br, "HEAD"); resp.StatusCode != 200 || body != "" || resp.Header.Get("X-Method") != "HEAD" {
		t.Fatalf("HEAD: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	io.WriteString(c, r.post("last"))
	if _, body := readAnswer(t, br, "POST"); body != "last" {
		t.Fatalf("after HEAD: %q", body)
	}
}

// Requests net/http's server refuses are refused alike, and end their
// connection.
func TestIngress_RefusesWhatNetHTTPRefuses(t *testing.T) {
	r := newIngressRelay(t, testRelay{lc: relay.ListenerConfig{MaxHeaderBytes: 4096}})
	ch := r.cr.Channel
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"no Host", "POST /c/" + ch + "/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400},
		{"bad header line", "POST /c/" + ch + "/ HTTP/1.1\r\nHost: relay\r\nNo colon here\r\n\r\n", 400},
		{"bad header name", "POST /c/" + ch + "/ HTTP/1.1\r\nHost: relay\r\nBad Name: x\r\n\r\n", 400},
		{"two lengths", "POST /c/" + ch + "/ HTTP/1.1\r\nHost: relay\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
		{"unknown transfer coding", "POST /c/" + ch + "/ HTTP/1.1\r\nHost: relay\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		{"unknown expectation", "POST /c/" + ch + "/ HTTP/1.1\r\nHost: relay\r\nExpect: teapot\r\nContent-Length: 0\r\n\r\n", 417},
		{"headers over the limit", "POST /c/" + ch + "/ HTTP/1.1\r\nHost: relay\r\nX-Big: " + strings.Repeat("x", 16<<10) + "\r\n\r\n", 431},
		{"HTTP/2 on the wire", "POST /c/" + ch + "/ HTTP/2.0\r\nHost: relay\r\n\r\n", 505},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := r.dial(t)
			io.WriteString(c, tc.req)
			resp, _ := readAnswer(t, br, "POST")
			if resp.StatusCode != tc.status {
				t.Fatalf("got %s, want %d", resp.Status, tc.status)
			}
			if _, err := br.ReadByte(); err == nil {
				t.Fatal("the connection is still open")
			}
		})
	}
}

func TestIngress_HTTP10EndsTheConnection(t *testing.T) {
	r := newIngressRelay(t, testRelay{})
	c, br := r.dial(t)
	fmt.Fprintf(c, "POST /c/%s/ HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi", r.cr.Channel)
	resp, body := readAnswer(t, br, "POST")
	if resp.StatusCode != 200 || body != "hi" || !resp.Close {
		t.Fatalf("HTTP/1.0: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after an HTTP/1.0 answer: %v", err)
	}
}

// An agent's answer with a status that is no final HTTP status reaches
// the sender as 502, not as a broken connection.
func TestIngress_AgentStatusOutOfRange(t *testing.T) {
	for _, status := range []int{42, 101, 1000} {
		r := newIngressRelay(t, testRelay{answer: func([]byte) (int, http.Header, []byte) {
			return status, http.Header{"X-Agent": {"yes"}}, []byte("odd")
		}})
		c, br := r.dial(t)
		io.WriteString(c, r.post("x"))
		resp, body := readAnswer(t, br, "POST")
		if resp.StatusCode != http.StatusBadGateway || (status == 101 && (!strings.Contains(body, "101") || resp.Header.Get("X-Agent") != "")) {
			t.Fatalf("agent status %d: sender got %d %q %v", status, resp.StatusCode, body, resp.Header)
		}
	}
}

func TestIngress_Timeouts(t *testing.T) {
	r := newIngressRelay(t, testRelay{lc: relay.ListenerConfig{ReadHeaderTimeout: 500 * time.Millisecond, IdleTimeout: 700 * time.Millisecond}})
	// Headers that never end.
	c, br := r.dial(t)
	start := time.Now()
	fmt.Fprintf(c, "POST /c/%s/ HTTP/1.1\r\nHost: relay\r\n", r.cr.Channel)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("a request whose headers never end got an answer")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("closed after %s", d)
	}
	// A kept-alive connection left idle.
	c, br = r.dial(t)
	io.WriteString(c, r.post("x"))
	readAnswer(t, br, "POST")
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("an idle connection was not closed")
	}
	// A slow request, but within each bound, is served: the idle wait
	// and the header wait are separate.
	c, br = r.dial(t)
	io.WriteString(c, r.post("y"))
	readAnswer(t, br, "POST")
	time.Sleep(400 * time.Millisecond) // idle: under IdleTimeout (700 ms); with the 300 ms below, over ReadHeaderTimeout (500 ms)
	req := r.post("z")
	io.WriteString(c, req[:10])
	time.Sleep(300 * time.Millisecond) // the header: under ReadHeaderTimeout
	io.WriteString(c, req[10:])
	if _, body := readAnswer(t, br, "POST"); body != "z" {
		t.Fatalf("slow request: %q", body)
	}
}

// Close ends idle connections at once and lets a delivery in progress
// finish; Abort ends it.
func TestIngress_CloseWaitAbort(t *testing.T) {
	held := make(chan struct{})
	r := newIngressRelay(t, testRelay{answer: func(b []byte) (int, http.Header, []byte) {
		if string(b) == "held" {
			close(held)
			return 0, nil, nil // never answered
		}
		return 200, nil, b
	}})
	idle, idleBr := r.dial(t)
	io.WriteString(idle, r.post("before"))
	readAnswer(t, idleBr, "POST")
	busy, busyBr := r.dial(t)
	io.WriteString(busy, r.post("held"))
	<-held // the delivery reached the agent

	r.il.Close()
	if _, err := idleBr.ReadByte(); err == nil {
		t.Fatal("an idle connection outlived Close")
	}
	if _, err := r.il.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := r.il.Wait(ctx); err == nil {
		t.Fatal("Wait returned while a delivery waited for its agent")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.il.Abort()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not end the delivery in progress")
	}
	if _, err := busyBr.ReadByte(); err == nil {
		t.Fatal("the aborted delivery's connection is still open")
	}
}

// A delivery answered after Close is written whole, with Connection:
// close.
func TestIngress_CloseLetsADeliveryFinish(t *testing.T) {
	received, release := make(chan struct{}), make(chan struct{})
	r := newIngressRelay(t, testRelay{answer: func(b []byte) (int, http.Header, []byte) {
		close(received)
		<-release
		return 200, nil, b
	}})
	c, br := r.dial(t)
	io.WriteString(c, r.post("late"))
	<-received
	r.il.Close()
	close(release)
	resp, body := readAnswer(t, br, "POST")
	if resp.StatusCode != 200 || body != "late" || !resp.Close {
		t.Fatalf("after Close: %d %q", resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.il.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

// Shutdown ends a delivery still waiting for its agent when ctx ends.
func TestIngress_Shutdown(t *testing.T) {
	held := make(chan struct{})
	r := newIngressRelay(t, testRelay{answer: func([]byte) (int, http.Header, []byte) {
		close(held)
		return 0, nil, nil
	}})
	c, br := r.dial(t)
	io.WriteString(c, r.post("held"))
	<-held
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.il.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a delivery held: %v", err)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the held delivery's connection outlived Shutdown")
	}
}
