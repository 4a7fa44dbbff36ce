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
