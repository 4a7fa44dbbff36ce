package relay_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/relay"
)

// requestLine finds the request lines in a test's raw bytes.
var requestLine = regexp.MustCompile(`(GET|POST|HEAD|post) [^ \r\n]+ HTTP/`)

// exchange sends raw on a new connection to addr and returns the status
// and body of each answer it reads, until it has one per request line in
// raw (at least one) or the connection ends.
func exchange(t *testing.T, addr, raw string) []string {
	t.Helper()
	methods := []string{http.MethodPost}
	if m := requestLine.FindAllStringSubmatch(raw, -1); len(m) > 0 {
		methods = methods[:0]
		for _, sub := range m {
			methods = append(methods, strings.ToUpper(sub[1]))
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go io.WriteString(c, raw) // the server may answer before it read it all
	br := bufio.NewReader(c)
	var got []string
	for _, m := range methods {
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			return got
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			got = append(got, resp.Status+" "+string(body))
		} else {
			got = append(got, resp.Status) // error texts may differ
		}
		if resp.Close {
			return got
		}
	}
	return got
}

// Malformed, ambiguous and unusual requests to a delivery path get the
// same answers from the IngressListener as from net/http's server: the
// same parser decides, and the listener adds net/http's server's checks.
// Requests whose framing is ambiguous, which net/http's server takes in
// its own way, are refused by the IngressListener instead
// (TestHostile_AmbiguousFramingRefusedAndClosed).
func TestIngress_AnswersAsNetHTTPDoes(t *testing.T) {
	o := testRelay{
		lc:  relay.ListenerConfig{ReadHeaderTimeout: 2 * time.Second, MaxHeaderBytes: 8 << 10},
		cfg: relay.Config{MaxBody: 1 << 20, BodyTimeout: 2 * time.Second},
	}
	ingress := newIngressRelay(t, o)
	o.plain = true
	plain := newIngressRelay(t, o)
	plainAddr, plainCh := plain.addr, plain.cr.Channel
	ingressAddr, ingressCh := ingress.addr, ingress.cr.Channel
	const p = "POST /c/{ch}/hook HTTP/1.1\r\n"
	cases := map[string]string{
		"plain":                         p + "Host: r\r\nContent-Length: 3\r\n\r\nabc",
		"two in a row":                  p + "Host: r\r\nContent-Length: 1\r\n\r\na" + p + "Host: r\r\nContent-Length: 1\r\n\r\nb",
		"chunked":                       p + "Host: r\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1;ext=1\r\nc\r\n0\r\nTrailer: x\r\n\r\n",
		"two lengths, same":             p + "Host: r\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na",
		"two lengths, different":        p + "Host: r\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"length with a sign":            p + "Host: r\r\nContent-Length: +1\r\n\r\na",
		"negative length":               p + "Host: r\r\nContent-Length: -1\r\n\r\n",
		"bad chunk size":                p + "Host: r\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
		"gzip coding":                   p + "Host: r\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
		"space before colon":            p + "Host: r\r\nContent-Length : 1\r\n\r\na",
		"no Host":                       p + "Content-Length: 1\r\n\r\na",
		"two Hosts":                     p + "Host: a\r\nHost: b\r\nContent-Length: 1\r\n\r\na",
		"bad Host":                      p + "Host: a b\r\nContent-Length: 1\r\n\r\na",
		"empty Host":                    p + "Host:\r\nContent-Length: 1\r\n\r\na",
		"empty Host, large header":      p + "Host:\r\nX-Big: " + strings.Repeat("x", 6000) + "\r\nContent-Length: 1\r\n\r\na",
		"control in a value":            p + "Host: r\r\nX-A: a\x01b\r\nContent-Length: 1\r\n\r\na",
		"NUL in a value":                p + "Host: r\r\nX-A: a\x00b\r\nContent-Length: 1\r\n\r\na",
		"HTTP/1.0":                      "POST /c/{ch}/hook HTTP/1.0\r\nContent-Length: 1\r\n\r\na",
		"HTTP/1.0 keep-alive":           "POST /c/{ch}/hook HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\na",
		"HTTP/1.2":                      "POST /c/{ch}/hook HTTP/1.2\r\nHost: r\r\nContent-Length: 1\r\n\r\na",
		"HTTP/2.0":                      "POST /c/{ch}/hook HTTP/2.0\r\nHost: r\r\nContent-Length: 1\r\n\r\na",
		"HTTP/3":                        "POST /c/{ch}/hook HTTP/3\r\nHost: r\r\n\r\n",
		"no version":                    "POST /c/{ch}/hook\r\nHost: r\r\n\r\n",
		"lower-case method":             "post /c/{ch}/hook HTTP/1.1\r\nHost: r\r\nContent-Length: 1\r\n\r\na",
		"Connection: close":             p + "Host: r\r\nConnection: close\r\nContent-Length: 1\r\n\r\na" + p + "Host: r\r\nContent-Length: 1\r\n\r\nb",
		"Expect 100-continue":           p + "Host: r\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na",
		"Expect empty":                  p + "Host: r\r\nExpect:\r\nContent-Length: 1\r\n\r\na",
		"Expect twice":                  p + "Host: r\r\nExpect: 200-ok\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na",
		"Expect other":                  p + "Host: r\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\na",
		"unknown channel":               "POST /c/0123456789abcdef0123456789abcdef/ HTTP/1.1\r\nHost: r\r\nContent-Length: 1\r\n\r\na",
		"unknown channel, then one":     "POST /c/0123456789abcdef0123456789abcdef/ HTTP/1.1\r\nHost: r\r\nContent-Length: 3\r\n\r\nabc" + p + "Host: r\r\nContent-Length: 1\r\n\r\nb",
		"unknown channel, chunked":      "POST /c/0123456789abcdef0123456789abcdef/ HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + p + "Host: r\r\nContent-Length: 1\r\n\r\nb",
		"unknown channel, 100-continue": "POST /c/0123456789abcdef0123456789abcdef/ HTTP/1.1\r\nHost: r\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
		"unknown channel, large body":   "POST /c/0123456789abcdef0123456789abcdef/ HTTP/1.1\r\nHost: r\r\nContent-Length: 400000\r\n\r\n" + strings.Repeat("x", 400000) + p + "Host: r\r\nContent-Length: 1\r\n\r\nb",
		"body over the limit":           p + "Host: r\r\nContent-Length: 2000000\r\n\r\n" + strings.Repeat("x", 1000),
		"headers over the limit":        p + "Host: r\r\nX-Big: " + strings.Repeat("x", 20<<10) + "\r\n\r\n",
		"empty lines before":            "\r\n\r\n" + p + "Host: r\r\nContent-Length: 1\r\n\r\na",
		"query and fragment":            "POST /c/{ch}/hook?a=1&b=%20#frag HTTP/1.1\r\nHost: r\r\nContent-Length: 1\r\n\r\na",
		"escaped slash in path":         "POST /c/{ch}/a%2Fb HTTP/1.1\r\nHost: r\r\nContent-Length: 1\r\n\r\na",
		"GET":                           "GET /c/{ch}/hook HTTP/1.1\r\nHost: r\r\n\r\n",
		"HEAD":                          "HEAD /c/{ch}/hook HTTP/1.1\r\nHost: r\r\n\r\n" + p + "Host: r\r\nContent-Length: 1\r\n\r\na",
		"upgrade asked":                 p + "Host: r\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 1\r\n\r\na",
		"delivery then API":             p + "Host: r\r\nContent-Length: 1\r\n\r\naGET /healthz HTTP/1.1\r\nHost: r\r\n\r\n",
		"absolute form":                 "POST http://r/c/{ch}/hook HTTP/1.1\r\nHost: r\r\nContent-Length: 1\r\n\r\na",
		"after POST, CRLF then one":     p + "Host: r\r\nContent-Length: 1\r\n\r\na\r\n" + p + "Host: r\r\nContent-Length: 1\r\n\r\nb",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			want := exchange(t, plainAddr, strings.ReplaceAll(raw, "{ch}", plainCh))
			got := exchange(t, ingressAddr, strings.ReplaceAll(raw, "{ch}", ingressCh))
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("IngressListener answered %q, net/http's server %q", got, want)
			}
		})
	}
}
