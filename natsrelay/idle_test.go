package natsrelay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay"
)

// sweepingInstance is an instance of a cluster whose relay.Server sweeps
// with cfg's idle time and sweep interval.
func sweepingInstance(t *testing.T, ns *server.Server, rc relay.Config, opts ...nats.Option) *instance {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsrelay.Config{Conn: nc, ResponseTimeout: 10 * time.Second, Timeout: 5 * time.Second, Logf: t.Logf}
	store, err := natsrelay.OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	router, err := natsrelay.OpenRouter(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc.Store, rc.Router, rc.Logf = store, router, t.Logf
	srv, err := relay.NewServer(rc)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{nc: nc, store: store, router: router, srv: srv, hs: httptest.NewServer(srv)}
	in.URL = in.hs.URL
	t.Cleanup(in.stop)
	return in
}

// waitRemoved waits until channel is gone from the cluster's store.
func waitRemoved(t *testing.T, s *natsrelay.Store, channel string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s.Channel(channel)
		if devhook.ErrorCode(err) == devhook.ENOTFOUND {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("channel %s not removed as idle within 30 s: %v", channel, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 36: with an idle time of 2 s, an instance does not remove a
// channel whose agent is connected to another instance: it asks the
// cluster's router (the agents bucket), and when the bucket has no key
// for it (an agent connected for longer than the key's TTL, or whose
// announcement failed), the instance that holds the agent. Channels no
// agent holds go.
func TestIdleSweepKeepsAChannelHeldOnAnotherInstance(t *testing.T) {
	ns := natstest.Run(t)
	rc := relay.Config{ChannelIdle: 2 * time.Second, SweepInterval: 50 * time.Millisecond, ResponseTimeout: 10 * time.Second}
	a, b := sweepingInstance(t, ns, rc), sweepingInstance(t, ns, rc)
	held := openOn(t, a)
	ag := dialAgent(t, a.URL, held, http.StatusOK)
	idle := openOn(t, b)
	waitRemoved(t, b.store, idle.Channel)
	if _, err := b.store.Channel(held.Channel); err != nil {
		t.Fatalf("the channel whose agent is connected to the other instance: %v, want it kept", err)
	}

	// No key in the agents bucket: the instance holding the agent answers.
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), natsrelay.DefaultPrefix+"_agents")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(t.Context(), held.Channel); err != nil {
		t.Fatal(err)
	}
	later := openOn(t, b)
	waitRemoved(t, b.store, later.Channel)
	if _, err := b.store.Channel(held.Channel); err != nil {
		t.Fatalf("the channel whose agent is connected to the other instance, with no key in the agents bucket: %v, want it kept", err)
	}
	if resp, body := send(t, b.URL+"/c/"+held.Channel+"/x", "through b"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a delivery through the other instance: %s %q, want the agent's 200", resp.Status, body)
	}
	if d := ag.next(t); string(d.Body) != "through b" {
		t.Fatalf("agent got %q", d.Body)
	}
}

// Issue 36: listing the channels bucket (KeyValue.Keys) may miss a key
// updated while it lists (a channel touched because its agent is
// connected), and RemoveIdleChannels took the queue of a channel it did
// not list for a queue left behind by a removed channel: it removed the
// queue of a live channel, deliveries answered 202 with it. The fault
// suite's sweeps and touches found it; here channels are touched without
// pause while idle channels are looked for again and again.
func TestRemoveIdleChannelsKeepsChannelsTouchedMeanwhile(t *testing.T) {
	ns := natstest.Run(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := natsrelay.OpenStore(context.Background(), natsrelay.Config{Conn: nc, Timeout: 5 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	var chans []string
	for i := range 4 {
		ch := fmt.Sprintf("%032x", i+1)
		if err := s.PutChannel(relay.Channel{ID: ch, TokenHash: []byte("h"), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		id, _ := uuid.NewV7()
		d := &devhook.Delivery{ID: id.String(), Channel: ch, Method: "POST", Path: "/", Body: []byte("kept"), ReceivedAt: time.Now(), Queued: true}
		if err := s.Enqueue(ch, d); err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	stop := make(chan struct{})
	touched := make(chan struct{})
	go func() {
		defer close(touched)
		for {
			for _, ch := range chans {
				select {
				case <-stop:
					return
				default:
				}
				s.TouchChannel(ch, time.Now())
			}
		}
	}()
	defer func() { close(stop); <-touched }()
	for i := range 300 {
		removed, err := s.RemoveIdleChannels(time.Now().Add(-time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) > 0 {
			t.Fatalf("look %d: removed %+v, all of whose channels exist and were touched just now", i, removed)
		}
	}
	for _, ch := range chans {
		if n, err := s.QueueLen(ch); err != nil || n != 1 {
			t.Fatalf("queue of %s: %d, %v; want its delivery", ch, n, err)
		}
	}
}
