package relay

import (
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A delivery's answer, as an IngressListener writes it: kept whole until
// the handler returns, then written at once, always with a
// Content-Length, adding and dropping headers as net/http's server would.

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
