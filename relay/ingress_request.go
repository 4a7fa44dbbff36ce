package relay

import (
	"bufio"
	"bytes"
	"io"
)

// What an IngressListener's connection reads of a request beside
// http.ReadRequest: a bound on its header, a look at its first bytes
// (is it a delivery, did its header come whole, has it a Host field),
// and its body, which the connection follows to know where the next
// request starts.

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

// headScan follows a delivery's header line by line as its bytes arrive,
// before http.ReadRequest reads it, to refuse what would make its framing
// ambiguous to anything in front of the relay (RFC 9112 sections 2.2,
// 5.2 and 6.1). net/http's parser takes a bare LF for a line's end, joins
// an obs-fold line to the one before and lets Transfer-Encoding override
// Content-Length: a proxy that reads those otherwise would see another
// request where the relay sees a body, or the other way round. The
// relay answers them 400 and closes the connection (framingVerdict).
type headScan struct {
	pos  int    // where the next line not yet looked at starts
	seen int    // bytes from pos on already searched for its end, in vain
	line int    // lines seen, the request line first
	done bool   // the empty line that ends the header was seen
	bad  string // why the header is refused before its end, or ""

	http10    bool // the request line ends in HTTP/1.0
	cl, te    bool // a Content-Length field, a Transfer-Encoding field
	chunked   int  // how many times chunked was listed
	lastCoded bool // chunked was the last coding listed
	other     bool // a coding other than chunked was listed
}

// scan looks at the complete lines of b, a request's bytes from its
// start, that it has not looked at yet.
func (h *headScan) scan(b []byte) {
	for !h.done && h.bad == "" {
		// A line that comes a few bytes at a time is searched once, not
		// again from its start at each arrival.
		from := max(h.pos, h.seen)
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			h.seen = len(b)
			return
		}
		line := b[h.pos : from+i]
		h.pos = from + i + 1
		if len(line) == 0 || line[len(line)-1] != '\r' {
			h.bad = "a line of the header ends with a bare LF, not CRLF"
			return
		}
		line = line[:len(line)-1]
		if bytes.IndexByte(line, '\r') >= 0 {
			h.bad = "a line of the header has a bare CR"
			return
		}
		if h.line++; h.line == 1 {
			// The request line: http.ReadRequest checks it.
			h.http10 = bytes.HasSuffix(line, []byte(" HTTP/1.0"))
			continue
		}
		if len(line) == 0 {
			h.done = true
			return
		}
		if line[0] == ' ' || line[0] == '\t' {
			h.bad = "a header field is folded over lines (obs-fold)"
			return
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		switch {
		case !ok: // http.ReadRequest refuses it
		case asciiEqualFold(name, "Content-Length"):
			h.cl = true
		case asciiEqualFold(name, "Transfer-Encoding"):
			h.te = true
			h.codings(value)
		}
	}
}

// codings takes in the transfer codings a Transfer-Encoding field lists.
func (h *headScan) codings(value []byte) {
	for c := range bytes.SplitSeq(value, []byte(",")) {
		c = bytes.TrimSpace(c)
		if i := bytes.IndexByte(c, ';'); i >= 0 {
			c = bytes.TrimSpace(c[:i])
		}
		if len(c) == 0 {
			continue // empty list elements are allowed
		}
		h.lastCoded = asciiEqualFold(c, "chunked")
		if h.lastCoded {
			h.chunked++
		} else {
			h.other = true
		}
	}
}

// framingVerdict is the status line and reason a complete header is
// refused with, or "" when its framing is clear: Content-Length and
// Transfer-Encoding together, chunked not the last coding or listed
// twice, a coding other than chunked (501, as net/http answers), or
// Transfer-Encoding in an HTTP/1.0 request.
func (h *headScan) framingVerdict() (status, why string) {
	switch {
	case !h.te:
		return "", ""
	case h.cl:
		return "400 Bad Request", "both Content-Length and Transfer-Encoding"
	case h.http10:
		return "400 Bad Request", "Transfer-Encoding in an HTTP/1.0 request"
	case !h.lastCoded:
		return "400 Bad Request", "Transfer-Encoding without chunked as its last coding"
	case h.chunked > 1:
		return "400 Bad Request", "Transfer-Encoding lists chunked more than once"
	case h.other:
		return "501 Not Implemented", "Unsupported transfer encoding"
	}
	return "", ""
}

// asciiEqualFold reports whether b is s, ignoring ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
