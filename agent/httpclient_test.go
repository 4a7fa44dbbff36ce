package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
		{"odd header names", "POST", "/n", http.Header{"x-lower": {"1"}, "X-MiXeD-case": {"2"}, "Weird_Name": {"3"}, "A!#$%&'*+-.^_`|~z": {"4"}}, []byte("x")},
		{"values padded", "POST", "/v", http.Header{"X-Pad": {"  v \t"}, "X-Inner": {"a  b"}, "X-High": {"caf\xc3\xa9"}}, []byte("x")},
		{"no User-Agent", "POST", "/ua", http.Header{"Content-Type": {"text/plain"}}, []byte("x")},
		{"empty User-Agent", "POST", "/ua", http.Header{"User-Agent": {""}}, []byte("x")},
		{"many headers", "POST", "/many", func() http.Header {
			h := http.Header{}
			for i := range 60 {
				h[fmt.Sprintf("X-H%02d", 60-i)] = []string{strconv.Itoa(i), "again"}
			}
			return h
		}(), []byte("x")},
		{"a header over the buffer", "POST", "/big-header", http.Header{"X-Big": {strings.Repeat("h", 6000)}}, []byte("x")},
		{"a body over the buffer", "POST", "/big-body", http.Header{}, bytes.Repeat([]byte("B"), 100<<10)},
		{"as it arrived chunked", "POST", "/chunked", http.Header{"Transfer-Encoding": {"chunked"}, "Content-Type": {"application/json"}}, []byte(`{"a":1}`)},
		{"PATCH with an empty body", "PATCH", "/e", nil, nil},
		{"OPTIONS", "OPTIONS", "/o", nil, nil},
		{"an empty query", "POST", "/p?", nil, []byte("x")},
		{"root", "POST", "", nil, []byte("x")},
		// An edited replay keeps the delivery's Content-Length: the one
		// sent is the body's.
		{"Content-Length of another body (an edited replay)", "POST", "/cl", http.Header{"Content-Length": {"5"}, "Content-Type": {"application/json"}}, []byte(`{"edited":true}`)},
		{"Content-Length of a body emptied", "POST", "/cl0", http.Header{"Content-Length": {"12"}}, []byte{}},
		{"Content-Length twice", "PUT", "/cl2", http.Header{"Content-Length": {"1", "2"}}, []byte("abc")},
		{"a Host header", "POST", "/host", http.Header{"Host": {"elsewhere.example"}}, []byte("x")},
		{"empty values only", "POST", "/empty", http.Header{"X-A": {""}, "X-B": {"", ""}, "x-c": {}}, []byte("x")},
		{"a body of 2 MiB", "POST", "/large", http.Header{"Content-Type": {"application/octet-stream"}}, bytes.Repeat([]byte{0, 1, 2, 0xff}, 512<<10)},
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
		{name: "Node's answer", serve: write("HTTP/1.1 200 OK\r\nX-Powered-By: Express\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 11\r\n" +
			"ETag: W/\"b-Ai2R8hgEarLmHKwesT1qcY913ys\"\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n{\"ok\":true}"), status: 200, conns: 1},
		{name: "names in lower case", serve: write("HTTP/1.1 202 Accepted\r\ncontent-type: text/plain\r\nx-request-id: 7\r\nset-cookie: a\r\nSet-Cookie: b\r\ncontent-length: 2\r\n\r\nok"), status: 202, conns: 1},
		{name: "values padded", serve: write("HTTP/1.1 200 OK\r\nX-A:   a  \t\r\nX-B:\tb\r\nX-High: caf\xc3\xa9\xff\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: 1},
		{name: "no reason phrase", serve: write("HTTP/1.1 500\r\nContent-Length: 2\r\n\r\nno"), status: 500, conns: 1},
		{name: "Pragma: no-cache", serve: write("HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: 1},
		{name: "Content-Length with leading zeros", serve: write("HTTP/1.1 200 OK\r\nContent-Length: 002\r\n\r\nok"), status: 200, conns: 1},
		{name: "Content-Length twice, alike", serve: write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: 1},
		{name: "Content-Length twice, different", serve: last("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"), conns: n},
		{name: "Content-Length not a number", serve: last("HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok"), conns: n},
		{name: "204 with a Content-Length", serve: write("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"), status: 204, conns: 1},
		{name: "lines ending in LF alone", serve: write("HTTP/1.1 200 OK\nContent-Length: 2\n\nok"), status: 200, conns: 1},
		{name: "a folded line", serve: write("HTTP/1.1 200 OK\r\nX-Folded: a\r\n  b\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: 1},
		{name: "a name with a space", serve: write("HTTP/1.1 200 OK\r\nX Space: a\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: 1},
		{name: "a control byte in a value", serve: last("HTTP/1.1 200 OK\r\nX-A: a\x01b\r\nContent-Length: 2\r\n\r\nok"), conns: n},
		{name: "103, then chunked", serve: write("HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"), status: 200, conns: 1},
		{name: "body cut short", serve: last("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"), status: 200, conns: n},
		{name: "bytes after the answer", serve: write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), status: 200, conns: n},
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

// trim shortens b for a message.
func trim(b []byte) string {
	if len(b) > 200 {
		return fmt.Sprintf("%s… (%d bytes)", b[:200], len(b))
	}
	return string(b)
}
