package storetest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
)

// A channel whose agent is connected is never removed as idle, whatever
// ChannelIdle (here 1 s, under the hour between two touches of a connected
// agent's channel); once its agent went, its idle time counts from then.
// The Server's clock is moved by the test, which sweeps.
func testConnectedChannelsKept(t *testing.T, open Open) {
	s := open(t, Config{})
	clk := &clock{now: time.Now()}
	var log logLines
	srv, err := relay.NewServer(relay.Config{Store: s, Router: relay.NewHub(), Logf: log.logf, Now: clk.Now,
		ChannelIdle: time.Second, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	held, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got received
	a := mustConnect(t, hs.URL, held, &got)
	clk.add(2 * time.Second)
	srv.Sweep()
	if _, err := s.Channel(idle.Channel); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("a channel no agent opened for 2 s with an idle time of 1 s: %v, want it removed", err)
	}
	if _, err := s.Channel(held.Channel); err != nil {
		t.Fatalf("a channel whose agent is connected, opened 2 s ago with an idle time of 1 s: %v, want it kept", err)
	}
	if code, _, body := post(t, hs.URL+"/c/"+held.Channel+"/hook", []byte(`{}`)); code != http.StatusOK {
		t.Fatalf("a delivery to the channel whose agent is connected: %d %q, want its agent's 200", code, body)
	}

	// The agent goes: the next sweep marks when; the channel is idle from
	// then on.
	a.close()
	waitUntil(t, 20*time.Second, "the agent's connection ended at the relay", func() bool {
		return metric(t, hs.URL, "devhook_relay_agents_connected") == "0"
	})
	clk.add(time.Minute)
	srv.Sweep()
	if _, err := s.Channel(held.Channel); err != nil {
		t.Fatalf("a channel whose agent went just now: %v, want it kept", err)
	}
	clk.add(time.Second / 2)
	srv.Sweep()
	if _, err := s.Channel(held.Channel); err != nil {
		t.Fatalf("a channel whose agent went 0.5 s ago with an idle time of 1 s: %v, want it kept", err)
	}
	clk.add(time.Second)
	srv.Sweep()
	if _, err := s.Channel(held.Channel); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("a channel whose agent went 1.5 s ago with an idle time of 1 s: %v, want it removed", err)
	}
	if !log.find("channel " + held.Channel + " removed") {
		t.Fatalf("no log line of the removed channel: %q", log.lines)
	}
}

// The same on the real clock, swept by the Server itself: with an idle
// time of 2 s (the time an agent may take to connect on a busy machine)
// and a sweep every 50 ms, the channel nobody opened goes within seconds;
// the one whose agent stays connected, opened and connected before it,
// stays, and its URL reaches the agent.
func testConnectedChannelsKeptRealTime(t *testing.T, open Open) {
	s := open(t, Config{})
	srv, err := relay.NewServer(relay.Config{Store: s, Router: relay.NewHub(), Logf: t.Logf,
		ChannelIdle: 2 * time.Second, SweepInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	held, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got received
	mustConnect(t, hs.URL, held, &got)
	idle, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Counted once the store removed it: wait for the count.
	waitUntil(t, 30*time.Second, "the channel no agent opened removed and counted", func() bool {
		return metric(t, hs.URL, "devhook_relay_channels_removed_total") == "1"
	})
	if _, err := s.Channel(idle.Channel); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("the channel no agent opened: %v, want it removed", err)
	}
	// The sweep that removed the idle channel found the other idle too.
	if _, err := s.Channel(held.Channel); err != nil {
		t.Fatalf("the channel whose agent is connected: %v, want it kept", err)
	}
	if code, _, body := post(t, hs.URL+"/c/"+held.Channel+"/hook", []byte(`{}`)); code != http.StatusOK {
		t.Fatalf("a delivery to the channel whose agent is connected: %d %q, want its agent's 200", code, body)
	}
}
