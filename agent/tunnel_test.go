package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
	"github.com/devhook/devhook/signature"
	"github.com/devhook/devhook/storage"
)

const secret = "whsec_tunnel_test"

// seen is one request as the receiver got it.
type seen struct {
	Method     string
	RequestURI string
	Header     http.Header
	Body       []byte
}

// recorder is a local receiver that records every request and answers
// with whatever answer returns.
type recorder struct {
	mu     sync.Mutex
	got    []seen
	notify chan struct{}
	answer func(w http.ResponseWriter, r *http.Request)
}

func newRecorder(t testing.TB) (*recorder, *httptest.Server) {
	rec := &recorder{notify: make(chan struct{}, 1024)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("receiver: read body: %v", err)
		}
		rec.mu.Lock()
		rec.got = append(rec.got, seen{r.Method, r.RequestURI, r.Header.Clone(), b})
		answer := rec.answer
		rec.mu.Unlock()
		rec.notify <- struct{}{}
		if answer != nil {
			answer(w, r)
			return
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

func (r *recorder) requests() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// waitFor waits until the receiver has seen n requests.
func (r *recorder) waitFor(t *testing.T, n int) []seen {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if got := r.requests(); len(got) >= n {
			return got
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("receiver saw %d requests, want %d", len(r.requests()), n)
		}
	}
}

// tunnel is a relay, an agent and a store, all real, on 127.0.0.1.
type tunnel struct {
	t        testing.TB
	dir      string
	relayDB  *boltrelay.Store
	relay    *relay.Server
	relaySrv *httptest.Server
	ingress  *relay.IngressListener
	creds    wire.Credentials
	db       *storage.DB
	cfg      agent.Config

	relayMod func(*relay.Config) // applied to the relay's Config at each start

	mu      sync.Mutex
	results []agent.Result
	connect chan string
	stop    func()
}

func newTunnel(t testing.TB, forward string, mod func(*agent.Config)) *tunnel {
	t.Helper()
	return newTunnelRelay(t, forward, nil, mod)
}

// newTunnelRelay is newTunnel with relayMod applied to the relay's Config.
func newTunnelRelay(t testing.TB, forward string, relayMod func(*relay.Config), mod func(*agent.Config)) *tunnel {
	t.Helper()
	tn := &tunnel{t: t, dir: t.TempDir(), connect: make(chan string, 16), relayMod: relayMod}
	tn.startRelay()
	cr, err := tn.relay.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	tn.creds = cr
	db, err := storage.Open(filepath.Join(tn.dir, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tn.db = db
	tn.cfg = agent.Config{
		Credentials: cr, Forward: []string{forward}, Store: db, Secret: secret,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		OnResult: func(r agent.Result) {
			tn.mu.Lock()
			tn.results = append(tn.results, r)
			tn.mu.Unlock()
		},
		OnConnect: func(c agent.Connection) {
			select {
			case tn.connect <- c.PublicURL:
			default: // an agent reconnecting again and again must not block here
			}
		},
		Logf: t.Logf,
	}
	if mod != nil {
		mod(&tn.cfg)
	}
	t.Cleanup(func() {
		tn.stopAgent()
		tn.stopRelay()
		db.Close()
	})
	return tn
}

func (tn *tunnel) startRelay() {
	tn.t.Helper()
	rdb, err := boltrelay.Open(filepath.Join(tn.dir, "relay.db"), boltrelay.Config{})
	if err != nil {
		tn.t.Fatal(err)
	}
	// The relay's own heartbeat and answer timeout, not shorter ones: it
	// drops an agent it has not heard from in two heartbeats, and a large
	// delivery's frame holds the agent's answer to a ping behind it; it
	// gives up on a frame not written, or an answer not come, in
	// ResponseTimeout. A loaded machine needs the time a real link has.
	cfg := relay.Config{Store: rdb, Logf: tn.t.Logf}
	if tn.relayMod != nil {
		tn.relayMod(&cfg)
	}
	srv, err := relay.NewServer(cfg)
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.relayDB, tn.relay = rdb, srv
	tn.relaySrv = httptest.NewUnstartedServer(srv)
	tn.serveRelay(tn.relaySrv.Listener)
}

// serveRelay starts tn.relaySrv on ln as devhook relay serves: behind
// relay.LimitListener, whose connections let the relay gather frames into
// one write(2), and a relay.IngressListener, which serves deliveries.
func (tn *tunnel) serveRelay(ln net.Listener) {
	tn.ingress = relay.NewIngressListener(tn.relay, relay.LimitListener(ln, 1<<16), relay.ListenerConfig{})
	tn.relaySrv.Listener = tn.ingress
	tn.relaySrv.Start()
}

// restartRelay stops the relay and starts it again on the same address
// with the same store file.
func (tn *tunnel) restartRelay() {
	tn.t.Helper()
	addr := tn.relaySrv.Listener.Addr().String()
	tn.stopRelay()
	tn.startRelay()
	// Move the new server to the old address so the agent finds it.
	tn.relaySrv.Close()
	ln, err := listenRetry(addr)
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.relaySrv = httptest.NewUnstartedServer(tn.relay)
	tn.relaySrv.Listener.Close()
	tn.serveRelay(ln)
}

func (tn *tunnel) stopRelay() {
	if tn.relaySrv == nil {
		return
	}
	tn.relay.Close()
	tn.relaySrv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tn.ingress.Shutdown(ctx) // the deliveries in progress, for 5 s at most
	tn.relayDB.Close()
	tn.relaySrv = nil
}

func (tn *tunnel) startAgent() {
	tn.t.Helper()
	cfg := tn.cfg
	cfg.RelayURL = tn.relaySrv.URL
	ag, err := agent.New(cfg)
	if err != nil {
		tn.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	tn.stop = func() {
		cancel()
		if err := <-done; err != nil {
			tn.t.Errorf("agent.Run: %v", err)
		}
	}
	select {
	case <-tn.connect:
	case <-time.After(10 * time.Second):
		tn.t.Fatal("agent did not connect")
	}
}

func (tn *tunnel) stopAgent() {
	if tn.stop != nil {
		tn.stop()
		tn.stop = nil
	}
}

func (tn *tunnel) url(path string) string { return tn.relaySrv.URL + "/c/" + tn.creds.Channel + path }

func (tn *tunnel) do(req *http.Request) (*http.Response, []byte) {
	tn.t.Helper()
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // send none, so the test can tell none is added
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		tn.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tn.t.Fatal(err)
	}
	return resp, b
}

func (tn *tunnel) post(path string, body []byte, h http.Header) (*http.Response, []byte) {
	tn.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, tn.url(path), bytes.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	return tn.do(req)
}

func signed(body []byte) http.Header {
	return http.Header{
		"Content-Type":      {"application/json"},
		"Service-Signature": {signature.Sign(secret, time.Now(), body)},
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestTunnelBytesExact(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	tn.startAgent()

	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	cases := []struct {
		name   string
		method string
		path   string // after /c/<channel>
		body   []byte
		header http.Header
	}{
		{"json", "POST", "/", []byte(`{"event_type":"run.status"}`), nil},
		{"binary", "POST", "/bin", append(allBytes, randomBytes(4096)...), http.Header{"Content-Type": {"application/octet-stream"}}},
		{"empty", "POST", "/empty", []byte{}, nil},
		{"5 MiB", "PUT", "/big", randomBytes(5 << 20), nil},
		{"repeated headers", "POST", "/h", []byte("x"), http.Header{
			"X-Multi": {"one", "two", "three"}, "X-Empty": {""}, "Cookie": {"a=1", "b=2"},
			"User-Agent": {"service-webhooks/1"}, "Accept-Encoding": {"gzip, br"},
		}},
		{"path and query", "DELETE", "/hooks/a%2Fb/c;d?x=1&x=2&y=%20z&empty=&=odd", nil, nil},
		{"hop-by-hop dropped", "PATCH", "/p", []byte("p"), http.Header{"Connection": {"X-Drop-Me"}, "X-Drop-Me": {"1"}, "Keep-Alive": {"timeout=5"}, "X-Keep": {"1"}}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, tn.url(c.path), bytes.NewReader(c.body))
			for k, v := range c.header {
				req.Header[k] = v
			}
			resp, _ := tn.do(req)
			if resp.StatusCode != 200 {
				t.Fatalf("sender got %s", resp.Status)
			}
			got := rec.waitFor(t, i+1)[i]
			if got.Method != c.method {
				t.Errorf("method %s, want %s", got.Method, c.method)
			}
			if got.RequestURI != c.path {
				t.Errorf("request URI %q, want %q", got.RequestURI, c.path)
			}
			if !bytes.Equal(got.Body, c.body) {
				t.Errorf("body differs: got %d bytes, want %d", len(got.Body), len(c.body))
			}
			for k, v := range c.header {
				if k == "Connection" || k == "Keep-Alive" || k == "X-Drop-Me" {
					if _, ok := got.Header[k]; ok {
						t.Errorf("hop-by-hop header %s reached the receiver", k)
					}
					continue
				}
				if !slices.Equal(got.Header[k], v) {
					t.Errorf("header %s = %q, want %q", k, got.Header[k], v)
				}
			}
			if _, ok := c.header["User-Agent"]; !ok && got.Header.Get("User-Agent") != "" {
				t.Errorf("receiver saw a User-Agent the sender did not send: %q", got.Header.Get("User-Agent"))
			}
			// Recorded byte-exact too.
			id := resp.Header.Get("Devhook-Delivery")
			d, err := tn.db.Delivery(id)
			if err != nil {
				t.Fatalf("delivery %q not recorded: %v", id, err)
			}
			if !bytes.Equal(d.Body, c.body) || len(d.Attempts) != 1 || d.Attempts[0].Status != 200 {
				t.Fatalf("recorded %d bytes with %d attempts", len(d.Body), len(d.Attempts))
			}
			// Forwarded as it arrived: the delivery is what was sent.
			if a := d.Attempts[0]; a.Made != devhook.MadeAsArrived || a.Request != nil {
				t.Errorf("live forward recorded as made %q with request %+v", a.Made, a.Request)
			}
		})
	}
}

// A relay's --max-body above 10 MiB reaches the agent through the hello:
// a 16 MiB delivery goes through, live and queued, byte-exact.
func TestTunnelBodyOverTenMiB(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnelRelay(t, recv.URL, func(c *relay.Config) { c.MaxBody = 16 << 20 }, nil)
	body := randomBytes(16 << 20)

	// Queued while the agent is away, then sent by the drain.
	resp, _ := tn.post("/queued", body, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("queued: sender got %s", resp.Status)
	}
	tn.startAgent()
	got := rec.waitFor(t, 1)
	if !bytes.Equal(got[0].Body, body) {
		t.Fatalf("queued: the receiver got %d bytes, want the %d sent", len(got[0].Body), len(body))
	}
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)

	// Live: the sender gets the receiver's answer.
	resp, _ = tn.post("/live", body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("live: sender got %s", resp.Status)
	}
	got = rec.waitFor(t, 2)
	if !bytes.Equal(got[1].Body, body) {
		t.Fatalf("live: the receiver got %d bytes, want the %d sent", len(got[1].Body), len(body))
	}
	d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
	if err != nil || !bytes.Equal(d.Body, body) {
		t.Fatalf("recorded: %v", err)
	}
}

func TestTunnelPassesReceiverAnswer(t *testing.T) {
	rec, recv := newRecorder(t)
	answerBody := append([]byte("teapot\x00\xff"), randomBytes(1000)...)
	rec.answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Reply"] = []string{"a", "b"}
		w.Header().Set("Content-Type", "application/x-tea")
		w.Header().Set("Location", "/elsewhere") // a redirect-looking answer is passed, not followed
		w.WriteHeader(http.StatusTeapot)
		w.Write(answerBody)
	}
	tn := newTunnel(t, recv.URL, nil)
	tn.startAgent()
	resp, body := tn.post("/x", []byte("{}"), nil)
	if resp.StatusCode != http.StatusTeapot {
		t.Fatalf("status %d, want 418", resp.StatusCode)
	}
	if !slices.Equal(resp.Header["X-Reply"], []string{"a", "b"}) || resp.Header.Get("Content-Type") != "application/x-tea" || resp.Header.Get("Location") != "/elsewhere" {
		t.Fatalf("headers %v", resp.Header)
	}
	if !bytes.Equal(body, answerBody) {
		t.Fatalf("body differs")
	}
	// And a 3xx is not followed.
	rec.answer = func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/moved", http.StatusFound) }
	resp, _ = tn.post("/y", nil, nil)
	if resp.StatusCode != http.StatusFound || len(rec.requests()) != 2 {
		t.Fatalf("redirect: status %d after %d receiver requests", resp.StatusCode, len(rec.requests()))
	}
}

func TestTunnelVerdicts(t *testing.T) {
	for _, mode := range []string{agent.VerifyReport, agent.VerifyEnforce} {
		t.Run(mode, func(t *testing.T) {
			rec, recv := newRecorder(t)
			tn := newTunnel(t, recv.URL, func(c *agent.Config) { c.Verify = mode })
			tn.startAgent()
			body := []byte(`{"event_type":"run.status","data":{"run_id":"r1","status_v2":"queued"}}`)
			now := time.Now()
			cases := []struct {
				name, header, verdict string
				status                int
			}{
				{"valid", signature.Sign(secret, now, body), devhook.VerdictOK, 200},
				{"missing", "", devhook.VerdictMissingSignature, 401},
				{"format", "t=abc,v1=00", devhook.VerdictInvalidFormat, 401},
				{"old", signature.Sign(secret, now.Add(-6*time.Minute), body), devhook.VerdictInvalidTime, 401},
				{"future", signature.Sign(secret, now.Add(2*time.Minute), body), devhook.VerdictInvalidTime, 401},
				{"wrong secret", signature.Sign("nope", now, body), devhook.VerdictInvalidSignature, 401},
			}
			forwarded := 0
			for _, c := range cases {
				h := http.Header{}
				if c.header != "" {
					h.Set(devhook.SignatureHeader, c.header)
				}
				resp, rb := tn.post("/", body, h)
				d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
				if err != nil {
					t.Fatal(err)
				}
				if d.Verdict.Result != c.verdict || d.Verdict.Status != c.status || d.Verdict.Reason == "" {
					t.Errorf("%s: verdict %+v, want %s/%d", c.name, d.Verdict, c.verdict, c.status)
				}
				if d.Event.RunID != "r1" || d.Event.StatusV2 != "queued" {
					t.Errorf("%s: event %+v", c.name, d.Event)
				}
				if mode == agent.VerifyEnforce && c.status != 200 {
					if resp.StatusCode != c.status || strings.TrimSpace(string(rb)) != d.Verdict.Text {
						t.Errorf("%s: enforce answered %d %q, want %d %q", c.name, resp.StatusCode, rb, c.status, d.Verdict.Text)
					}
					continue
				}
				forwarded++
				if resp.StatusCode != 200 {
					t.Errorf("%s: report mode answered %d", c.name, resp.StatusCode)
				}
			}
			if n := len(rec.requests()); n != forwarded {
				t.Errorf("receiver saw %d requests, want %d", n, forwarded)
			}
		})
	}
}

func TestTunnelQueuesWhileAgentAway(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	tn.startAgent()
	tn.stopAgent()

	const n = 25
	var ids []string
	for i := range n {
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		resp, _ := tn.post("/q", body, signed(body))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %d with no agent: %s, want 202", i, resp.Status)
		}
		ids = append(ids, resp.Header.Get("Devhook-Delivery"))
	}
	tn.startAgent()
	got := rec.waitFor(t, n)
	tn.waitResults(n)
	waitStored(t, tn.db, n)

	seenBodies := map[string]int{}
	sentSig := map[string]string{}
	for _, g := range got {
		seenBodies[string(g.Body)]++
		sentSig[string(g.Body)] = g.Header.Get(devhook.SignatureHeader)
		// Queued deliveries are re-signed with a fresh t; still valid.
		v := signature.Verify(secret, g.Header.Get(devhook.SignatureHeader), g.Body, time.Now())
		if !v.OK() {
			t.Errorf("redelivered request fails verification: %s", v.Reason)
		}
	}
	for i := range n {
		if c := seenBodies[fmt.Sprintf(`{"n":%d}`, i)]; c != 1 {
			t.Errorf("delivery %d reached the receiver %d times", i, c)
		}
	}
	for _, id := range ids {
		d, err := tn.db.Delivery(id)
		if err != nil {
			t.Fatalf("delivery %s not stored: %v", id, err)
		}
		if !d.Queued || len(d.Attempts) != 1 || d.Attempts[0].Kind != devhook.AttemptRedelivery || d.Verdict.Result != devhook.VerdictOK {
			t.Errorf("delivery %s: queued=%v attempts=%d verdict=%s", id, d.Queued, len(d.Attempts), d.Verdict.Result)
			continue
		}
		// Recorded as re-signed, with the signature the receiver got.
		if a := d.Attempts[0]; a.Made != devhook.MadeResigned || !a.Resigned() || a.Request.Header.Get(devhook.SignatureHeader) != sentSig[string(d.Body)] ||
			a.Request.Header.Get("Content-Length") != strconv.Itoa(len(d.Body)) {
			t.Errorf("delivery %s: redelivery recorded as made %q with request %+v; the receiver got signature %q", id, a.Made, a.Request, sentSig[string(d.Body)])
		}
	}
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
}

func TestTunnelRelayRestartKeepsQueue(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	const n = 10
	for i := range n {
		resp, _ := tn.post("/r", []byte(fmt.Sprint(i)), nil)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("status %s, want 202", resp.Status)
		}
	}
	tn.restartRelay()
	tn.startAgent()
	got := rec.waitFor(t, n)
	waitStored(t, tn.db, n)
	if len(got) != n {
		t.Fatalf("receiver saw %d, want %d", len(got), n)
	}
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
}

func TestTunnelAgentReconnectsAfterRelayRestart(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	tn.startAgent()
	tn.restartRelay()
	select {
	case <-tn.connect:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not reconnect")
	}
	resp, _ := tn.post("/after", []byte("x"), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("after reconnect: %s", resp.Status)
	}
	rec.waitFor(t, 1)
}

func TestTunnelReceiverDown(t *testing.T) {
	_, recv := newRecorder(t)
	url := recv.URL
	recv.Close()
	tn := newTunnel(t, url, nil)
	tn.startAgent()
	resp, body := tn.post("/", []byte("x"), nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "connection refused") {
		t.Fatalf("got %s %q, want 502 naming the refused connection", resp.Status, body)
	}
	d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].Status != 0 || !strings.Contains(d.Attempts[0].Error, "connection refused") {
		t.Fatalf("attempt %+v", d.Attempts)
	}
}

func TestTunnelSlowRequestDoesNotStallOthers(t *testing.T) {
	rec, recv := newRecorder(t)
	release := make(chan struct{})
	rec.answer = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
	}
	tn := newTunnel(t, recv.URL, nil)
	tn.startAgent()
	slow := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", tn.url("/slow"), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	rec.waitFor(t, 1)
	for range 5 {
		if resp, _ := tn.post("/fast", nil, nil); resp.StatusCode != 200 {
			t.Fatalf("fast request behind a slow one: %s", resp.Status)
		}
	}
	close(release)
	if s := <-slow; s != 200 {
		t.Fatalf("slow request: %d", s)
	}
}

func TestRelayRejects(t *testing.T) {
	_, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	// Unknown channel.
	resp, err := http.Post(tn.relaySrv.URL+"/c/0123456789abcdef0123456789abcdef/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown channel: %s", resp.Status)
	}
	// Wrong token.
	bad := tn.creds
	bad.Token = "wrong"
	_, err = relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: tn.relaySrv.URL, Credentials: bad})
	if !errors.Is(err, relayclient.ErrRejected) || !strings.Contains(err.Error(), "wrong agent token") {
		t.Fatalf("wrong token: %v", err)
	}
	// Over the body limit, told by Content-Length and by a chunked body.
	big := make([]byte, wire.DefaultMaxBody+1)
	resp, _ = tn.post("/", big, nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %s", resp.Status)
	}
	req, _ := http.NewRequest("POST", tn.url("/"), io.MultiReader(bytes.NewReader(big)))
	req.ContentLength = -1
	resp, _ = tn.do(req)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized chunked body: %s", resp.Status)
	}
	if n, _ := tn.relayDB.QueueLen(tn.creds.Channel); n != 0 {
		t.Fatalf("rejected deliveries were queued: %d", n)
	}
}

func TestRelayTimesOutSilentAgent(t *testing.T) {
	// An agent that connects and never answers.
	_, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	rdb := tn.relayDB
	srv, err := relay.NewServer(relay.Config{Store: rdb, ResponseTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	conn, err := relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: hs.URL, Credentials: tn.creds})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := http.Post(hs.URL+"/c/"+tn.creds.Channel+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("silent agent: %s, want 504", resp.Status)
	}
}

// waitResults waits until the agent has handled n deliveries.
func (tn *tunnel) waitResults(n int) {
	tn.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		tn.mu.Lock()
		c := len(tn.results)
		tn.mu.Unlock()
		if c >= n {
			return
		}
		if time.Now().After(deadline) {
			tn.t.Fatalf("agent handled %d deliveries, want %d", c, n)
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronising
	}
}

func waitStored(t *testing.T, db *storage.DB, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := db.Count()
		if err != nil {
			t.Fatal(err)
		}
		if c == n {
			return
		}
		if c > n || time.Now().After(deadline) {
			t.Fatalf("stored %d deliveries, want %d", c, n)
		}
		time.Sleep(5 * time.Millisecond) // polling a store, not synchronising
	}
}

func waitQueueEmpty(t *testing.T, db *boltrelay.Store, channel string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := db.QueueLen(channel)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay queue still holds %d deliveries", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// listenRetry listens on addr, retrying briefly while the old listener's
// port is released.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for range 100 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// A delivery the agent recorded and forwarded, whose ack the relay never
// got, comes again: it is acknowledged without a second forward.
func TestTunnelRedeliveryIsNotForwardedTwice(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	resp, _ := tn.post("/once", []byte("x"), nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %s", resp.Status)
	}
	id := resp.Header.Get("Devhook-Delivery")
	queued, err := tn.relayDB.Queued(tn.creds.Channel, "", 10)
	if err != nil || len(queued) != 1 {
		t.Fatalf("queue: %v %d", err, len(queued))
	}
	// As if an earlier agent had handled it and died before its ack.
	if _, err := tn.db.PutDelivery(queued[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.db.AddAttempt(id, devhook.Attempt{Kind: devhook.AttemptRedelivery, Status: 204, Target: recv.URL}); err != nil {
		t.Fatal(err)
	}
	tn.startAgent()
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	tn.waitResults(1)
	if n := len(rec.requests()); n != 0 {
		t.Fatalf("receiver saw the delivery %d more times", n)
	}
	d, err := tn.db.Delivery(id)
	if err != nil || len(d.Attempts) != 1 {
		t.Fatalf("delivery: %v, %d attempts", err, len(d.Attempts))
	}
	if !tn.results[0].Duplicate {
		t.Fatal("result not flagged as duplicate")
	}
}

// A redelivered id whose earlier forward got no answer is forwarded again.
func TestTunnelRedeliveryAfterFailedForward(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	resp, _ := tn.post("/again", []byte("y"), nil)
	id := resp.Header.Get("Devhook-Delivery")
	queued, err := tn.relayDB.Queued(tn.creds.Channel, "", 10)
	if err != nil || len(queued) != 1 {
		t.Fatalf("queue: %v %d", err, len(queued))
	}
	tn.db.PutDelivery(queued[0])
	tn.db.AddAttempt(id, devhook.Attempt{Kind: devhook.AttemptRedelivery, Error: "canceled: devhook is stopping"})
	tn.startAgent()
	got := rec.waitFor(t, 1)
	if string(got[0].Body) != "y" {
		t.Fatalf("receiver got %q", got[0].Body)
	}
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	tn.waitResults(1)
	if d, _ := tn.db.Delivery(id); len(d.Attempts) != 2 || d.Attempts[1].Status != 200 {
		t.Fatalf("attempts %+v", d.Attempts)
	}
}

// The sender gets the receiver's answer as it was: a body the receiver
// sent without a Content-Type comes back without one, not with a type the
// relay guessed from the bytes.
func TestAnswerWithoutContentTypeKeepsNone(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // net/http sends none
		w.Write([]byte("<html><body>taken</body></html>"))
	}))
	defer recv.Close()
	tn := newTunnel(t, recv.URL, func(c *agent.Config) { c.Verify = agent.VerifyOff })
	tn.startAgent()
	resp, err := http.Post(tn.url("/hook"), "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "<html><body>taken</body></html>" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if ct, ok := resp.Header["Content-Type"]; ok {
		t.Errorf("the sender got Content-Type %q, which the receiver did not send", ct)
	}
}

// A relay whose --max-body is small still takes the receiver's answers up
// to the agent's limit (10 MiB): its agents' frames carry answers, not
// only deliveries.
func TestTunnelLargeAnswerThroughASmallMaxBody(t *testing.T) {
	rec, recv := newRecorder(t)
	answer := randomBytes(4 << 20)
	rec.answer = func(w http.ResponseWriter, r *http.Request) { w.Write(answer) }
	tn := newTunnelRelay(t, recv.URL, func(c *relay.Config) { c.MaxBody = 1 << 20 }, nil)
	tn.startAgent()
	for i := range 2 { // the agent's connection survives the first
		resp, body := tn.post("/big-answer", []byte("{}"), nil)
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, answer) {
			t.Fatalf("answer %d: %s with %d bytes, want 200 with the receiver's %d", i, resp.Status, len(body), len(answer))
		}
	}
}
