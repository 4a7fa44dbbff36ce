package wire_test

// The relay's heartbeat period reaches its agents in the hello
// (Devhook-Ping-Interval), and the agent's silence timeout follows it; an
// agent of an older relay keeps 30 s, and an older agent reads the new
// hello.

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
	"github.com/devhook/devhook/relay/wire"
)

// This devhook's relay announces its heartbeat in a hello that agents
// from before "additions without a flag day" still decode, and its
// agents take it: a relay that pings every 40 s keeps them for 2 min.
func TestRelayAnnouncesItsHeartbeat(t *testing.T) {
	for _, ping := range []time.Duration{0, 40 * time.Second} {
		t.Run(ping.String(), func(t *testing.T) {
			_, hs, _ := relaytest.New(t, relay.Config{PingInterval: ping})
			want := ping
			if want == 0 {
				want = wire.DefaultPingInterval
			}
			cr := relaytest.Open(t, hs)
			if hello := rawHello(t, hs, cr); hello.Header.Get(wire.HelloPingInterval) != strconv.FormatInt(want.Milliseconds(), 10) {
				t.Fatalf("hello %+v; want %s: %d", hello, wire.HelloPingInterval, want.Milliseconds())
			}

			c := relaytest.Dial(t, hs, cr)
			if c.PingInterval() != want || c.PingTimeout() != 3*want {
				t.Fatalf("agent of a relay pinging every %s: interval %s, timeout %s; want %s and %s", want, c.PingInterval(), c.PingTimeout(), want, 3*want)
			}
		})
	}
}

// This devhook's agent side, with relays that announce a heartbeat or not
// (an older relay): three times the heartbeat, at least MinPingTimeout;
// 30 s from a relay that does not say or says nonsense.
func TestAgentTakesTheRelaysHeartbeat(t *testing.T) {
	for _, tt := range []struct {
		name       string
		announce   string // "" = an older relay
		interval   time.Duration
		timeout    time.Duration
		configured time.Duration // DialConfig.PingTimeout
	}{
		{"older relay", "", wire.DefaultPingInterval, 30 * time.Second, 0},
		{"40 s", "40000", 40 * time.Second, 120 * time.Second, 0},
		{"15 s", "15000", 15 * time.Second, 45 * time.Second, 0},
		{"fast", "10", 10 * time.Millisecond, relayclient.MinPingTimeout, 0},
		{"nonsense", "-5", wire.DefaultPingInterval, 30 * time.Second, 0},
		{"not a number", "15s", wire.DefaultPingInterval, 30 * time.Second, 0},
		{"a week", strconv.FormatInt((7 * 24 * time.Hour).Milliseconds(), 10), 24 * time.Hour, 72 * time.Hour, 0},
		{"the caller's", "40000", 40 * time.Second, 7 * time.Second, 7 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs, cr := fakeRelay(t, func(ws *websocket.Conn) {
				hello := &wire.Header{Type: wire.TypeHello, Channel: "c", PublicURL: "https://x/c/c"}
				if tt.announce != "" {
					hello.Header = http.Header{wire.HelloPingInterval: {tt.announce}}
				}
				writeFrame(t, ws, encode(t, hello, nil))
				ws.ReadMessage() // until the agent closes
			})
			c := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr, PingTimeout: tt.configured})
			if c.PingInterval() != tt.interval || c.PingTimeout() != tt.timeout {
				t.Fatalf("interval %s, timeout %s; want %s, %s", c.PingInterval(), c.PingTimeout(), tt.interval, tt.timeout)
			}
		})
	}
}

// The silence timeout is real: a relay that announces a 2 s heartbeat and
// then says nothing is dropped after about 6 s, not after the 30 s an
// agent waited whatever the relay said.
func TestAgentDropsASilentRelayByItsHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a connection to go silent for 6 s")
	}
	hs, cr := fakeRelay(t, func(ws *websocket.Conn) {
		writeFrame(t, ws, encode(t, &wire.Header{Type: wire.TypeHello, Channel: "c", PublicURL: "https://x/c/c",
			Header: http.Header{wire.HelloPingInterval: {"2000"}}}, nil))
		ws.ReadMessage() // no ping, no frame: until the agent closes
	})
	c := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := c.Receive()
		done <- err
	}()
	select {
	case err := <-done:
		// A read deadline never fires early: 6 s at least.
		if took := time.Since(start); took < 6*time.Second-100*time.Millisecond {
			t.Fatalf("dropped after %s (%v), before three heartbeats", took, err)
		}
		t.Logf("dropped after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(20 * time.Second):
		t.Fatal("a relay silent for 20 s, three heartbeats of 2 s, is still connected")
	}
}
