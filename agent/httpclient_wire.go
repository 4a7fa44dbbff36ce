package agent

// The wire form of a direct forward (httpclient.go): a request's head
// written into a reused buffer, and an answer's head read from the
// connection's buffer, instead of (*http.Request).Write and
// http.ReadResponse.
//
// The request's head is byte for byte what (*http.Request).Write writes
// for the request sendDirect used to build (TestRequestHeadAsNetHTTPWrites,
// FuzzRequestHead):
//
//	METHOD SP request-target SP "HTTP/1.1" CRLF  (the host for a CONNECT without a path)
//	"Host: " host CRLF                (empty when not a valid Host header)
//	"User-Agent: " value CRLF         (Go's own when the header has none; none when empty)
//	"Content-Length: " n CRLF         (when the request has a body, if an empty one)
//	name ": " value CRLF ...          (the other names sorted bytewise, each value in
//	                                   order, CR and LF made spaces, trimmed; a name that
//	                                   is not a token left out; Host, User-Agent,
//	                                   Content-Length, Transfer-Encoding, Trailer skipped)
//	CRLF
//
// An answer's head is read here when it is an HTTP/1.1 head held whole in
// the connection's buffer, every line ending in CRLF, every name a token,
// no folded line, no value with a control byte, no Transfer-Encoding, and
// its body framed by one Content-Length or absent (1xx but 101, 204, 304,
// an answer to HEAD). Any other head goes to http.ReadResponse, which
// reads it from the same bytes: the rare forms (chunked, HTTP/1.0, a body
// to the close, 101) and every malformed one, whose errors stay
// net/http's. What is read here is what http.ReadResponse reads
// (TestAnswerHeadAsNetHTTPReads, FuzzAnswerHead): status, header
// (canonical names, values trimmed, Pragma: no-cache giving
// Cache-Control, a Connection that says close removed) and framing.
//
// Why: per forward, (*http.Request).Write made 8 allocations (the
// transfer writer, its formatting, the sorted header) and
// http.ReadResponse 10 or so (the Response, its textproto reader, a
// string per line and per value, the body's readers); here the head costs
// none and the answer three (the header map, its values, one string for
// the head). See BenchmarkForward and BenchmarkAnswerHead.

import (
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// defaultUserAgent is net/http's, sent when a request's header has no
// User-Agent.
const defaultUserAgent = "Go-http-client/1.1"

// appendRequestHead appends to dst the head of a request of method to u
// with header h, as (*http.Request).Write writes it; withBody: the request
// has a body of length n, if an empty one, and says its Content-Length.
// keys is room for h's names, returned for the next call.
func appendRequestHead(dst []byte, keys []string, method string, u *url.URL, h http.Header, withBody bool, n int) ([]byte, []string) {
	host := hostHeader(u.Host)
	dst = append(dst, method...)
	dst = append(dst, ' ')
	switch {
	case method != "CONNECT" || u.Path != "":
		dst = appendRequestURI(dst, u)
	case u.Opaque != "":
		dst = append(dst, u.Opaque...)
	default:
		dst = append(dst, host...)
	}
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, host...)
	dst = append(dst, "\r\n"...)
	ua := defaultUserAgent
	if vs, ok := h["User-Agent"]; ok {
		ua = ""
		if len(vs) > 0 {
			ua = vs[0]
		}
	}
	if ua = textproto.TrimString(ua); ua != "" {
		dst = append(dst, "User-Agent: "...)
		dst = appendValue(dst, ua)
		dst = append(dst, "\r\n"...)
	}
	if withBody {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(n), 10)
		dst = append(dst, "\r\n"...)
	}
	keys = keys[:0]
	for k := range h {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			dst = appendValue(dst, textproto.TrimString(v))
			dst = append(dst, "\r\n"...)
		}
	}
	clear(keys) // hold no name between requests
	return append(dst, "\r\n"...), keys[:0]
}

// appendRequestURI appends u.RequestURI().
func appendRequestURI(dst []byte, u *url.URL) []byte {
	if u.Opaque != "" {
		return append(dst, u.RequestURI()...)
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	dst = append(dst, p...)
	if u.ForceQuery || u.RawQuery != "" {
		dst = append(dst, '?')
		dst = append(dst, u.RawQuery...)
	}
	return dst
}

// hostHeader is the Host header (*http.Request).Write sends for host, an
// ASCII host[:port]: empty when it is not a valid one, without an IPv6
// zone.
func hostHeader(host string) string {
	if !httpguts.ValidHostHeader(host) {
		return ""
	}
	if !strings.HasPrefix(host, "[") {
		return host
	}
	i := strings.LastIndex(host, "]")
	if i < 0 {
		return host
	}
	j := strings.LastIndex(host[:i], "%")
	if j < 0 {
		return host
	}
	return host[:j] + host[i:]
}

// appendValue appends v with CR and LF made spaces.
func appendValue(dst []byte, v string) []byte {
	for {
		i := strings.IndexAny(v, "\r\n")
		if i < 0 {
			return append(dst, v...)
		}
		dst = append(dst, v[:i]...)
		dst = append(dst, ' ')
		v = v[i+1:]
	}
}

// answerHead is an answer's head read by readAnswerHead.
type answerHead struct {
	status int
	header http.Header
	length int64 // of the body; 0 when it has none
	close  bool  // the answer ends its connection
}

// readAnswerHead reads the answer's head at the start of buf, to a
// request of method, when it is of the form described at the top of this
// file. It returns the head and its length in buf, or ok false, having
// read nothing, for http.ReadResponse to read.
func readAnswerHead(buf []byte, method string) (h answerHead, n int, ok bool) {
	const proto = "HTTP/1.1 "
	// The status line: "HTTP/1.1 ddd", then nothing or a space and a reason.
	if len(buf) < len(proto)+5 || string(buf[:len(proto)]) != proto {
		return h, 0, false
	}
	d := buf[len(proto) : len(proto)+3]
	if d[0] < '1' || d[0] > '9' || d[1] < '0' || d[1] > '9' || d[2] < '0' || d[2] > '9' {
		return h, 0, false
	}
	h.status = int(d[0]-'0')*100 + int(d[1]-'0')*10 + int(d[2]-'0')
	if h.status == http.StatusSwitchingProtocols {
		return h, 0, false
	}
	rest := buf[len(proto)+3:]
	if rest[0] != ' ' && (rest[0] != '\r' || rest[1] != '\n') {
		return h, 0, false
	}
	end := lineEnd(rest)
	if end < 0 {
		return h, 0, false
	}
	start := len(buf) - len(rest) + end + 2 // of the header lines
	// The header lines, checked and counted, up to the empty line.
	lines := 0
	for i := start; ; {
		e := lineEnd(buf[i:])
		if e < 0 {
			return h, 0, false
		}
		line := buf[i : i+e]
		i += e + 2
		if len(line) == 0 {
			n = i
			break
		}
		colon := -1
		for j, c := range line {
			if c == ':' {
				colon = j
				break
			}
			if !isTokenByte(c) {
				return h, 0, false
			}
		}
		if colon <= 0 {
			return h, 0, false
		}
		for _, c := range line[colon+1:] {
			if !isValueByte(c) {
				return h, 0, false
			}
		}
		lines++
	}
	// One string for the names (made canonical) and values.
	var b strings.Builder
	b.Grow(n - start)
	for i := start; i < n-2; {
		upper := true
		for ; buf[i] != ':'; i++ {
			c := buf[i]
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			} else if !upper && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b.WriteByte(c)
			upper = c == '-'
		}
		e := i + lineEnd(buf[i:]) + 2
		b.Write(buf[i:e])
		i = e
	}
	s := b.String()
	h.header = make(http.Header, lines)
	values := make([]string, lines)
	for len(s) > 0 {
		e := strings.Index(s, "\r\n")
		k, v, _ := strings.Cut(s[:e], ":")
		s = s[e+2:]
		v = strings.Trim(v, " \t")
		if vs, seen := h.header[k]; seen {
			h.header[k] = append(vs, v)
			continue
		}
		values[0] = v
		h.header[k] = values[:1:1]
		values = values[1:]
	}
	if hp := h.header["Pragma"]; len(hp) > 0 && hp[0] == "no-cache" {
		if _, ok := h.header["Cache-Control"]; !ok {
			h.header["Cache-Control"] = []string{"no-cache"}
		}
	}
	if _, ok := h.header["Transfer-Encoding"]; ok {
		return answerHead{}, 0, false
	}
	length := int64(-1)
	if cl, ok := h.header["Content-Length"]; ok {
		if len(cl) != 1 || len(cl[0]) == 0 || len(cl[0]) > 18 {
			return answerHead{}, 0, false
		}
		length = 0
		for _, c := range []byte(cl[0]) {
			if c < '0' || c > '9' {
				return answerHead{}, 0, false
			}
			length = length*10 + int64(c-'0')
		}
	}
	switch {
	case method == http.MethodHead || h.status < 200 || h.status == http.StatusNoContent || h.status == http.StatusNotModified:
		h.length = 0
	case length < 0:
		// The body goes on to the close.
		return answerHead{}, 0, false
	default:
		h.length = length
	}
	if httpguts.HeaderValuesContainsToken(h.header["Connection"], "close") {
		delete(h.header, "Connection")
		h.close = true
	}
	return h, n, true
}

// lineEnd is the index of the CRLF that ends the line at the start of b,
// or -1 when b has no LF or its first LF does not follow a CR.
func lineEnd(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			if i == 0 || b[i-1] != '\r' {
				return -1
			}
			return i - 1
		}
	}
	return -1
}

// isTokenByte reports whether c may be in a header name (RFC 9110 tchar).
func isTokenByte(c byte) bool {
	const mask = 0 |
		(1<<10-1)<<'0' |
		(1<<26-1)<<'a' |
		(1<<26-1)<<'A' |
		1<<'!' | 1<<'#' | 1<<'$' | 1<<'%' | 1<<'&' | 1<<'\'' | 1<<'*' |
		1<<'+' | 1<<'-' | 1<<'.' | 1<<'^' | 1<<'_' | 1<<'`' | 1<<'|' | 1<<'~'
	return ((uint64(1)<<c)&(mask&(1<<64-1)) |
		(uint64(1)<<(c-64))&(mask>>64)) != 0
}

// isValueByte reports whether c may be in a header value as net/textproto
// reads it: visible, space, tab, or above 0x7f.
func isValueByte(c byte) bool {
	return c >= 0x20 && c != 0x7f || c == '\t'
}
