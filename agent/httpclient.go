package agent

// The agent's own HTTP/1.1 client, for plain http:// receivers when
// Config.Client is nil.
//
// net/http's Transport hands each request to a per-connection writeLoop
// goroutine and gets the answer back from a readLoop goroutine: two
// goroutine wake-ups per request. Here the goroutine that forwards a
// delivery writes the request and reads the answer on the connection
// itself. The bytes on the wire are net/http's: the request's head is
// written into a buffer kept with the connection as (*http.Request).Write
// writes it (which is what the Transport sends: compression is off,
// keep-alives are on, no proxy), the usual answers' heads are read as
// http.ReadResponse reads them, and the others by http.ReadResponse
// itself (httpclient_wire.go). TestDirectSendsWhatNetHTTPSends and
// TestDirectAnswersAsNetHTTPDoes hold the whole to the Transport.
//
// What it saves, by BenchmarkForward (this process's CPU per forward of a
// 1.5 KB POST to a receiver in another process; 2 cores shared with other
// work, Go 1.26, 2026-11, 10 runs of each interleaved, medians): from 32
// goroutines, 14.8 µs and 6 allocations (0.7 KB) against net/http's
// 32.7 µs and 62 (5.2 KB); one forward at a time, 19.8 against 50.4 µs.
// Before the heads were written and read here and a quick reuse went
// unchecked, it took 18.3 µs and 23 allocations (1.6 KB) from 32
// goroutines, 24.0 µs one at a time, and 5.5 system calls per forward
// against 2.2 now (strace -c, one at a time: the MSG_PEEK before each
// reuse gone, and fewer reads that find nothing yet).
//
// Connections are kept per host:port, at most Config.Concurrency idle ones
// each, owned by the Agent; nothing runs in the background. An idle
// connection is handed out to one request at a time. Before it is reused,
// closedByPeer looks whether the receiver closed it meanwhile (one system
// call), unless it has been idle under uncheckedIdle (a second, on Linux)
// after a reuse that found it open. A request written on a connection
// the receiver had dropped meanwhile is sent again on a new connection
// when the receiver cannot have read it (resendable), never otherwise.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/devhook/devhook"
	"golang.org/x/net/http/httpguts"
)

// Like http.DefaultTransport's.
const (
	dialTimeout     = 30 * time.Second
	dialKeepAlive   = 30 * time.Second
	idleConnTimeout = 90 * time.Second
	// maxHeaderResponse is the Transport's default MaxResponseHeaderBytes.
	// As there, it bounds the heads of an answer together, 1xx included:
	// it is what limits how many 1xx a receiver may send.
	maxHeaderResponse = 10 << 20
)

// connPool holds the idle keep-alive connections to receivers, by host
// (the URL's host[:port]). Its zero value is ready to use.
type connPool struct {
	mu   sync.Mutex
	idle map[string][]*hconn // most recently used last
	// Hosts seen to drop kept-alive connections soon after an answer:
	// every reuse of a connection to them is checked (see get).
	checked map[string]bool
	now     func() time.Time // the clock of idle times; nil: time.Now
}

func (p *connPool) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// hconn is one connection to a receiver, used by one request at a time.
type hconn struct {
	conn    net.Conn
	cr      countingReader // what br reads from
	br      *bufio.Reader
	uses    int       // requests it was handed out for, this one included
	reused  bool      // it served a request before this one
	checked bool      // closedByPeer looked at it before this request
	idleAt  time.Time // when it went back to the pool
	peek    peeker    // see closedByPeer
	// Bytes written on it, and before the request under way: the
	// receiver's acknowledgements are compared with them (requestUnacked).
	sent, sentBefore int64

	// Made once for all the requests on the connection.
	wbuf      []byte      // the request's head, and its body when they fit
	keys      []string    // the request header's names, to sort
	iov       [2][]byte   // the head and a large body, for bufs
	bufs      net.Buffers // written in one writev
	interrupt func()      // ends the read or write under way

	// The context whose end ends the connection's I/O (see watch).
	done      <-chan struct{}
	stopWatch func() bool
}

// countingReader reads from the connection, counting the bytes of the
// answer under way and refusing headers over maxHeaderResponse.
type countingReader struct {
	conn  net.Conn
	n     int64 // bytes read since reset
	limit int64 // read no more than this many since reset
}

var errHeaderTooLarge = fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", maxHeaderResponse)

func (r *countingReader) Read(p []byte) (int, error) {
	if r.n >= r.limit {
		return 0, errHeaderTooLarge
	}
	if rest := r.limit - r.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := r.conn.Read(p)
	r.n += int64(n)
	return n, err
}

func (c *hconn) close() {
	if c.stopWatch != nil {
		c.stopWatch()
	}
	c.conn.Close()
}

// watch makes the end of ctx end the I/O under way on c. The watch stays
// on while c is idle, for the next request with the same context (every
// forward of a connection to the relay has the same): context.AfterFunc
// then costs nothing per forward. It returns false when c was watched for
// another context whose end is being acted on: c is then unusable.
func (c *hconn) watch(ctx context.Context) bool {
	done := ctx.Done()
	if done == c.done {
		return true
	}
	if c.stopWatch != nil && !c.stopWatch() {
		return false
	}
	c.done, c.stopWatch = nil, nil
	if done != nil {
		c.done, c.stopWatch = done, context.AfterFunc(ctx, c.interrupt)
	}
	return true
}

// get returns an idle connection to host that the receiver has not
// closed, or nil. The connection's deadline is set to deadline.
//
// A connection's first reuse is checked by closedByPeer, so that a
// receiver that closes each connection after its answer without saying so
// is found (then its host is checked for good); so is every reuse after
// uncheckedIdle (httpclient_acked_*.go), and every reuse to a host once a
// forward found a connection to it dropped unchecked.
func (p *connPool) get(host string, now, deadline time.Time) *hconn {
	for {
		p.mu.Lock()
		l := p.idle[host]
		if len(l) == 0 {
			p.mu.Unlock()
			return nil
		}
		c := l[len(l)-1]
		l[len(l)-1] = nil
		p.idle[host] = l[:len(l)-1]
		idle := now.Sub(c.idleAt)
		c.checked = c.uses == 1 || idle >= uncheckedIdle || p.checked[host]
		p.mu.Unlock()
		// The deadline goes first: the check reads, and a deadline
		// left over from the last request may have passed.
		if idle < idleConnTimeout && c.conn.SetDeadline(deadline) == nil {
			if !c.checked || !c.closedByPeer() {
				c.reused = true
				c.uses++
				return c
			}
			if idle < uncheckedIdle {
				// Dropped soon after its answer.
				p.distrust(host)
			}
		}
		c.close()
	}
}

// distrust has every reuse of a connection to host checked from now on.
func (p *connPool) distrust(host string) {
	p.mu.Lock()
	if p.checked == nil {
		p.checked = make(map[string]bool)
	}
	p.checked[host] = true
	p.mu.Unlock()
}

// put keeps c for the next request to host, unless max connections to it
// are idle already.
func (p *connPool) put(host string, c *hconn, max int, now time.Time) {
	c.idleAt = now
	p.mu.Lock()
	if p.idle == nil {
		p.idle = make(map[string][]*hconn)
	}
	l := p.idle[host]
	var stale *hconn
	if len(l) > 0 && now.Sub(l[0].idleAt) >= idleConnTimeout {
		// The least recently used one has been idle too long: drop it
		// rather than keep its descriptor until the pool runs dry.
		stale = l[0]
		copy(l, l[1:])
		l[len(l)-1] = nil
		l = l[:len(l)-1]
	}
	if len(l) >= max {
		p.idle[host] = l
		p.mu.Unlock()
		c.close()
		if stale != nil {
			stale.close()
		}
		return
	}
	p.idle[host] = append(l, c)
	p.mu.Unlock()
	if stale != nil {
		stale.close()
	}
}

// closeIdle closes every idle connection.
func (p *connPool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.close()
		}
	}
}

// CloseIdleConnections closes the connections to receivers that are kept
// for the next forward: for when the agent is done.
func (a *Agent) CloseIdleConnections() {
	a.conns.closeIdle()
	a.client.CloseIdleConnections()
}

// dial opens a connection to u's host, port 80 by default.
func dial(ctx context.Context, u *url.URL, deadline time.Time) (*hconn, error) {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: dialKeepAlive, Deadline: deadline}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return nil, err
	}
	c := &hconn{conn: conn, cr: countingReader{conn: conn}, uses: 1, wbuf: make([]byte, 0, wbufSize)}
	c.br = bufio.NewReaderSize(&c.cr, 4<<10)
	c.peek.init(conn)
	c.interrupt = func() { conn.SetDeadline(aLongTimeAgo) }
	return c, nil
}

// closedByPeer reports whether the receiver closed c while it was idle
// (Node closes idle connections after 5 s, for example), or sent
// something unasked, such as a 408, that makes it unusable. It does not
// block.
func (c *hconn) closedByPeer() bool {
	if c.br.Buffered() > 0 {
		return true
	}
	return c.peek.closed()
}

// exchange is one request on one connection.
type exchange struct {
	c        *hconn
	written  bool // the whole request went out
	answered bool // some byte of an answer came back
	// turn: the worker whose turn to read is handed on once the request
	// is written (or before, when its write may wait); nil: none.
	turn *worker
}

// smallWrite bounds the request a socket takes at once: its write does
// not wait for the receiver to read.
const smallWrite = 16 << 10

// directAnswer is the head of a final answer, read by hand (readAnswerHead) or
// by http.ReadResponse (resp).
type directAnswer struct {
	answerHead
	resp *http.Response
}

// roundTrip writes the request on e.c and reads the answer's head,
// skipping 1xx informational answers. The body is left to read.
func (e *exchange) roundTrip(method string, u *url.URL, header http.Header, withBody bool, body []byte) (directAnswer, error) {
	c := e.c
	c.cr.n, c.cr.limit = 0, maxHeaderResponse
	if e.turn != nil && len(body) > smallWrite {
		e.turn.handOnce()
	}
	werr := c.write(method, u, header, withBody, body)
	if e.turn != nil {
		e.turn.handOnce()
	}
	e.written = werr == nil
	// Even when the write failed, the receiver may have answered
	// before it stopped reading (a 413, say): read what it said.
	if _, err := c.br.Peek(1); err != nil {
		if werr != nil {
			return directAnswer{}, werr
		}
		return directAnswer{}, err
	}
	e.answered = true
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if h, n, ok := readAnswerHead(buf, method); ok {
			c.br.Discard(n)
			if h.status < 200 {
				continue // 1xx
			}
			c.cr.limit = math.MaxInt64 // the body's size is limited by the reader
			if werr != nil {
				h.close = true
			}
			return directAnswer{answerHead: h}, nil
		}
		resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
		if err != nil {
			return directAnswer{}, fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", err)
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			c.cr.limit = math.MaxInt64
			if resp.StatusCode == http.StatusSwitchingProtocols && switchesProtocol(resp.Header) {
				// As the Transport does: what follows on the
				// connection is the body. The connection is not
				// kept (a 101 never is).
				resp.Body = io.NopCloser(c.br)
			}
			if werr != nil {
				resp.Close = true
			}
			return directAnswer{answerHead: answerHead{status: resp.StatusCode, header: resp.Header, close: resp.Close}, resp: resp}, nil
		}
	}
}

// wbufSize is the room for a request kept with each connection: a head
// and a body that fit go out in one write(2) from it, a larger body in
// one writev(2) after the head.
const wbufSize = 4 << 10

// write writes the request on c.
func (c *hconn) write(method string, u *url.URL, header http.Header, withBody bool, body []byte) error {
	head, keys := appendRequestHead(c.wbuf[:0], c.keys, method, u, header, withBody, len(body))
	c.keys = keys
	c.sentBefore = c.sent
	var err error
	if len(body) <= cap(head)-len(head) || len(head)+len(body) <= wbufSize {
		head = append(head, body...)
		var n int
		n, err = c.conn.Write(head)
		c.sent += int64(n)
	} else {
		c.iov = [2][]byte{head, body}
		c.bufs = c.iov[:]
		var n int64
		n, err = c.bufs.WriteTo(c.conn)
		c.sent += n
		c.iov, c.bufs = [2][]byte{}, nil
	}
	if cap(head) <= wbufSize {
		clear(head) // an idle connection keeps no request
		c.wbuf = head[:0]
	} else {
		c.wbuf = make([]byte, 0, wbufSize) // not a large head's room for good
	}
	return err
}

// switchesProtocol is the Transport's test of a 101 that switches to
// another protocol: an Upgrade header, and Upgrade among the tokens of
// Connection.
func switchesProtocol(h http.Header) bool {
	if h.Get("Upgrade") == "" {
		return false
	}
	for _, v := range h["Connection"] {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(t, " \t"), "upgrade") {
				return true
			}
		}
	}
	return false
}

// resendable reports whether a request that failed with err on e may be
// sent again on a new connection. It is a webhook delivery, most often a
// POST that is not idempotent: it may be sent again only when the
// receiver cannot have acted on it, so that a receiver never gets one
// delivery twice from one attempt (net/http, for the same reason, sends a
// POST again only when it wrote none of it). That holds when the
// connection had served an earlier request (a new one that fails is the
// receiver's failure, reported), no byte of an answer came back, and
//   - the connection ended (EOF, reset, broken pipe) before the request
//     was written whole: the receiver cannot act on a request it did not
//     get whole (its head is read before its handler runs, and the body
//     declared by Content-Length is short);
//   - or the receiver ended it with a FIN that acknowledges no byte of
//     the request (requestUnacked): it closed the connection as idle
//     before the request reached it, the race every keep-alive client
//     has with a receiver's idle timeout (Node's keepAliveTimeout, Python's
//     handler timeout), which closedByPeer's look before a reuse narrows
//     and the unchecked quick reuse widens.
//
// A request the receiver's TCP acknowledged is never sent again: a
// receiver that read it and dropped the connection without an answer (a
// Go handler that panics) may have acted on it, and a developer watching
// the receiver must see the one request devhook recorded, not two. The
// attempt then reports the failure, and a queued delivery is retried as
// any delivery the receiver did not answer. A reset after the request was
// written is not sent again either: a reset carries no acknowledgement
// that counts, so it cannot show the receiver did not read the request.
func (e *exchange) resendable(err error) bool {
	if !e.c.reused || e.answered {
		return false
	}
	if !e.written {
		return connEnded(err)
	}
	return err == io.EOF && e.c.requestUnacked()
}

// droppedUnchecked reports whether e's request, written whole on a
// connection reused without closedByPeer's check, failed with err as on a
// connection the receiver had dropped (or dropped on reading the
// request: devhook cannot tell which).
func (e *exchange) droppedUnchecked(err error) bool {
	return e.c.reused && !e.c.checked && e.written && !e.answered && connEnded(err)
}

// connEnded reports whether err is the end of a connection: EOF, a reset,
// a broken pipe.
func connEnded(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// sendDirect forwards with the agent's own client and fills at; or it
// returns false, having done nothing, for a request that must go through
// net/http to be sent the same way: credentials in the URL (http.Client
// turns them into Authorization), a host name to convert to ASCII,
// Expect: 100-continue (the Transport waits for the receiver's go-ahead
// before the body), and what http.NewRequest refuses, for its words.
func (a *Agent) sendDirect(ctx context.Context, at *devhook.Attempt, method string, header http.Header, body []byte) bool {
	if len(header["Expect"]) > 0 || !validMethod(method) {
		return false
	}
	u, err := url.Parse(at.Target)
	if err != nil || u.User != nil || !isASCII(u.Host) {
		return false
	}
	deadline := time.Now().Add(a.cfg.ForwardTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	u.Host = strings.TrimSuffix(u.Host, ":") // as http.NewRequest does
	res, err := a.roundTrip(ctx, method, u, outHeader(header), hasBody(method, body), body, deadline)
	if err != nil {
		at.Error = describe(err, at.Target)
		return true
	}
	a.setAnswer(at, &http.Response{StatusCode: res.status, Header: res.header}, res.body, res.bodyErr)
	return true
}

// directResult is what a direct forward got.
type directResult struct {
	status  int
	header  http.Header
	body    []byte
	bodyErr error // reading the body failed after the head was in
}

// roundTrip sends the request, with body if withBody, on a kept-alive or
// new connection to u.Host, by deadline or until ctx ends, and reads the
// answer's body up to MaxResponse+1 bytes.
func (a *Agent) roundTrip(ctx context.Context, method string, u *url.URL, header http.Header, withBody bool, body []byte, deadline time.Time) (directResult, error) {
	host := u.Host
	for retried := false; ; {
		if err := ctx.Err(); err != nil {
			return directResult{}, err
		}
		var c *hconn
		if !retried { // a retry takes a new connection
			c = a.conns.get(host, a.conns.clock(), deadline)
		}
		if c == nil {
			handTurnOn(ctx) // a dial may take its time
			var err error
			if c, err = dial(ctx, u, deadline); err != nil {
				if cerr := ctx.Err(); cerr != nil {
					return directResult{}, cerr
				}
				return directResult{}, err
			}
		}
		// Ending ctx ends any read or write under way.
		if !c.watch(ctx) {
			c.close()
			continue
		}
		if err := ctx.Err(); err != nil {
			// Ended before the watch: its interrupt may have come
			// before get set the deadline.
			c.close()
			return directResult{}, err
		}
		e := exchange{c: c, turn: turnOf(ctx)}
		ans, err := e.roundTrip(method, u, header, withBody, body)
		if err != nil {
			retry := !retried && e.resendable(err) // before the close: it may look at the socket
			c.close()
			if cerr := ctx.Err(); cerr != nil {
				return directResult{}, cerr
			}
			if e.droppedUnchecked(err) {
				a.conns.distrust(host)
			}
			if retry && time.Now().Before(deadline) {
				retried = true
				continue
			}
			return directResult{}, err
		}
		res := directResult{status: ans.status, header: ans.header}
		if ans.resp != nil {
			res.body, res.bodyErr = readAnswer(ans.resp, a.cfg.MaxResponse)
		} else {
			res.body, res.bodyErr = readBody(c.br, ans.length, a.cfg.MaxResponse)
		}
		if res.bodyErr != nil {
			if cerr := ctx.Err(); cerr != nil {
				res.bodyErr = cerr
			} else if errors.Is(res.bodyErr, os.ErrDeadlineExceeded) {
				res.bodyErr = context.DeadlineExceeded // as net/http says it
			}
		}
		if ctx.Err() == nil && res.bodyErr == nil && int64(len(res.body)) <= a.cfg.MaxResponse && !ans.close &&
			ans.status != http.StatusSwitchingProtocols && c.br.Buffered() == 0 {
			a.conns.put(host, c, a.cfg.Concurrency, a.conns.clock())
		} else {
			c.close()
		}
		return res, nil
	}
}

// validMethod is http.NewRequest's check: a token, as a header's name is.
func validMethod(m string) bool { return httpguts.ValidHeaderFieldName(m) }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// aLongTimeAgo is a deadline that has passed: it ends blocked I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// readAnswer reads resp's body up to max+1 bytes, as
// io.ReadAll(io.LimitReader(resp.Body, max+1)) does, in one allocation
// when the answer says its length.
func readAnswer(resp *http.Response, max int64) ([]byte, error) {
	limit := max + 1
	size := int64(512)
	if resp.Body == http.NoBody {
		size = 0
	} else if resp.ContentLength >= 0 {
		size = min(resp.ContentLength+1, limit) // +1: room for the read that finds the end
	}
	b := make([]byte, 0, size)
	for int64(len(b)) < limit {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := resp.Body.Read(b[len(b):min(int64(cap(b)), limit)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// readBody reads the body of n bytes that follows a head read by
// readAnswerHead, up to max+1 bytes, as readAnswer reads one.
func readBody(br *bufio.Reader, n, max int64) ([]byte, error) {
	b := make([]byte, min(n, max+1))
	for got := 0; got < len(b); {
		m, err := br.Read(b[got:])
		got += m
		if err == io.EOF {
			return b[:got], io.ErrUnexpectedEOF
		}
		if err != nil {
			return b[:got], err
		}
	}
	return b, nil
}
