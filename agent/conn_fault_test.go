package agent_test

// Relay paths that fail in the ways a relay, a proxy or a load balancer
// does: the connection accepted and closed right after the hello, closed
// before it, or left silent. The agent dials no faster than its backoff
// allows, says a repeated failure once with a count, and reports a
// connection to its user only once it holds.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/relay/wire"
	"github.com/devhook/devhook/storage"
)

// peer is a relay-like server: it takes every agent's WebSocket, counts
// it and serves it with serve. It stops every connection it holds when
// the test ends.
type peer struct {
	dials atomic.Int64
	hs    *httptest.Server
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newPeer(t *testing.T, serve func(n int64, ws *websocket.Conn, stop <-chan struct{})) *peer {
	t.Helper()
	p := &peer{stop: make(chan struct{})}
	up := websocket.Upgrader{}
	p.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := p.dials.Add(1)
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		p.wg.Add(1)
		defer p.wg.Done()
		defer ws.Close()
		serve(n, ws, p.stop)
	}))
	t.Cleanup(func() {
		close(p.stop)
		p.hs.CloseClientConnections()
		p.hs.Close()
		p.wg.Wait()
	})
	return p
}

// helloFrame is the hello a relay sends, with its settings in header.
func helloFrame(t *testing.T, header http.Header) []byte {
	t.Helper()
	frame, err := wire.AppendFrame(nil, &wire.Header{Type: wire.TypeHello, Channel: "c", PublicURL: "https://relay.test/c/c", Header: header}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// lines collects an agent's log lines.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(format, args...))
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

// runAgent runs an agent against relayURL until the test ends, with mod
// applied to its Config.
func runAgent(t *testing.T, relayURL string, mod func(*agent.Config)) (stop func() error) {
	t.Helper()
	cfg := agent.Config{RelayURL: relayURL, Forward: []string{"http://127.0.0.1:9"},
		Credentials: wire.Credentials{Channel: "0123456789abcdef0123456789abcdef", Token: "t"}}
	if mod != nil {
		mod(&cfg)
	}
	if cfg.Store == nil {
		db, err := storage.Open(filepath.Join(t.TempDir(), "deliveries.db"), storage.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		cfg.Store = db
	}
	ag, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("Run did not return within 30s of its context's end")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return stop
}

// maxDials is the most dials a backoff of min doubling to max, with the
// agent's jitter (each wait at least half its step), allows within
// elapsed, for an agent whose every try fails.
func maxDials(elapsed, min, max time.Duration) int {
	n := 1 // the first dial waits for nothing
	step, waited := min, time.Duration(0)
	for {
		waited += step / 2
		if waited > elapsed {
			return n
		}
		n++
		step = minDur(2*step, max)
	}
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// A relay path that accepts the WebSocket, sends the hello and closes is
// redialled with backoff, not at once: the dials over a window stay
// within what the backoff allows; the failure is said once; the user is
// told of the first connection only.
func TestConnectionDroppedAfterTheHelloBacksOff(t *testing.T) {
	const minB, maxB = 50 * time.Millisecond, time.Second
	p := newPeer(t, func(_ int64, ws *websocket.Conn, _ <-chan struct{}) {
		ws.WriteMessage(websocket.BinaryMessage, helloFrame(t, nil))
	})
	var log lines
	var connects atomic.Int64
	start := time.Now()
	stop := runAgent(t, p.hs.URL, func(c *agent.Config) {
		c.MinBackoff, c.MaxBackoff = minB, maxB
		c.Logf = log.logf
		c.OnConnect = func(agent.Connection) { connects.Add(1) }
	})
	eventually(t, "the agent to dial six times", func() bool { return p.dials.Load() >= 6 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	dials := int(p.dials.Load())
	allowed := maxDials(elapsed, minB, maxB) + 2 // slack: a dial under way as the window closed
	t.Logf("%d dials in %s (the backoff allows %d)", dials, elapsed.Round(time.Millisecond), allowed)
	if dials > allowed {
		t.Fatalf("%d dials in %s to a relay that closes after its hello; the backoff allows %d", dials, elapsed, allowed)
	}
	if n := connects.Load(); n != 1 {
		t.Errorf("OnConnect called %d times, want once: the later connections never held", n)
	}
	if said := len(log.all()); said < 1 || said > 2 {
		t.Errorf("the repeated failure said in %d lines over %d dials, want once (and perhaps a count):\n%s", said, dials, strings.Join(log.all(), "\n"))
	}
}

// A peer that closes each WebSocket before the hello, and one that never
// says anything, are not redialled faster than the backoff either.
func TestPeerClosingBeforeTheHelloOrStallingBacksOff(t *testing.T) {
	const minB, maxB = 50 * time.Millisecond, time.Second
	t.Run("closes before the hello", func(t *testing.T) {
		p := newPeer(t, func(int64, *websocket.Conn, <-chan struct{}) {})
		var log lines
		start := time.Now()
		stop := runAgent(t, p.hs.URL, func(c *agent.Config) {
			c.MinBackoff, c.MaxBackoff = minB, maxB
			c.Logf = log.logf
		})
		eventually(t, "the agent to dial five times", func() bool { return p.dials.Load() >= 5 })
		stop()
		elapsed := time.Since(start)
		dials := int(p.dials.Load())
		if allowed := maxDials(elapsed, minB, maxB) + 2; dials > allowed {
			t.Fatalf("%d dials in %s; the backoff allows %d", dials, elapsed, allowed)
		}
		if n := len(log.all()); n > 2 {
			t.Errorf("%d log lines for %d dials failing alike, want one (and perhaps a count):\n%s", n, dials, strings.Join(log.all(), "\n"))
		}
	})
	t.Run("stalls", func(t *testing.T) {
		held := make(chan struct{}, 16)
		p := newPeer(t, func(_ int64, _ *websocket.Conn, stop <-chan struct{}) {
			held <- struct{}{}
			<-stop
		})
		stop := runAgent(t, p.hs.URL, func(c *agent.Config) { c.MinBackoff, c.MaxBackoff = minB, maxB })
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatal("the agent did not dial")
		}
		// Many backoff periods: the agent still waits for the hello on
		// its one connection.
		for range 10 {
			time.Sleep(maxB / 10) // observing, not synchronising
			if n := p.dials.Load(); n != 1 {
				t.Fatalf("%d dials while the first connection waits for its hello", n)
			}
		}
		if err := stop(); err != nil { // and it stops at once
			t.Fatal(err)
		}
	})
}

// A proxy in front of a real relay that cuts every connection once the
// relay's hello went through: the agent dials within its backoff.
func TestProxyCuttingAfterTheHelloBacksOff(t *testing.T) {
	const minB, maxB = 50 * time.Millisecond, time.Second
	_, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	upstream := strings.TrimPrefix(tn.relaySrv.URL, "http://")
	var dials atomic.Int64
	proxyURL := cuttingProxy(t, upstream, &dials)
	start := time.Now()
	cfg := tn.cfg
	cfg.RelayURL = proxyURL
	cfg.MinBackoff, cfg.MaxBackoff = minB, maxB
	stop := runAgent(t, proxyURL, func(c *agent.Config) { *c = cfg })
	eventually(t, "the agent to dial through the proxy six times", func() bool { return dials.Load() >= 6 })
	stop()
	elapsed := time.Since(start)
	n := int(dials.Load())
	allowed := maxDials(elapsed, minB, maxB) + 2
	t.Logf("%d dials in %s through a proxy that cuts after the hello (the backoff allows %d)", n, elapsed.Round(time.Millisecond), allowed)
	if n > allowed {
		t.Fatalf("%d dials in %s; the backoff allows %d", n, elapsed, allowed)
	}
}

// cuttingProxy is a TCP proxy to upstream that closes each connection as
// soon as it has passed on the relay's answer to the upgrade and the
// first bytes after it (the hello). It counts connections in dials.
func cuttingProxy(t *testing.T, upstream string, dials *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			wg.Go(func() { cutAfterHello(c, upstream) })
		}
	})
	return "http://" + ln.Addr().String()
}

func cutAfterHello(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	go func() {
		// The agent's side ended (it stopped, maybe mid-upgrade): so does
		// the upstream one, or the read below waits for a relay that
		// waits for the rest of the request, and the cleanup for both.
		io.Copy(u, c)
		u.Close()
	}()
	var seen []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := u.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			seen = append(seen, buf[:n]...)
			if i := strings.Index(string(seen), "\r\n\r\n"); i >= 0 && len(seen) > i+4 {
				return // the 101 and the hello passed: cut
			}
		}
		if err != nil {
			return
		}
	}
}

// A relay path that cuts the first connections after their hello and
// then lets one hold: the user hears of the first connection, of the
// failure once, and of the reconnection once it holds, with the count of
// tries; a connection that held and is lost is said and redialled.
func TestFlappingConnectionReportedOnceItHolds(t *testing.T) {
	const cuts = 4
	drop := make(chan struct{})
	p := newPeer(t, func(n int64, ws *websocket.Conn, stop <-chan struct{}) {
		ws.WriteMessage(websocket.BinaryMessage, helloFrame(t, nil))
		if n <= cuts {
			return
		}
		read := make(chan struct{})
		go func() { // the relay's reader: it answers pings, sees the close
			defer close(read)
			for {
				if _, _, err := ws.ReadMessage(); err != nil {
					return
				}
			}
		}()
		select {
		case <-drop: // the first connection that held: dropped when the test says
		case <-stop:
		}
		ws.Close()
		<-read
	})
	var log lines
	connects := make(chan agent.Connection, 16)
	runAgent(t, p.hs.URL, func(c *agent.Config) {
		c.MinBackoff, c.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
		c.HealthyAfter = 300 * time.Millisecond
		c.Logf = log.logf
		c.OnConnect = func(c agent.Connection) {
			select {
			case connects <- c:
			default: // reported at every try: the test fails below
			}
		}
	})
	next := func(what string) agent.Connection {
		t.Helper()
		select {
		case c := <-connects:
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s; log:\n%s", what, strings.Join(log.all(), "\n"))
		}
		return agent.Connection{}
	}
	if c := next("first connection"); c.Reconnect {
		t.Fatalf("first connection reported as a reconnection: %+v", c)
	}
	c := next("report of the connection that held")
	if !c.Reconnect || p.dials.Load() != cuts+1 {
		t.Fatalf("second report %+v after %d dials, want the reconnection of dial %d", c, p.dials.Load(), cuts+1)
	}
	logged := strings.Join(log.all(), "\n")
	if want := "ended right after it opened"; strings.Count(logged, want) != 1 {
		t.Errorf("the log says %q %d times, want once:\n%s", want, strings.Count(logged, want), logged)
	}
	// The count goes with the connection, for OnConnect to say in its
	// line; the agent does not log it besides.
	if c.Fails != cuts || !c.Unsaid || strings.Contains(logged, "failed tries") {
		t.Errorf("reconnection %+v after %d cuts, log:\n%s; want the count in the connection only", c, cuts, logged)
	}
	// The failure ended when the connection opened, not when it held:
	// "failed tries over" cannot say more than "reconnected after".
	if c.Failing > c.Down {
		t.Errorf("reconnection %+v: failing for %s, longer than the %s it was down", c, c.Failing, c.Down)
	}
	close(drop) // the connection that held is lost: said, and dialled again
	if c := next("reconnection after the held connection was lost"); !c.Reconnect {
		t.Fatalf("report %+v, want a reconnection", c)
	}
	if !strings.Contains(strings.Join(log.all(), "\n"), "connection to the relay lost") {
		t.Errorf("the loss of a connection that held is not said:\n%s", strings.Join(log.all(), "\n"))
	}
}
