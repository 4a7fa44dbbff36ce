package agent

// The agent's own HTTP/1.1 client, for plain http:// receivers when
// Config.Client is nil.
//
// net/http's Transport hands each request to a per-connection writeLoop
// goroutine and gets the answer back from a readLoop goroutine: two
// goroutine wake-ups per request. Here the goroutine that forwards a
// delivery writes the request and reads the answer on the connection
// itself. The bytes on the wire are net/http's own: the request is
// serialized by (*http.Request).Write as the Transport does (which adds
// nothing else: compression is off, keep-alives are on, no proxy), and the
// answer is parsed by http.ReadResponse. TestDirectAnswersAsNetHTTPDoes
// holds the two to the same attempts.
//
// What it saves, by BenchmarkForward (this process's CPU per forward of a
// 1.5 KB POST to a receiver in another process; 2 cores, Go 1.26,
// 2026-11, runs of the two interleaved): from 32 goroutines, 13.8 µs
// and 23 allocations (1.6 KB) against net/http's 21.8 µs and 63 (5.3 KB),
// about 8 µs per delivery (4 to 11 µs over the runs), some 10% of a
// delivery's 80 µs of tunnel CPU at concurrency 32 (go run ./bench); one
// forward at a time, 16 to 24 µs.
//
// Connections are kept per host:port, at most Config.Concurrency idle ones
// each, owned by the Agent; nothing runs in the background. An idle
// connection is handed out to one request at a time.

import (
	"bufio"
	"bytes"
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
}

// hconn is one connection to a receiver, used by one request at a time.
type hconn struct {
	conn   net.Conn
	cr     countingReader // what br reads from
	cw     errWriter      // what bw writes to
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool      // it served a request before this one
	idleAt time.Time // when it went back to the pool
	peek   peeker    // see closedByPeer

	// Made once for all the requests on the connection.
	body      bytes.Reader  // the request's body
	bodyRC    io.ReadCloser // body, as Request.Body
	interrupt func()        // ends the read or write under way
}

// countingReader reads from the connection, counting the bytes of the
// answer under way and refusing headers over maxHeaderResponse.
type countingReader struct {
	conn  net.Conn
	n     int64 // bytes read since reset
	limit int64 // read no more than this many since reset
}

// errWriter writes to the connection and keeps the last write error:
// Request.Write reports a failed write of the body as its own
// requestBodyReadError, which hides the cause (a reset, say).
type errWriter struct {
	conn net.Conn
	err  error
}

func (w *errWriter) Write(p []byte) (int, error) {
	n, err := w.conn.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
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

func (c *hconn) close() { c.conn.Close() }

// get returns an idle connection to host that the receiver has not
// closed, or nil. The connection's deadline is set to deadline.
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
		p.mu.Unlock()
		// The deadline goes first: the check reads, and a deadline
		// left over from the last request may have passed.
		if now.Sub(c.idleAt) < idleConnTimeout && c.conn.SetDeadline(deadline) == nil && !c.closedByPeer() {
			c.reused = true
			return c
		}
		c.close()
	}
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
	c := &hconn{conn: conn, cr: countingReader{conn: conn}, cw: errWriter{conn: conn}}
	c.br = bufio.NewReaderSize(&c.cr, 4<<10)
	c.bw = bufio.NewWriterSize(&c.cw, 4<<10)
	c.peek.init(conn)
	c.bodyRC = io.NopCloser(&c.body)
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
}

// roundTrip writes r on e.c and reads the answer's head, skipping 1xx
// informational answers. The body is left to read from resp.Body.
func (e *exchange) roundTrip(r *http.Request) (*http.Response, error) {
	c := e.c
	c.cr.n, c.cr.limit = 0, maxHeaderResponse
	c.cw.err = nil
	werr := r.Write(c.bw)
	if werr == nil {
		werr = c.bw.Flush()
	}
	e.written = werr == nil
	if werr != nil && c.cw.err != nil {
		werr = c.cw.err // the connection's own error, not Request.Write's wrapping of it
	}
	// Even when the write failed, the receiver may have answered
	// before it stopped reading (a 413, say): read what it said.
	if _, err := c.br.Peek(1); err != nil {
		if werr != nil {
			return nil, werr
		}
		return nil, err
	}
	e.answered = true
	for {
		resp, err := http.ReadResponse(c.br, r)
		if err != nil {
			return nil, fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", err)
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			c.cr.limit = math.MaxInt64 // the body's size is limited by the reader
			if resp.StatusCode == http.StatusSwitchingProtocols && switchesProtocol(resp.Header) {
				// As the Transport does: what follows on the
				// connection is the body. The connection is not
				// kept (a 101 never is).
				resp.Body = io.NopCloser(c.br)
			}
			if werr != nil {
				resp.Close = true
			}
			return resp, nil
		}
	}
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

// retryable reports whether a request that failed with err on e may be
// sent again on a new connection: the connection had served an earlier
// request, and it ended (EOF, reset, broken pipe) while the request was
// being written, before any answer. The receiver cannot have acted on a
// request it did not get whole, so sending it again cannot make it act
// twice. That is the receiver closing a kept-alive connection as idle
// while the request was on its way; most such connections are caught
// before use by closedByPeer.
//
// A request written whole is not sent again, as net/http does not send a
// POST again: a receiver that read it and dropped the connection without
// an answer (a Go handler that panics) may have acted on it, and a
// developer watching the receiver must see the one request devhook
// recorded, not two. The attempt reports the failure; a queued delivery is
// retried as any delivery the receiver did not answer.
func (e *exchange) retryable(err error) bool {
	return e.c.reused && !e.written && !e.answered &&
		(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED))
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
	// As http.NewRequest makes it; the body is set per connection.
	r := &http.Request{Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: outHeader(header), Host: u.Host, ContentLength: int64(len(body))}
	res, err := a.roundTrip(ctx, r, hasBody(method, body), body, deadline)
	if err != nil {
		at.Error = describe(err, at.Target)
		return true
	}
	a.setAnswer(at, res.resp, res.body, res.bodyErr)
	return true
}

// directResult is what a direct forward got.
type directResult struct {
	resp    *http.Response
	body    []byte
	bodyErr error // reading the body failed after the head was in
}

// roundTrip sends r with body, if withBody, on a kept-alive or new
// connection to r.URL.Host, by deadline or until ctx ends, and reads the
// answer's body up to MaxResponse+1 bytes.
func (a *Agent) roundTrip(ctx context.Context, r *http.Request, withBody bool, body []byte, deadline time.Time) (directResult, error) {
	host := r.URL.Host
	for try := 0; ; try++ {
		if err := ctx.Err(); err != nil {
			return directResult{}, err
		}
		c := a.conns.get(host, time.Now(), deadline)
		if c == nil {
			var err error
			if c, err = dial(ctx, r.URL, deadline); err != nil {
				if cerr := ctx.Err(); cerr != nil {
					return directResult{}, cerr
				}
				return directResult{}, err
			}
		}
		// As http.NewRequest sets it: an empty body is NoBody, which
		// sends Content-Length: 0; with a *bytes.Reader, Request.Write
		// sends the head and body in one write.
		switch {
		case !withBody:
			r.Body = nil
		case len(body) == 0:
			r.Body = http.NoBody
		default:
			c.body.Reset(body)
			r.Body = c.bodyRC
		}
		// Ending ctx ends any read or write under way.
		stop := func() bool { return true }
		if ctx.Done() != nil {
			stop = context.AfterFunc(ctx, c.interrupt)
		}
		e := exchange{c: c}
		resp, err := e.roundTrip(r)
		c.body.Reset(nil) // written: an idle connection keeps no body
		if err != nil {
			stop()
			c.close()
			if cerr := ctx.Err(); cerr != nil {
				return directResult{}, cerr
			}
			if try == 0 && e.retryable(err) && time.Now().Before(deadline) {
				continue
			}
			return directResult{}, err
		}
		res := directResult{resp: resp}
		res.body, res.bodyErr = readAnswer(resp, a.cfg.MaxResponse)
		stopped := stop()
		if res.bodyErr != nil {
			if cerr := ctx.Err(); cerr != nil {
				res.bodyErr = cerr
			} else if errors.Is(res.bodyErr, os.ErrDeadlineExceeded) {
				res.bodyErr = context.DeadlineExceeded // as net/http says it
			}
		}
		if stopped && res.bodyErr == nil && int64(len(res.body)) <= a.cfg.MaxResponse && !resp.Close &&
			resp.StatusCode != http.StatusSwitchingProtocols && c.br.Buffered() == 0 {
			a.conns.put(host, c, a.cfg.Concurrency, time.Now())
		} else {
			c.close()
		}
		return res, nil
	}
}

// validMethod is http.NewRequest's check: a token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

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
