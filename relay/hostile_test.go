package relay_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
	"github.com/devhook/devhook/relay/wire"
)

// What the relay answers to a sender on the open internet that means it
// harm: raw TCP senders that stall, lie about their bodies, climb out of
// the agent's path or try to smuggle a second request. docs/RELIABILITY.md
// ("Hostile input") lists them with these tests.

// modes are the two ways a relay serves deliveries: through its own
// IngressListener (devhook relay without TLS) and through net/http's
// server (TLS, and a relay embedded elsewhere).
var modes = []struct {
	name  string
	plain bool
}{{"ingress-listener", false}, {"net-http", true}}

// seenBodies records the bodies the agent of an ingressRelay was given.
type seenBodies struct {
	mu     sync.Mutex
	bodies []string
}

func (s *seenBodies) answer(body []byte) (int, http.Header, []byte) {
	s.mu.Lock()
	s.bodies = append(s.bodies, string(body))
	s.mu.Unlock()
	return 200, http.Header{"Content-Type": {"text/plain"}}, body
}

func (s *seenBodies) has(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.bodies {
		if strings.Contains(b, sub) {
			return true
		}
	}
	return false
}

// stall opens a connection that declares a body of declared bytes for
// channel, sends ten of them and goes silent.
func stall(t *testing.T, addr, channel string, declared int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /c/%s/hook HTTP/1.1\r\nHost: relay\r\nContent-Length: %d\r\n\r\n0123456789", channel, declared)
	return c
}

// postRaw sends one delivery of body to path on a new connection and
// returns its answer.
func postRaw(t *testing.T, addr, path string, body []byte, extra ...string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute)) // a 10 MiB body on a busy machine, under -race
	h := strings.Join(append([]string{"Host: relay"}, extra...), "\r\n")
	go fmt.Fprintf(c, "POST %s HTTP/1.1\r\n%s\r\nContent-Length: %d\r\n\r\n%s", path, h, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// 16 connections over 4 channels that declare 8 MiB, send 10 bytes and
// stall hold 160 bytes of the in-flight budgets, not 128 MiB: honest
// deliveries to those channels and to others go through, up to the
// largest body. The stalled senders are not cut here (no stall bound, a
// body timeout longer than the test however slow the machine): what they
// hold is what is looked at; TestHostile_StalledSendersCut cuts them.
func TestHostile_StalledSendersHoldWhatTheySent(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			// The relay's budgets: 10 MiB bodies, 32 MiB a channel, 128 MiB in all.
			r := newIngressRelay(t, testRelay{plain: m.plain, cfg: relay.Config{BodyStall: -1, BodyMinRate: -1, BodyTimeout: 10 * time.Minute}})
			channels := []string{r.cr.Channel}
			for range 4 {
				cr, err := r.srv.OpenChannel(nil)
				if err != nil {
					t.Fatal(err)
				}
				channels = append(channels, cr.Channel)
			}
			for i := range 16 {
				stall(t, r.addr, channels[i%4], 8<<20)
			}
			relaytest.WaitFor(t, "160 bytes held", func() bool { _, n := r.srv.Inflight(""); return n == 160 })
			for _, n := range []int{1500, 1 << 20, wire.DefaultMaxBody} {
				body := bytes.Repeat([]byte("h"), n)
				for i, ch := range channels {
					want := http.StatusAccepted // no agent: queued
					if i == 0 {
						want = http.StatusOK
					}
					if resp := postRaw(t, r.addr, "/c/"+ch+"/hook", body); resp.StatusCode != want {
						t.Fatalf("a %d-byte delivery to channel %d beside 16 stalled senders: %s, want %d", n, i, resp.Status, want)
					}
				}
			}
			if held, _ := r.srv.Inflight(channels[0]); held != 40 {
				t.Fatalf("channel 0 holds %d bytes after the honest deliveries, want the stalled senders' 40", held)
			}
		})
	}
}

// sendStalled opens a connection that declares a body of declared bytes
// for channel, sends sent of them and goes silent. It returns the
// connection and a time before its last byte left: the relay read that
// byte after it.
func sendStalled(t *testing.T, addr, channel string, declared, sent int) (net.Conn, time.Time) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	fmt.Fprintf(c, "POST /c/%s/hook HTTP/1.1\r\nHost: relay\r\nContent-Length: %d\r\n\r\n", channel, declared)
	if _, err := c.Write(bytes.Repeat([]byte("s"), sent-1)); err != nil {
		t.Fatalf("a stalled sender's first bytes: %v", err)
	}
	before := time.Now()
	if _, err := c.Write([]byte("s")); err != nil {
		t.Fatalf("a stalled sender's last byte: %v", err)
	}
	return c, before
}

// cutAnswer reads the answer of a sender the relay cuts, and how long
// after since it came.
func cutAnswer(t *testing.T, c net.Conn, since time.Time) (*http.Response, string, time.Duration) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a sender that stalled, %s after its last byte: %v", time.Since(since), err)
	}
	took := time.Since(since)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), took
}

// The 16 senders that send 2 MiB of a larger body into one
// channel (its whole 32 MiB budget) and go silent are each answered 408
// once no byte came for the stall bound (--body-stall), long before the
// body timeout: the bytes they held are given back, and an honest
// delivery to the channel gets its answer. Before, they held the
// channel (429) until the body timeout.
func TestHostile_StalledSendersCut(t *testing.T) {
	const stall = 2 * time.Second
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			// A body timeout the test would see: the stall bound is what cuts.
			r := newIngressRelay(t, testRelay{plain: m.plain, cfg: relay.Config{BodyStall: stall, BodyTimeout: 3 * time.Minute}})
			type sender struct {
				c    net.Conn
				last time.Time
			}
			senders := make(chan sender, 16)
			for range 16 {
				go func() {
					c, last := sendStalled(t, r.addr, r.cr.Channel, 4<<20, 2<<20)
					senders <- sender{c, last}
				}()
			}
			for range 16 {
				s := <-senders
				resp, body, took := cutAnswer(t, s.c, s.last)
				if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "no byte of the body arrived for 2s") {
					t.Fatalf("a stalled sender got %s %q, want 408 for its stall", resp.Status, body)
				}
				if took < stall || took > time.Minute {
					t.Fatalf("a stalled sender was cut %s after its last byte, want %s (and well before the body timeout)", took, stall)
				}
				if !resp.Close {
					t.Fatalf("408 without Connection: close: %v", resp.Header)
				}
			}
			relaytest.WaitFor(t, "no bytes held", func() bool { _, n := r.srv.Inflight(""); return n == 0 })
			if resp := postRaw(t, r.addr, "/c/"+r.cr.Channel+"/hook", bytes.Repeat([]byte("h"), 1500)); resp.StatusCode != http.StatusOK {
				t.Fatalf("an honest delivery after the stalled senders were cut: %s, want 200", resp.Status)
			}
		})
	}
}

// A sender that sent 1 MiB and then crawls (a byte every half second,
// never silent for the stall bound) is answered 408 at the end of its
// first window after the grace that brought less than --body-min-rate;
// an honest slow sender, well above the minimum and with pauses under
// the stall bound, is not cut.
func TestHostile_CrawlingSendersCut(t *testing.T) {
	const window = 2 * time.Second
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := newIngressRelay(t, testRelay{plain: m.plain, cfg: relay.Config{
				BodyStall: 3 * time.Second, BodyMinRate: 8 << 10, BodyRateWindow: window, BodyTimeout: 3 * time.Minute}})
			// The crawler.
			c, err := net.Dial("tcp", r.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			start := time.Now()
			fmt.Fprintf(c, "POST /c/%s/hook HTTP/1.1\r\nHost: relay\r\nContent-Length: %d\r\n\r\n%s", r.cr.Channel, 4<<20, bytes.Repeat([]byte("c"), 1<<20))
			stop := make(chan struct{})
			crawled := make(chan struct{})
			go func() {
				defer close(crawled)
				tick := time.NewTicker(500 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := c.Write([]byte("c")); err != nil {
							return
						}
					}
				}
			}()
			defer func() { close(stop); <-crawled }()
			// The honest slow sender: 16 KiB every 100 ms, 20 times the
			// minimum, 640 KiB in about 4 s.
			honest := make(chan *http.Response, 1)
			go func() {
				pr, pw := io.Pipe()
				go func() {
					tick := time.NewTicker(100 * time.Millisecond)
					defer tick.Stop()
					for range 40 {
						<-tick.C
						if _, err := pw.Write(bytes.Repeat([]byte("h"), 16<<10)); err != nil {
							return
						}
					}
					pw.Close()
				}()
				req, _ := http.NewRequest(http.MethodPost, "http://"+r.addr+"/c/"+r.cr.Channel+"/slow", pr)
				req.ContentLength = 40 * 16 << 10
				resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
				if err != nil {
					t.Errorf("the honest slow sender: %v", err)
					pr.CloseWithError(err)
					honest <- nil
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				honest <- resp
			}()
			resp, body, took := cutAnswer(t, c, start)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "under the relay's minimum of 8192 bytes/s") {
				t.Fatalf("the crawler got %s %q, want 408 for its rate", resp.Status, body)
			}
			if took < 2*window || took > time.Minute {
				t.Fatalf("the crawler was cut %s after it started, want after its grace and first window (%s), well before the body timeout", took, 2*window)
			}
			if resp := <-honest; resp == nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("the honest slow sender got %v, want 200", resp)
			}
			relaytest.WaitFor(t, "no bytes held", func() bool { _, n := r.srv.Inflight(""); return n == 0 })
		})
	}
}

// A header that trickles in, a byte every 50 ms and never ending, is cut
// at the header timeout from its first byte, however its bytes keep
// coming (answered 400, as net/http's server answers, and closed): it
// never reaches a body, so it holds no byte of the budgets.
func TestHostile_TricklingHeaderCut(t *testing.T) {
	const headerTimeout = time.Second
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := newIngressRelay(t, testRelay{plain: m.plain, lc: relay.ListenerConfig{ReadHeaderTimeout: headerTimeout}})
			// Before the dial: the relay's header clock starts when it
			// accepts the connection, which may be before the dial
			// returns (a loaded machine cut it 5 ms short of the dial's
			// return plus a second).
			start := time.Now()
			c, br := r.dial(t)
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			stop := make(chan struct{})
			trickled := make(chan int)
			go func() {
				n := 0
				defer func() { trickled <- n }()
				head := []byte("POST /c/" + r.cr.Channel + "/hook HTTP/1.1\r\nHost: relay\r\nX-Pad: ")
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					b := byte('p')
					if n < len(head) {
						b = head[n]
					}
					if _, err := c.Write([]byte{b}); err != nil {
						return
					}
					n++
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
			answer, err := io.ReadAll(br) // until the relay closes the connection
			took := time.Since(start)
			close(stop)
			n := <-trickled
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the trickling header's connection is still open: %v", err)
			} // else EOF, or a reset: the sender was still writing when it closed
			if len(answer) > 0 && !bytes.HasPrefix(answer, []byte("HTTP/1.1 400 ")) {
				t.Fatalf("a header that never ends got %q, want nothing or 400 (as net/http's server answers)", answer)
			}
			if took < headerTimeout || took > time.Minute {
				t.Fatalf("the trickling header was cut after %s (%d bytes), want %s", took, n, headerTimeout)
			}
			if _, held := r.srv.Inflight(""); held != 0 {
				t.Fatalf("a trickling header holds %d bytes of the budgets", held)
			}
		})
	}
}

// Every request of a kept-alive connection goes through the framing
// checks of its first: a request with ambiguous framing (or a dot
// segment) sent as the 2nd or 3rd of a connection, after /healthz, a
// delivery or a channel API call, is refused with its connection, or
// never read because the answer before it ended the connection (a
// request net/http's server answers ends its connection); it never
// reaches the agent, nor does a request smuggled behind it. Before,
// a connection handed over to net/http's server by its first request
// had the rest of its requests parsed by that server alone.
func TestHostile_KeptAliveRequestsChecked(t *testing.T) {
	var seen seenBodies
	r := newIngressRelay(t, testRelay{answer: seen.answer})
	ch := r.cr.Channel
	p := "POST /c/" + ch
	prefixes := map[string][]string{
		"healthz":          {"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"},
		"delivery":         {r.post("first")},
		"open a channel":   {"POST /v1/channels HTTP/1.1\r\nHost: relay\r\nContent-Length: 0\r\n\r\n"},
		"check a channel":  {"GET /v1/channels/" + ch + " HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer " + r.cr.Token + "\r\n\r\n"},
		"metrics":          {"GET /metrics HTTP/1.1\r\nHost: relay\r\n\r\n"},
		"delivery, twice":  {r.post("first"), r.post("second")},
		"delivery, health": {r.post("first"), "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"},
		"delivery, open":   {r.post("first"), "POST /v1/channels HTTP/1.1\r\nHost: relay\r\nContent-Length: 0\r\n\r\n"},
	}
	// Each case's bodies carry its number in place of NNNN, for the agent.
	shapes := map[string]string{
		"length then chunked": p + "/hook HTTP/1.1\r\nHost: relay\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"chunked not last":    p + "/hook HTTP/1.1\r\nHost: relay\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: 9\r\n\r\nMARK NNNN",
		"obs-fold":            p + "/hook HTTP/1.1\r\nHost: relay\r\nX-A: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\nMARK NNNN",
		"bare LF":             p + "/hook HTTP/1.1\nHost: relay\nContent-Length: 9\n\nMARK NNNN",
		"dot segments":        p + "/x/../../escape HTTP/1.1\r\nHost: relay\r\nContent-Length: 9\r\n\r\nMARK NNNN",
	}
	smuggled := p + "/smuggled HTTP/1.1\r\nHost: relay\r\nContent-Length: 13\r\n\r\nSMUGGLED NNNN"
	n := 0
	for pname, prefix := range prefixes {
		for sname, shape := range shapes {
			for _, pipelined := range []bool{true, false} {
				n++
				id := fmt.Sprintf("%04d", n)
				shape, smuggled := strings.ReplaceAll(shape, "NNNN", id), strings.ReplaceAll(smuggled, "NNNN", id)
				t.Run(fmt.Sprintf("%s/%s/pipelined=%v", pname, sname, pipelined), func(t *testing.T) {
					c, br := r.dial(t)
					if pipelined {
						go io.WriteString(c, strings.Join(prefix, "")+shape+smuggled)
					}
					open := true // the connection goes on after the prefix's answers
					for i, req := range prefix {
						if !pipelined {
							io.WriteString(c, req)
						}
						resp, _ := readAnswer(t, br, strings.Fields(req)[0])
						if resp.StatusCode >= 300 {
							t.Fatalf("request %d of the prefix: %s", i+1, resp.Status)
						}
						open = !resp.Close
					}
					if !pipelined {
						io.WriteString(c, shape+smuggled) // fails, or is never read, if the connection ended
					}
					resp, err := http.ReadResponse(br, nil)
					switch {
					case err != nil: // the connection ended: nothing read
						if open {
							t.Fatalf("no answer (%v) on a connection the prefix's answer kept open", err)
						}
					case resp.StatusCode < 400 || !resp.Close:
						t.Fatalf("the request after the prefix was served: %s %v", resp.Status, resp.Header)
					default:
						io.Copy(io.Discard, resp.Body)
						if b, err := br.ReadByte(); err == nil {
							t.Fatalf("the connection went on after %s (%q)", resp.Status, b)
						}
					}
					if seen.has("MARK "+id) || seen.has("SMUGGLED "+id) {
						t.Fatal("the request after the prefix, or one smuggled behind it, reached the agent")
					}
				})
			}
		}
	}
}

// A flood of whole bodies waiting for their agent still meets the
// budgets as designed: 429 beyond a channel's bound, 503 beyond the
// relay's, both with Retry-After, and a channel with room goes on.
func TestHostile_FloodMeetsTheBudgets(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := newIngressRelay(t, testRelay{plain: m.plain,
				cfg:    relay.Config{MaxBody: 1000, MaxChannelInflight: 3000, MaxInflight: 5000, ResponseTimeout: time.Minute},
				answer: func([]byte) (int, http.Header, []byte) { return 0, nil, nil }, // never answers
			})
			// A second channel whose agent takes deliveries and never answers.
			cr2, err := r.srv.OpenChannel(nil)
			if err != nil {
				t.Fatal(err)
			}
			conn2, err := relayclient.Dial(t.Context(), relayclient.DialConfig{RelayURL: r.hs.URL, Credentials: cr2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn2.Close() })
			cr3, err := r.srv.OpenChannel(nil)
			if err != nil {
				t.Fatal(err)
			}
			// flood sends n whole 1000-byte bodies to channel at once and
			// returns the answers that come.
			flood := func(channel string, n int) <-chan *http.Response {
				answers := make(chan *http.Response, n)
				for range n {
					c, err := net.Dial("tcp", r.addr)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { c.Close() })
					fmt.Fprintf(c, "POST /c/%s/hook HTTP/1.1\r\nHost: relay\r\nContent-Length: 1000\r\n\r\n%s", channel, bytes.Repeat([]byte("f"), 1000))
					go func() {
						if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
							answers <- resp
						}
					}()
				}
				return answers
			}
			expect := func(answers <-chan *http.Response, n, status int) {
				t.Helper()
				deadline := time.After(10 * time.Second)
				for range n {
					select {
					case resp := <-answers:
						if resp.StatusCode != status || resp.Header.Get("Retry-After") != "1" {
							t.Fatalf("answer %s %v, want %d with Retry-After", resp.Status, resp.Header, status)
						}
					case <-deadline:
						t.Fatalf("fewer than %d answers %d", n, status)
					}
				}
			}
			// 8 bodies at once into a channel bounded at 3000 bytes: 3 wait
			// for the agent, 5 are refused 429.
			expect(flood(r.cr.Channel, 8), 5, http.StatusTooManyRequests)
			relaytest.WaitFor(t, "3000 bytes held", func() bool { n, _ := r.srv.Inflight(r.cr.Channel); return n == 3000 })
			if resp := postRaw(t, r.addr, "/c/"+cr3.Channel+"/hook", []byte("x")); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("another channel beside a full one: %s, want 202", resp.Status)
			}
			// 3 more into the second channel: 2 wait, and the relay's 5000
			// bytes are held; the third is refused 503, and so is any
			// other channel's delivery.
			expect(flood(cr2.Channel, 3), 1, http.StatusServiceUnavailable)
			relaytest.WaitFor(t, "5000 bytes held", func() bool { _, n := r.srv.Inflight(""); return n == 5000 })
			if resp := postRaw(t, r.addr, "/c/"+cr3.Channel+"/hook", []byte("x")); resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("a delivery to a relay full of bodies: %s, want 503", resp.Status)
			}
		})
	}
}

// A declared body over MaxBody is 413 before a byte of it is read (and
// no 100 Continue invites it); a chunked one as soon as its total passes
// MaxBody, even when its sender then stalls. Either ends the connection.
func TestHostile_BodiesOverMaxBodyRefusedAtOnce(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := newIngressRelay(t, testRelay{plain: m.plain, cfg: relay.Config{MaxBody: 1000, BodyTimeout: time.Minute}})
			p := "POST /c/" + r.cr.Channel + "/hook HTTP/1.1\r\nHost: relay\r\n"
			for name, raw := range map[string]string{
				"declared":                p + "Content-Length: 1001\r\n\r\n",
				"declared, 100-continue":  p + "Content-Length: 1001\r\nExpect: 100-continue\r\n\r\n",
				"declared, huge":          p + "Content-Length: 99999999999999\r\n\r\nabc",
				"chunked, one chunk":      p + "Transfer-Encoding: chunked\r\n\r\n3e9\r\n" + strings.Repeat("c", 1001),
				"chunked, passes by one":  p + "Transfer-Encoding: chunked\r\n\r\n3e8\r\n" + strings.Repeat("c", 1000) + "\r\n1\r\nc\r\n",
				"chunked, declares large": p + "Transfer-Encoding: chunked\r\n\r\nffffffff\r\n" + strings.Repeat("c", 1001),
			} {
				t.Run(name, func(t *testing.T) {
					c, br := r.dial(t)
					io.WriteString(c, raw) // and stalls: the body timeout is a minute
					resp, _ := readAnswer(t, br, http.MethodPost)
					if resp.StatusCode != http.StatusRequestEntityTooLarge {
						t.Fatalf("got %s, want 413", resp.Status)
					}
					if _, err := br.ReadByte(); err != io.EOF {
						t.Fatalf("the connection is still open after 413: %v", err)
					}
					relaytest.WaitFor(t, "no bytes held", func() bool { _, n := r.srv.Inflight(""); return n == 0 })
				})
			}
		})
	}
}

// A delivery path with a dot segment, raw or percent-encoded in any mix,
// or formed with encoded slashes, is refused with 400 and never reaches
// the agent; paths that only look alike go through.
func TestHostile_DotSegmentsRefused(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			var seen seenBodies
			r := newIngressRelay(t, testRelay{plain: m.plain, answer: seen.answer})
			ch := "/c/" + r.cr.Channel
			for _, p := range []string{
				"/x/../../../escape",
				"/%2e%2e/%2e%2e/escape",
				"/%2E%2e/escape",
				"/.%2e/escape",
				"/x/%2e/y",
				"/./x",
				"/..",
				"/x/..",
				"/x%2f..%2f..%2fescape",
				"/x%2F%2e%2e%2Fescape",
				"/x%5c..%5cescape",
				`/x\..\escape`,
				"/%252e%252e/escape",
				"/..;/escape",
			} {
				marker := "hostile " + p
				if resp := postRaw(t, r.addr, ch+p, []byte(marker)); resp.StatusCode != http.StatusBadRequest {
					t.Errorf("POST %s: %s, want 400", p, resp.Status)
				}
				if seen.has(marker) {
					t.Errorf("POST %s reached the agent", p)
				}
			}
			for _, p := range []string{"/hook", "/a..b/c.", "/.well-known/x", "/...", "/%2e%2e%2e", "/a%2Fb", ""} {
				if resp := postRaw(t, r.addr, ch+p, []byte("fine "+p)); resp.StatusCode != http.StatusOK {
					t.Errorf("POST %s: %s, want 200", p, resp.Status)
				}
			}
		})
	}
}

// A request whose framing a server or proxy in front of the relay could
// read otherwise is answered and its connection closed (RFC 9112 sections
// 2.2, 5.2, 6.1 and 6.3): nothing that follows it is taken as a request,
// so no second request can be smuggled behind it. The relay's own
// ingress refuses them all; what net/http's server takes in its own way
// is said in docs/RELIABILITY.md. So is the first request of a connection
// that is not a delivery, before it is handed to that server.
func TestHostile_AmbiguousFramingRefusedAndClosed(t *testing.T) {
	var seen seenBodies
	r := newIngressRelay(t, testRelay{answer: seen.answer})
	ch := r.cr.Channel
	p := "POST /c/" + ch + "/hook HTTP/1.1\r\n"
	smuggled := "POST /c/" + ch + "/smuggled HTTP/1.1\r\nHost: relay\r\nContent-Length: 8\r\n\r\nSMUGGLED"
	big := "X-Big: " + strings.Repeat("b", 10<<10) + "\r\n" // a header larger than the read buffer
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"length then chunked", p + "Host: relay\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"chunked then length", p + "Host: relay\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", 400},
		{"length and identity", p + "Host: relay\r\nTransfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello", 400},
		{"length and chunked, large header", p + "Host: relay\r\n" + big + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"chunked not last", p + "Host: relay\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400},
		{"no chunked", p + "Host: relay\r\nTransfer-Encoding: gzip\r\n\r\n0\r\n\r\n", 400},
		{"chunked twice", p + "Host: relay\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400},
		{"chunked in two fields", p + "Host: relay\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"empty coding", p + "Host: relay\r\nTransfer-Encoding:\r\nContent-Length: 0\r\n\r\n", 400},
		{"gzip in its own field, then chunked", p + "Host: relay\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501},
		{"gzip then chunked", p + "Host: relay\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
		{"chunked in HTTP/1.0", "POST /c/" + ch + "/hook HTTP/1.0\r\nHost: relay\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"two lengths, different", p + "Host: relay\r\nContent-Length: 8\r\nContent-Length: 0\r\n\r\n", 400},
		{"a length list", p + "Host: relay\r\nContent-Length: 0, 8\r\n\r\n", 400},
		{"length with a sign", p + "Host: relay\r\nContent-Length: +0\r\n\r\n", 400},
		{"bad chunk size", p + "Host: relay\r\nTransfer-Encoding: chunked\r\n\r\n0x0\r\n\r\n", 400},
		{"chunk size with a bare LF", p + "Host: relay\r\nTransfer-Encoding: chunked\r\n\r\n0\n\r\n", 400},
		{"chunk size over 64 bits", p + "Host: relay\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", 400},
		{"chunk not ended by CRLF", p + "Host: relay\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXX0\r\n\r\n", 400},
		{"bare LF ends the header", p + "Host: relay\r\nContent-Length: 0\n\n", 400},
		{"bare LF ends a field", p + "Host: relay\nContent-Length: 0\r\n\r\n", 400},
		{"bare LF ends the request line", "POST /c/" + ch + "/hook HTTP/1.1\nHost: relay\r\nContent-Length: 0\r\n\r\n", 400},
		{"bare CR in a field", p + "Host: relay\r\nX-A: a\rContent-Length: 0\r\n\r\n", 400},
		{"obs-fold", p + "Host: relay\r\nX-A: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", 400},
		{"obs-fold of Transfer-Encoding", p + "Host: relay\r\nTransfer-Encoding:\r\n\tchunked\r\n\r\n0\r\n\r\n", 400},
		{"obs-fold after a large header", p + "Host: relay\r\n" + big + "X-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", 400},
		// Not a delivery: the first request of a connection is looked at
		// before it is handed to net/http's server.
		{"length and chunked to the API", "POST /v1/channels HTTP/1.1\r\nHost: relay\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"bare LF to /healthz", "GET /healthz HTTP/1.1\nHost: relay\n\n", 400},
		{"obs-fold to /metrics", "GET /metrics HTTP/1.1\r\nHost: relay\r\nX-A: a\r\n b\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := r.dial(t)
			go io.WriteString(c, tc.raw+smuggled)
			resp, _ := readAnswer(t, br, http.MethodPost)
			if resp.StatusCode != tc.status {
				t.Fatalf("got %s, want %d", resp.Status, tc.status)
			}
			if !resp.Close {
				t.Fatalf("answered without Connection: close: %v", resp.Header)
			}
			if b, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("the connection went on after the answer (%q, %v)", b, err)
			}
		})
	}
	// Nothing behind a refused request reached the agent, and a request
	// with a large header, on its own, goes through twice on one
	// connection.
	if seen.has("SMUGGLED") {
		t.Fatal("a request smuggled behind a refused one reached the agent")
	}
	c, br := r.dial(t)
	for i := range 2 {
		fmt.Fprintf(c, "%sHost: relay\r\n%sContent-Length: 5\r\n\r\nlarge", p, big)
		if resp, body := readAnswer(t, br, http.MethodPost); resp.StatusCode != 200 || body != "large" {
			t.Fatalf("delivery %d with a large header: %s %q", i, resp.Status, body)
		}
	}
}
