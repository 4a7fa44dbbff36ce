package wire_test

// The relay's wait for an agent's answer reaches its agents in the hello
// (Devhook-Response-Timeout), which older agents still decode; an agent
// of an older relay knows no wait.

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

func TestRelayAnnouncesItsResponseTimeout(t *testing.T) {
	for _, wait := range []time.Duration{0, 10 * time.Second, 1500 * time.Millisecond} {
		t.Run(wait.String(), func(t *testing.T) {
			_, hs, _ := relaytest.New(t, relay.Config{ResponseTimeout: wait})
			want := wait
			if want == 0 {
				want = relay.DefaultResponseTimeout
			}
			cr := relaytest.Open(t, hs)
			if hello := rawHello(t, hs, cr); hello.Header.Get(wire.HelloResponseTimeout) != strconv.FormatInt(want.Milliseconds(), 10) {
				t.Fatalf("hello %+v; want %s: %d", hello, wire.HelloResponseTimeout, want.Milliseconds())
			}
			if c := relaytest.Dial(t, hs, cr); c.ResponseTimeout() != want {
				t.Fatalf("the agent of a relay waiting %s reads %s", want, c.ResponseTimeout())
			}
		})
	}
}

// A relay that does not say (older), or says nonsense: no wait known (0),
// and the agent passes every answer on as before.
func TestAgentTakesTheRelaysResponseTimeout(t *testing.T) {
	for _, tt := range []struct {
		name, announce string // "" = an older relay
		want           time.Duration
	}{
		{"older relay", "", 0},
		{"10 s", "10000", 10 * time.Second},
		{"nonsense", "-5", 0},
		{"not a number", "10s", 0},
		{"a week", strconv.FormatInt((7 * 24 * time.Hour).Milliseconds(), 10), 24 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs, cr := fakeRelay(t, func(ws *websocket.Conn) {
				hello := &wire.Header{Type: wire.TypeHello, Channel: "c", PublicURL: "https://x/c/c"}
				if tt.announce != "" {
					hello.Header = http.Header{wire.HelloResponseTimeout: {tt.announce}}
				}
				writeFrame(t, ws, encode(t, hello, nil))
				ws.ReadMessage() // until the agent closes
			})
			c := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
			if c.ResponseTimeout() != tt.want {
				t.Fatalf("response timeout %s, want %s", c.ResponseTimeout(), tt.want)
			}
		})
	}
}
