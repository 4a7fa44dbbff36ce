package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// netHTTPHead is what (*http.Request).Write writes for the request
// sendDirect built before the head was written by hand: the reference.
func netHTTPHead(t testing.TB, method string, u *url.URL, h http.Header, withBody bool, body []byte) ([]byte, error) {
	t.Helper()
	host := strings.TrimSuffix(u.Host, ":")
	r := &http.Request{Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Host: host, ContentLength: int64(len(body))}
	switch {
	case !withBody:
		r.Body = nil
	case len(body) == 0:
		r.Body = http.NoBody
	default:
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	var buf bytes.Buffer
	err := r.Write(&buf)
	return buf.Bytes(), err
}

// handHead is the request as the agent's client writes it.
func handHead(method string, u *url.URL, h http.Header, withBody bool, body []byte) []byte {
	u2 := *u
	u2.Host = strings.TrimSuffix(u.Host, ":")
	head, _ := appendRequestHead(nil, nil, method, &u2, h, withBody, len(body))
	return append(head, body...)
}

// The request's head written by hand is (*http.Request).Write's, byte for
// byte, for every shape of delivery: repeated headers, odd names and
// values, the headers Request.Write writes itself, bodies or none.
func TestRequestHeadAsNetHTTPWrites(t *testing.T) {
	big := strings.Repeat("v", 6000)
	headers := []http.Header{
		nil,
		{},
		{"Content-Type": {"application/json"}, "User-Agent": {"sender/1.0"}, "Service-Signature": {"t=1,v1=ab"}, "Accept-Encoding": {"gzip"}},
		{"X-Multi": {"a", "b", "c"}, "Cookie": {"x=1", "y=2"}, "X-Empty": {""}, "X-None": {}, "X-Nil": nil},
		{"x-lower": {"1"}, "X-Mixed-CASE": {"2"}, "weird_name": {"3"}, "Ünicode": {"4"}, "Bad Name": {"5"}, "": {"6"},
			"Colon:Name": {"7"}, "Tab\tName": {"8"}, "a!#$%&'*+-.^_`|~z": {"9"}},
		{"X-Spaces": {"  padded\t "}, "X-Newlines": {"a\r\nb", "\nc\r", "d\re\nf"}, "X-Ctl": {"a\x00b\x7fc"}, "X-High": {"caf\xc3\xa9 \xff"}},
		{"User-Agent": {""}},
		{"User-Agent": {}},
		{"User-Agent": {"  ua with spaces \r\n"}, "user-agent": {"lower"}},
		{"User-Agent": {"first", "second"}},
		{"Host": {"other.example"}, "Content-Length": {"999"}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X-T"},
			"host": {"h"}, "content-length": {"1"}, "transfer-encoding": {"gzip"}, "trailer": {"t"}, "Connection": {"close"}},
		{"X-Big": {big}, "X-Other": {"after the big one"}},
		{"B": {"2"}, "A": {"1"}, "C": {"3"}, "a": {"4"}, "AA": {"5"}, "A-": {"6"}, "_": {"7"}, "~": {"8"}, "0": {"9"}},
	}
	targets := []string{
		"http://127.0.0.1:8080/hook",
		"http://127.0.0.1:8080",
		"http://127.0.0.1:8080/",
		"http://127.0.0.1:8080/q?a=1&b=%20x&c=%2F",
		"http://127.0.0.1:8080/p?",
		"http://127.0.0.1:8080/a%2Fb/c%20d/%C3%A9",
		"http://127.0.0.1:8080/a b/é?x=é y",
		"http://127.0.0.1:8080/a;b=c/,d@e:f!$&'()*+=",
		"http://localhost/x",
		"http://localhost:/x",
		"http://[::1]:9000/x",
		"http://[fe80::1%25en0]:9000/x",
		"http://a\"b:80/x",
		"http://example.com:80/x?q#frag",
	}
	bodies := [][]byte{nil, {}, []byte("x"), []byte(`{"a":1}`), bytes.Repeat([]byte("b"), 5000)}
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND", "get", "CONNECT", "TRACE"}
	n := 0
	for _, target := range targets {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		for _, h := range headers {
			for _, method := range methods {
				for _, body := range bodies {
					withBody := hasBody(method, body)
					want, err := netHTTPHead(t, method, u, h, withBody, body)
					if err != nil {
						t.Fatalf("%s %s: Request.Write: %v", method, target, err)
					}
					if got := handHead(method, u, h, withBody, body); !bytes.Equal(got, want) {
						t.Fatalf("%s %s %v, body %d bytes:\nRequest.Write wrote\n%q\nby hand\n%q", method, target, h, len(body), want, got)
					}
					n++
				}
			}
		}
	}
	t.Logf("%d requests alike", n)
}

// FuzzRequestHead holds the head written by hand to Request.Write's for
// any method, target and header.
func FuzzRequestHead(f *testing.F) {
	f.Add("POST", "/hook", "Content-Type\x00application/json\x01User-Agent\x00s/1\x01X-A\x00a\r\nb", []byte("{}"))
	f.Add("GET", "/q?a=1", "x-lower\x00 v \x01X-Rep\x001\x01X-Rep\x002", []byte(nil))
	f.Add("HEAD", "/a%2Fb", "Host\x00h\x01Content-Length\x005\x01bad name\x00x", []byte("x"))
	f.Add("CONNECT", "", "", []byte(nil))
	f.Add("CONNECT", "?q", "", []byte(nil))
	f.Fuzz(func(t *testing.T, method, path, header string, body []byte) {
		if !validMethod(method) {
			return
		}
		u, err := url.Parse("http://127.0.0.1:8080" + path)
		if err != nil || u.User != nil || !isASCII(u.Host) {
			return
		}
		h := http.Header{}
		for kv := range strings.SplitSeq(header, "\x01") {
			k, v, _ := strings.Cut(kv, "\x00")
			h[k] = append(h[k], v)
		}
		withBody := hasBody(method, body)
		want, err := netHTTPHead(t, method, u, h, withBody, body)
		if err != nil {
			return // refused: sendDirect never sends it
		}
		if got := handHead(method, u, h, withBody, body); !bytes.Equal(got, want) {
			t.Fatalf("Request.Write wrote\n%q\nby hand\n%q", want, got)
		}
	})
}

// checkAnswerHead reads in with readAnswerHead and, when it reads it,
// with http.ReadResponse, and fails t where they differ: status, header,
// whether the connection ends, the body's bytes and what follows it.
func checkAnswerHead(t testing.TB, in []byte, method string) (ok bool) {
	t.Helper()
	h, n, ok := readAnswerHead(in, method)
	if !ok {
		return false
	}
	if n <= 0 || n > len(in) {
		t.Fatalf("%q: head of %d bytes", in, n)
	}
	br := bufio.NewReaderSize(bytes.NewReader(in), len(in)+16)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q (%s): read by hand as %d %v, http.ReadResponse failed: %v", in, method, h.status, h.header, err)
	}
	if resp.StatusCode != h.status || !reflect.DeepEqual(resp.Header, h.header) || resp.Close != h.close {
		t.Fatalf("%q (%s):\nhttp.ReadResponse %d %v close %v\nby hand           %d %v close %v", in, method,
			resp.StatusCode, resp.Header, resp.Close, h.status, h.header, h.close)
	}
	wantBody, wantErr := io.ReadAll(resp.Body)
	rest, _ := io.ReadAll(br)
	hr := bufio.NewReader(bytes.NewReader(in[n:]))
	gotBody, gotErr := readBody(hr, h.length, 1<<30)
	gotRest, _ := io.ReadAll(hr)
	if !bytes.Equal(wantBody, gotBody) || !errors.Is(gotErr, wantErr) && fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !bytes.Equal(rest, gotRest) {
		t.Fatalf("%q (%s): body\nhttp.ReadResponse %q %v, then %q\nby hand           %q %v, then %q", in, method, wantBody, wantErr, rest, gotBody, gotErr, gotRest)
	}
	return true
}

// An answer's head read by hand is read as http.ReadResponse reads it;
// the usual ones are read by hand, the rest left to http.ReadResponse.
func TestAnswerHeadAsNetHTTPReads(t *testing.T) {
	for _, tc := range []struct {
		in     string
		method string
		byHand bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 11\r\nETag: W/\"b-x\"\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n{\"ok\":true}", "POST", true},
		{"HTTP/1.1 201 Created\r\ncontent-type: text/plain\r\nx-request-id: abc\r\ncontent-length: 5\r\n\r\nhello", "POST", true},
		{"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nset-cookie: c=3\r\nX-Empty:\r\nX-Spaces:   v  \t\r\nContent-Length: 0\r\n\r\n", "POST", true},
		{"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 299 Odd \x01 reason\r\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 404 Not Found\r\nContent-Length: 0009\r\n\r\nnot found", "POST", true},
		{"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", "POST", true},
		{"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", "POST", true},
		{"HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n", "GET", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "HEAD", true},
		{"HTTP/1.1 200 OK\r\n\r\n", "HEAD", true},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", "POST", true},
		{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nConnection: x\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n", "POST", true},
		{"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nCache-Control: max-age=1\r\nContent-Length: 0\r\n\r\n", "POST", true},
		{"HTTP/1.1 200 OK\r\nTrailer: X-T\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 200 OK\r\nX-High: caf\xc3\xa9\xff\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "POST", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 408 Request Timeout\r\n\r\n", "POST", true},
		{"HTTP/1.1 999 Whatever\r\nContent-Length: 1\r\n\r\nx", "POST", true},
		{"HTTP/1.1 200 OK\r\nx-a-B-c: 1\r\nX-9a: 2\r\nA--b: 3\r\n-x: 4\r\n\r\n", "HEAD", true},
		// Left to http.ReadResponse.
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", "POST", false},
		{"HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\n", "POST", false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"HTTP/1.1 200 OK\r\n\r\nto the close", "POST", false},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n", "POST", false},
		{"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", "POST", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok", "POST", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", "POST", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Folded: a\r\n b\r\n\r\nok", "POST", false},
		{"HTTP/1.1 200 OK\r\n X-Initial: space\r\n\r\n", "POST", false},
		{"HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n", "POST", false},
		{"HTTP/1.1 200 OK\r\nX-Ctl: a\x00b\r\nContent-Length: 0\r\n\r\n", "POST", false},
		{"HTTP/1.1 200 OK\r\nX-Cr: a\rb\r\nContent-Length: 0\r\n\r\n", "POST", false},
		{"HTTP/1.1 200 OK\r\nNo colon\r\n\r\n", "POST", false},
		{"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", "POST", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", "POST", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", "POST", false},
		{"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\nok", "POST", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nok", "POST", false},
		{"HTTP/1.1 200OK\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"HTTP/1.1 200\rX\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"HTTP/1.1 +20 Plus\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"http/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\nok", "POST", false},
		{"", "POST", false},
	} {
		if got := checkAnswerHead(t, []byte(tc.in), tc.method); got != tc.byHand {
			t.Errorf("%q (%s): read by hand %v, want %v", tc.in, tc.method, got, tc.byHand)
		}
	}
}

// FuzzAnswerHead holds what readAnswerHead reads to what
// http.ReadResponse reads from the same bytes.
func FuzzAnswerHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}",
		"HTTP/1.1 201 Created\r\ncontent-type: text/plain\r\nset-cookie: a\r\nSet-Cookie: b\r\ncontent-length: 3\r\n\r\nabc",
		"HTTP/1.1 204 No Content\r\nConnection: close\r\nPragma: no-cache\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 500 Internal Server Error\r\nX-A:  \t v\t \r\nContent-Length: 0007\r\n\r\nfailure",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, head bool) {
		method := "POST"
		if head {
			method = "HEAD"
		}
		checkAnswerHead(t, in, method)
	})
}

// BenchmarkAnswerHead is an answer's head read by hand and by
// http.ReadResponse.
func BenchmarkAnswerHead(b *testing.B) {
	in := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := readAnswerHead(in, "POST"); !ok {
				b.Fatal("not read")
			}
		}
	})
	b.Run("net-http", func(b *testing.B) {
		b.ReportAllocs()
		r := bytes.NewReader(in)
		br := bufio.NewReader(r)
		req := &http.Request{Method: "POST"}
		for b.Loop() {
			r.Reset(in)
			br.Reset(r)
			resp, err := http.ReadResponse(br, req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
		}
	})
}

// BenchmarkRequestHead is a request's head written by hand and by
// (*http.Request).Write.
func BenchmarkRequestHead(b *testing.B) {
	u, _ := url.Parse("http://127.0.0.1:8080/hook")
	body := bytes.Repeat([]byte("x"), 1500)
	header := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"run-status/1.0"},
		"Service-Signature": {"t=1700000000,v1=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		"Accept-Encoding":   {"gzip"}, "X-Forwarded-For": {"203.0.113.7"}}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		var keys []string
		for b.Loop() {
			buf, keys = appendRequestHead(buf[:0], keys, "POST", u, header, true, len(body))
			buf = append(buf, body...)
		}
	})
	b.Run("net-http", func(b *testing.B) {
		b.ReportAllocs()
		bw := bufio.NewWriterSize(io.Discard, 4<<10)
		var br bytes.Reader
		rc := io.NopCloser(&br)
		r := &http.Request{Method: "POST", URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: header, Host: u.Host, ContentLength: int64(len(body))}
		for b.Loop() {
			br.Reset(body)
			r.Body = rc
			r.Write(bw)
			bw.Flush()
		}
	})
}
