package relay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// IngressListener serves deliveries itself and passes every other
// connection on, through Accept, to the http.Server that serves it.
//
// A delivery through net/http's server costs the relay about 10 µs of CPU
// more than the parsing it needs: each request gets a context, a response
// with its own buffers, a goroutine reading in the background to notice a
// sender that hangs up, and five or six changes of the connection's read
// deadline. An IngressListener reads requests with net/http's own parser
// (http.ReadRequest: the same checks of framing, Content-Length,
// Transfer-Encoding and header syntax), answers them with a writer that
// knows the whole answer before it writes it (one write(2), always a
// Content-Length), and changes the read deadline two or three times.
//
// A connection stays with the IngressListener while its requests are
// deliveries (a path under /c/). The first request that is anything else
// (the API, an agent's WebSocket, metrics) hands the connection over, with
// the bytes already read, to the http.Server for the rest of its life. TLS
// connections are handed over at once: ALPN (h2, acme-tls/1) and r.TLS are
// net/http's business.
//
// Requests net/http's server refuses are refused alike, a body left
// unread is read away up to 256 KiB, and the connection ends when it must
// as it would there (TestIngress_AnswersAsNetHTTPDoes compares the two).
// Differences, on delivery paths only: a sender that hangs up while its
// delivery waits for the agent is not noticed until the answer is written
// (the delivery is forwarded and recorded all the same); an HTTP/1.0
// request always ends its connection; an empty Host field in a header
// larger than the read buffer (4 KiB) is taken for a missing one.
type IngressListener struct {
	inner net.Listener
	srv   *Server
	cfg   ListenerConfig

	handoff   chan net.Conn
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	ctx       context.Context // requests' context; cancelled by Abort
	cancel    context.CancelFunc

	wg    sync.WaitGroup // the accept loop and every connection's goroutine
	mu    sync.Mutex
	conns map[*ingressConn]struct{}
	err   error // the inner listener's, when it failed
}

// ListenerConfig configures an IngressListener. Zero values mean
// net/http's defaults or none, as for the http.Server it stands in front
// of: give it the same values.
type ListenerConfig struct {
	// ReadHeaderTimeout bounds the reading of a request's headers, from
	// its first byte (0: none).
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection (0: none).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (0: 1 MiB, net/http's
	// default); beyond it, 431.
	MaxHeaderBytes int
	// Logf hears about a request that panicked (nil: the Server's Logf).
	Logf func(format string, args ...any)
}

// NewIngressListener serves srv's deliveries from ln's connections; ln is
// closed by Close. Serve an http.Server with srv as its handler on it.
func NewIngressListener(srv *Server, ln net.Listener, cfg ListenerConfig) *IngressListener {
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = http.DefaultMaxHeaderBytes
	}
	if cfg.Logf == nil {
		cfg.Logf = srv.cfg.Logf
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &IngressListener{
		inner: ln, srv: srv, cfg: cfg, ctx: ctx, cancel: cancel,
		handoff: make(chan net.Conn), done: make(chan struct{}),
		conns: map[*ingressConn]struct{}{},
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Accept returns the next connection for the http.Server: one whose
// request is not a delivery.
func (l *IngressListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.handoff:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		if err == nil {
			err = net.ErrClosed
		}
		return nil, err
	}
}

// Addr is the inner listener's address.
func (l *IngressListener) Addr() net.Addr { return l.inner.Addr() }

// Close stops accepting and closes the connections that wait for a
// request. A delivery in progress is answered, then its connection is
// closed. Wait waits for those.
func (l *IngressListener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.inner.Close()
		l.mu.Lock()
		for c := range l.conns {
			c.closeIfIdle()
		}
		l.mu.Unlock()
	})
	return err
}

// Wait waits, after Close, until every delivery in progress is answered,
// or ctx ends.
func (l *IngressListener) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { // ends when the goroutines it waits for end
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Abort ends, after Close, the deliveries still in progress: their
// connections are closed and their requests' context cancelled (a
// delivery waiting for its agent stops waiting). It returns when their
// goroutines have.
func (l *IngressListener) Abort() {
	l.cancel()
	l.mu.Lock()
	for c := range l.conns {
		c.c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// Shutdown closes l, waits for the deliveries in progress until ctx ends,
// then aborts those left. The http.Server serving l has its own Shutdown.
func (l *IngressListener) Shutdown(ctx context.Context) error {
	l.Close()
	err := l.Wait(ctx)
	if err != nil {
		l.Abort()
	}
	return err
}

func (l *IngressListener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() { // out of descriptors: as net/http does
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
				case <-l.done:
					return
				}
				continue
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.Close()
			return
		}
		delay = 0
		ic := &ingressConn{l: l, c: c}
		l.mu.Lock()
		select {
		case <-l.done:
			l.mu.Unlock()
			c.Close()
			return
		default:
		}
		l.conns[ic] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go ic.serve()
	}
}

func (l *IngressListener) forget(ic *ingressConn) {
	l.mu.Lock()
	delete(l.conns, ic)
	l.mu.Unlock()
}

// closing reports whether Close was called.
func (l *IngressListener) closing() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// A connection's states, for Close.
const (
	connIdle int32 = iota
	connActive
	connClosed
)

type ingressConn struct {
	l      *IngressListener
	c      net.Conn
	state  atomic.Int32
	remote string

	lim  limitedReader
	br   *bufio.Reader
	bw   *bufio.Writer
	w    ingressWriter
	body trackedBody
}

// closeIfIdle closes c if it waits for a request; Close calls it.
func (ic *ingressConn) closeIfIdle() {
	if ic.state.CompareAndSwap(connIdle, connClosed) {
		ic.c.Close()
	}
}

// activate marks c busy with a request; false when Close closed it.
func (ic *ingressConn) activate() bool {
	return ic.state.CompareAndSwap(connIdle, connActive)
}

// idle marks c waiting for a request; false when it is to be closed.
func (ic *ingressConn) idle() bool {
	if !ic.state.CompareAndSwap(connActive, connIdle) {
		return false
	}
	// Close may have looked at c while it was active.
	if ic.l.closing() && ic.state.CompareAndSwap(connIdle, connClosed) {
		return false
	}
	return true
}

func (ic *ingressConn) serve() {
	l := ic.l
	defer l.wg.Done()
	handed := false
	defer func() {
		if !handed {
			l.forget(ic)
			ic.c.Close()
		}
	}()
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			l.cfg.Logf("relay: panic serving %s: %v\n%s", ic.c.RemoteAddr(), v, debug.Stack())
		}
	}()
	if _, ok := ic.c.(*tls.Conn); ok {
		handed = ic.handOff(nil)
		return
	}
	ic.remote = ic.c.RemoteAddr().String()
	ic.lim.r = ic.c
	ic.br = bufio.NewReader(&ic.lim)
	var lastMethod string
	for first := true; ; first = false {
		ic.lim.n = int64(l.cfg.MaxHeaderBytes) + 4096 // as net/http allows
		switch {
		case first:
			setReadTimeout(ic.c, l.cfg.ReadHeaderTimeout)
			if _, err := ic.br.Peek(1); err != nil {
				return
			}
		case ic.br.Buffered() == 0:
			// Wait for the next request as long as IdleTimeout, then
			// give its header ReadHeaderTimeout, unless it came whole.
			setReadTimeout(ic.c, l.cfg.IdleTimeout)
			if _, err := ic.br.Peek(1); err != nil {
				return
			}
			if !headerBuffered(ic.br) {
				setReadTimeout(ic.c, l.cfg.ReadHeaderTimeout)
			}
		default: // pipelined: the last request's deadline may be past
			setReadTimeout(ic.c, l.cfg.ReadHeaderTimeout)
		}
		if !ic.activate() {
			return
		}
		if lastMethod == http.MethodPost {
			// RFC 9112 section 2.2: a server may skip empty lines
			// before a request, as net/http does after a POST.
			skipEmptyLines(ic.br)
		}
		delivery, err := isDelivery(ic.br)
		if err != nil {
			return
		}
		if !delivery {
			handed = ic.handOff(ic.br)
			return
		}
		// What the buffer holds stays there, unchanged, while
		// http.ReadRequest reads a header that came whole: it needs no
		// more bytes. serveRequest looks at it in one rare case.
		head, _ := ic.br.Peek(ic.br.Buffered())
		if !headerBuffered(ic.br) {
			head = nil
		}
		req, err := http.ReadRequest(ic.br)
		if err != nil {
			ic.refuseRequest(err)
			return
		}
		ic.lim.n = math.MaxInt64
		lastMethod = req.Method
		if !ic.serveRequest(req, head) {
			if !ic.body.complete() {
				ic.closeWriteAndWait()
			}
			return
		}
		if !ic.idle() {
			return
		}
	}
}

// handOff gives c, with the bytes br holds, to the http.Server; false if
// the listener closed first.
func (ic *ingressConn) handOff(br *bufio.Reader) bool {
	var c net.Conn = ic.c
	if br != nil {
		c.SetReadDeadline(time.Time{}) // net/http sets its own
		c = &handedConn{Conn: ic.c, br: br}
	}
	ic.l.forget(ic)
	select {
	case ic.l.handoff <- c:
		return true
	case <-ic.l.done:
		return false
	}
}

// refuseRequest answers a request that could not be read as net/http's
// server does, and the connection ends.
func (ic *ingressConn) refuseRequest(err error) {
	const headers = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	var msg string
	switch {
	case ic.lim.n <= 0:
		ic.c.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(ic.c, "HTTP/1.1 431 Request Header Fields Too Large"+headers+"431 Request Header Fields Too Large")
		ic.closeWriteAndWait()
		return
	case strings.Contains(err.Error(), "unsupported transfer encoding"):
		msg = "501 Not Implemented" + headers + "Unsupported transfer encoding"
	case isNetReadError(err):
		return
	default:
		msg = "400 Bad Request" + headers + "400 Bad Request"
	}
	ic.c.SetWriteDeadline(time.Now().Add(time.Second))
	io.WriteString(ic.c, "HTTP/1.1 "+msg)
}

// closeWriteAndWait ends a connection whose sender may still be writing
// (a body refused before it was read, headers over the limit) as net/http
// does: it sends FIN and waits half a second before the close, which
// would reset the connection, so that the sender reads the answer first.
func (ic *ingressConn) closeWriteAndWait() {
	if cw := closeWriter(ic.c); cw != nil {
		cw.CloseWrite()
	}
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ic.l.ctx.Done(): // Abort
	}
}

// closeWriter finds the TCP connection under c's wrappers.
func closeWriter(c net.Conn) interface{ CloseWrite() error } {
	for ; c != nil; c = innerConn(c) {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			return cw
		}
	}
	return nil
}

func isNetReadError(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "read"
}

// serveRequest answers one delivery; false when the connection is to end.
// head is what br held of the request before it was read: its header when
// that came whole, as it does unless it is large.
func (ic *ingressConn) serveRequest(req *http.Request, head []byte) bool {
	fail := func(status string) bool {
		io.WriteString(ic.c, "HTTP/1.1 "+status+"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"+status)
		return false
	}
	if req.ProtoMajor != 1 {
		return fail("505 HTTP Version Not Supported: unsupported protocol version")
	}
	if req.ProtoAtLeast(1, 1) && req.Host == "" && !hostField(head) {
		return fail("400 Bad Request: missing required Host header")
	}
	if !httpguts.ValidHostHeader(req.Host) {
		return fail("400 Bad Request: malformed Host header")
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fail("400 Bad Request: invalid header name")
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fail("400 Bad Request: invalid header value")
			}
		}
	}
	cont := false
	if ex := req.Header.Get("Expect"); ex != "" { // the first value, as net/http looks at it
		if !httpguts.HeaderValuesContainsToken([]string{ex}, "100-continue") {
			io.WriteString(ic.c, "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return false
		}
		cont = req.ProtoAtLeast(1, 1) && req.ContentLength != 0
	}
	req.RemoteAddr = ic.remote
	req = req.WithContext(ic.l.ctx)
	ic.body.reset(ic, req.Body, req.ContentLength, cont)
	req.Body = &ic.body
	if ic.bw == nil {
		ic.bw = bufio.NewWriterSize(ic.c, 4096)
	}
	w := &ic.w
	w.reset(ic, req)
	ic.l.srv.ServeHTTP(w, req)
	if w.status == 0 && ic.l.ctx.Err() != nil {
		// Abort ended the wait for the agent: no answer is owed, and a
		// handler that wrote none must not become a 200.
		return false
	}
	// A body the handler left unread is read to its end, as net/http's
	// server does, so that the connection can take the next request:
	// unless the answer refuses it (Connection: close), or the sender
	// waits for 100 Continue before it sends it.
	end := false
	if !ic.body.complete() {
		switch {
		case ic.body.cont:
			end = true
		case httpguts.HeaderValuesContainsToken(w.h["Connection"], "close"):
		default:
			end = !ic.body.discard(maxDiscard)
		}
	}
	keep := w.finish(end)
	return keep && ic.body.complete() && !req.Close && req.ProtoAtLeast(1, 1) && !ic.l.closing()
}

// ingressWriter is a delivery's http.ResponseWriter: it keeps the answer
// and writes it whole when the handler returns.
type ingressWriter struct {
	ic     *ingressConn
	req    *http.Request
	h      http.Header
	status int
	body   []byte
	line   []byte // scratch for the status line and Content-Length
}

func (w *ingressWriter) reset(ic *ingressConn, req *http.Request) {
	if w.h == nil {
		w.h = make(http.Header, 8)
	}
	w.ic, w.req, w.status = ic, req, 0
	w.body = w.body[:0]
}

func (w *ingressWriter) Header() http.Header { return w.h }

func (w *ingressWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *ingressWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, b...)
	return len(b), nil
}

// SetReadDeadline serves http.ResponseController. Clearing the deadline
// is skipped: nothing reads the connection until the answer is written,
// and the wait for the next request sets its own.
func (w *ingressWriter) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		return nil
	}
	return w.ic.c.SetReadDeadline(t)
}

var (
	headerDate          = "Date"
	headerContentType   = "Content-Type"
	headerContentLength = "Content-Length"
)

// finish writes the answer; false when the connection is to end.
func (w *ingressWriter) finish(end bool) bool {
	status := w.status
	switch {
	case status == 0:
		status = http.StatusOK
	case status < 200 || status > 999:
		// net/http's server would panic on a code under 100 or over
		// 999; a 1xx is no final answer.
		clear(w.h)
		w.h[headerContentType] = []string{"text/plain; charset=utf-8"}
		w.body = append(w.body[:0], "devhook relay: the agent answered with status "...)
		w.body = append(strconv.AppendInt(w.body, int64(status), 10), ", which is no final HTTP status\n"...)
		status = http.StatusBadGateway
	}
	h := w.h
	closeAfter := end || httpguts.HeaderValuesContainsToken(h["Connection"], "close")
	for _, k := range [...]string{"Connection", "Transfer-Encoding", "Keep-Alive", headerContentLength} {
		delete(h, k)
	}
	bodyAllowed := status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
	if _, ok := h[headerContentType]; !ok && bodyAllowed && len(w.body) > 0 {
		h[headerContentType] = []string{http.DetectContentType(w.body)}
	}
	bw := w.ic.bw
	b := append(w.line[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	if text := http.StatusText(status); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(status), 10)
	}
	b = append(b, "\r\n"...)
	if _, ok := h[headerDate]; !ok {
		b = append(b, "Date: "...)
		b = time.Now().UTC().AppendFormat(b, http.TimeFormat)
		b = append(b, "\r\n"...)
	}
	bw.Write(b)
	h.Write(bw) // sorted; drops invalid names, turns newlines in values into spaces
	head := w.req.Method == http.MethodHead
	if bodyAllowed && !(head && len(w.body) == 0) {
		b = append(b[:0], "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(w.body)), 10)
		bw.Write(append(b, "\r\n"...))
	}
	if closeAfter || w.req.Close || !w.req.ProtoAtLeast(1, 1) || w.ic.l.closing() {
		closeAfter = true
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	if bodyAllowed && !head {
		bw.Write(w.body)
	}
	w.line = b[:0]
	err := bw.Flush()
	if err != nil {
		bw.Reset(w.ic.c)
	}
	// Nothing of this answer stays with a connection that waits for the
	// next request (a relay may hold many): a large body's buffer goes.
	clear(h)
	w.req = nil
	if cap(w.body) > 4<<10 {
		w.body = nil
	}
	return err == nil && !closeAfter
}

// trackedBody is a delivery's request body: it knows whether it was read
// to its end, and sends 100 Continue before the first read when the
// sender asked for it.
type trackedBody struct {
	ic   *ingressConn
	rc   io.ReadCloser
	left int64 // bytes of a Content-Length body not read yet; -1: unknown
	eof  bool
	cont bool // 100 Continue is owed before the first read
}

func (b *trackedBody) reset(ic *ingressConn, rc io.ReadCloser, contentLength int64, cont bool) {
	*b = trackedBody{ic: ic, rc: rc, left: contentLength, cont: cont}
}

func (b *trackedBody) Read(p []byte) (int, error) {
	if b.cont {
		b.cont = false
		b.ic.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := b.ic.bw.Flush(); err != nil {
			return 0, err
		}
	}
	n, err := b.rc.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *trackedBody) Close() error { return b.rc.Close() }

// maxDiscard bounds the unread part of a body read away after its answer,
// as net/http's server bounds it.
const maxDiscard = 256 << 10

// discard reads the rest of the body, up to max bytes; false when it did
// not reach its end.
func (b *trackedBody) discard(max int64) bool {
	io.CopyN(io.Discard, b, max+1)
	return b.complete()
}

// complete reports whether the next request starts where this body ends.
func (b *trackedBody) complete() bool { return b.eof || b.left == 0 }

// limitedReader reads from r until n bytes were read, then reports EOF;
// n bounds a request's headers, and is lifted for its body.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// handedConn is a connection handed to net/http with bytes already read.
type handedConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *handedConn) Read(p []byte) (int, error) {
	if c.br != nil {
		if c.br.Buffered() > 0 {
			return c.br.Read(p) // from its buffer only
		}
		c.br = nil
	}
	return c.Conn.Read(p)
}

// isDelivery reads until it can tell whether the request starting in br
// is a delivery: a method, then a path under /c/. It reads no more than
// that and consumes nothing.
func isDelivery(br *bufio.Reader) (bool, error) {
	const maxMethod = 32
	for n := max(br.Buffered(), 1); ; n++ {
		b, err := br.Peek(n)
		if sp := indexByte(b, ' '); sp >= 0 {
			if len(b) >= sp+4 {
				return string(b[sp+1:sp+4]) == "/c/", nil
			}
		} else if len(b) > maxMethod {
			return false, nil // not a request net/http's server would take either
		}
		if err != nil {
			return false, err
		}
		n = max(n, br.Buffered())
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// hostField reports whether head, a request's header, has a Host field:
// http.ReadRequest takes it out, and an empty one is valid where a
// missing one is not. Without head (a header too large for the buffer),
// it says no.
func hostField(head []byte) bool {
	end := bytes.Index(head, []byte("\r\n\r\n"))
	if end < 0 {
		return false
	}
	for _, line := range bytes.Split(head[:end], []byte("\r\n"))[1:] {
		if len(line) >= 5 && bytes.EqualFold(line[:5], []byte("host:")) {
			return true
		}
	}
	return false
}

// headerBuffered reports whether br holds a request's whole header.
func headerBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.Contains(b, []byte("\r\n\r\n"))
}

func skipEmptyLines(br *bufio.Reader) {
	for {
		b, _ := br.Peek(1)
		if len(b) == 0 || (b[0] != '\r' && b[0] != '\n') {
			return
		}
		br.Discard(1)
	}
}

func setReadTimeout(c net.Conn, d time.Duration) {
	if d > 0 {
		c.SetReadDeadline(time.Now().Add(d))
	} else {
		c.SetReadDeadline(time.Time{})
	}
}
