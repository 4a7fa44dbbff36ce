package relay

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook/relay/wire"
	"golang.org/x/net/http/httpguts"
)

// An IngressListener's connection serves its requests in turn, on one
// goroutine (serve): it waits for a request within the listener's
// timeouts, hands the connection to the http.Server at the first request
// that is not a delivery, reads a delivery with http.ReadRequest and has
// the Server answer it (serveRequest), and ends the connection as
// net/http's server would.

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

	lim   limitedReader
	br    *bufio.Reader // small, or larger while a header does not fit in it
	small *bufio.Reader
	bw    *bufio.Writer
	w     ingressWriter
	body  trackedBody
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
	if tc, ok := ic.c.(*tls.Conn); ok {
		if !ic.handshake(tc) {
			return
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
			handed = ic.handOff(nil) // h2, acme-tls/1: net/http's business
			return
		}
	}
	ic.remote = ic.c.RemoteAddr().String()
	ic.lim.r = ic.c
	ic.small = bufio.NewReaderSize(&ic.lim, smallBuffer)
	ic.br = ic.small
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
			ic.shrinkBuffer()
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
		// The header is looked at before anything reads it, the first
		// request handed over included: net/http's server takes
		// ambiguous framing in its own way.
		var h headScan
		ic.readHead(&h)
		if h.bad != "" {
			ic.refuseFraming("400 Bad Request", h.bad)
			return
		}
		if h.done {
			if status, why := h.framingVerdict(); status != "" {
				ic.refuseFraming(status, why)
				return
			}
		}
		if !delivery {
			handed = ic.handOff(ic.br)
			return
		}
		// What the buffer holds stays there, unchanged, while
		// http.ReadRequest reads a header that came whole: it needs no
		// more bytes. serveRequest looks at it in one rare case.
		var head []byte
		if h.done {
			head, _ = ic.br.Peek(h.pos)
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

// smallBuffer is the size of a connection's read buffer while the
// headers it reads fit in it.
const smallBuffer = 4096

// readHead waits until br holds the whole header of the request it starts
// with, looking at its lines as they come (h). It stops at a line h
// refuses, and when reading fails or reaches the header's limit: then
// http.ReadRequest meets the same error (or the limit, 431) and answers it.
// A header larger than br's buffer gets a larger one, twice as large at
// each step: the bytes it holds are bytes received, as net/http's parser
// would hold them too.
func (ic *ingressConn) readHead(h *headScan) {
	maxHead := ic.l.cfg.MaxHeaderBytes + 4096
	for {
		b, _ := ic.br.Peek(ic.br.Buffered())
		h.scan(b)
		if h.done || h.bad != "" {
			return
		}
		if len(b) == ic.br.Size() {
			if len(b) >= maxHead {
				return
			}
			// The bytes held are read first from the larger buffer.
			ic.br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(b), &ic.lim), min(2*len(b), maxHead))
		}
		if _, err := ic.br.Peek(len(b) + 1); err != nil {
			return
		}
	}
}

// shrinkBuffer goes back to the small buffer once a larger one is empty,
// so that a connection which sent a large header does not keep its
// buffer while it waits.
func (ic *ingressConn) shrinkBuffer() {
	if ic.br != ic.small && ic.br.Buffered() == 0 {
		ic.small.Reset(&ic.lim)
		ic.br = ic.small
	}
}

// refuseFraming answers a request whose framing is ambiguous (headScan)
// and ends the connection, after the sender could read the answer: what
// follows its header is neither read as its body nor as a request.
func (ic *ingressConn) refuseFraming(status, why string) {
	ic.c.SetWriteDeadline(time.Now().Add(time.Second))
	io.WriteString(ic.c, "HTTP/1.1 "+status+"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"+status+": "+why)
	ic.closeWriteAndWait()
}

// handshake completes a TLS connection's handshake within the header
// timeout, as net/http's server would, and says so when it fails: false
// then, and the connection ends.
func (ic *ingressConn) handshake(tc *tls.Conn) bool {
	if d := ic.l.cfg.ReadHeaderTimeout; d > 0 {
		tc.SetDeadline(time.Now().Add(d))
	}
	err := tc.HandshakeContext(ic.l.ctx)
	if err == nil {
		tc.SetDeadline(time.Time{})
		return true
	}
	reason := err.Error()
	var re tls.RecordHeaderError
	if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader[:]) {
		io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		re.Conn.Close()
		reason = "client sent an HTTP request to an HTTPS server"
	}
	ic.l.cfg.Logf("http: TLS handshake error from %s: %s", tc.RemoteAddr(), reason)
	return false
}

func looksLikeHTTP(hdr []byte) bool {
	switch string(hdr) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
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
	for ; c != nil; c = wire.Inner(c) {
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

func setReadTimeout(c net.Conn, d time.Duration) {
	if d > 0 {
		c.SetReadDeadline(time.Now().Add(d))
	} else {
		c.SetReadDeadline(time.Time{})
	}
}
