package natsrelay_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/relayclient"
)

// A delivery sent to instance B reaches the agent connected to instance A
// (the channel was opened on A: tokens are shared), byte-exact, and the
// sender gets the agent's real answer; the other way round too.
func TestDeliveryReachesAgentOnAnotherInstance(t *testing.T) {
	ns := natstest.Run(t)
	// The NATS server runs goroutines for each stream and bucket: created
	// by a first instance, before counting.
	startInstance(t, ns).stop()
	before, _ := ours()
	func() {
		a, b := startInstance(t, ns), startInstance(t, ns)
		defer a.stop()
		defer b.stop()
		cr := openOn(t, a)
		ag := dialAgent(t, a.URL, cr, http.StatusCreated)
		defer ag.conn.Close()
		for _, in := range []*instance{b, a} {
			resp, body := send(t, in.URL+"/c/"+cr.Channel+"/hooks/x?q=1&q=2", "payload \x00\xff")
			if resp.StatusCode != http.StatusCreated || body != "answer to payload \x00\xff" ||
				resp.Header.Get("X-Agent-Saw") != "POST /hooks/x?q=1&q=2" || len(resp.Header["X-Repeat"]) != 2 {
				t.Fatalf("via %s: %s %q %v", in.URL, resp.Status, body, resp.Header)
			}
			d := ag.next(t)
			if d.Queued || string(d.Body) != "payload \x00\xff" || strings.Join(d.Header["X-Multi"], ",") != "a,b" || d.Channel != cr.Channel {
				t.Fatalf("agent got %+v", d)
			}
		}
		// Checking credentials works on any instance.
		if err := relayclient.Check(context.Background(), http.DefaultClient, b.URL, cr); err != nil {
			t.Fatal(err)
		}
		cr.Token = "wrong"
		if err := relayclient.Check(context.Background(), http.DefaultClient, b.URL, cr); !errors.Is(err, relayclient.ErrRejected) {
			t.Fatalf("wrong token on another instance: %v", err)
		}
		ag.conn.Close()
		<-ag.done
		ag.done <- nil // for the cleanup
	}()
	noLeaks(t, before)
}

// With the agent's instance killed, deliveries sent to the other are
// queued (202); the agent reconnects to the other instance and receives
// them, once each, and acks them: the queue is empty again. Queued
// deliveries survive a restart of every relay.
func TestAgentMovesWhenItsInstanceDies(t *testing.T) {
	ns := natstest.Run(t)
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr := openOn(t, a)
	ag := dialAgent(t, a.URL, cr, http.StatusOK)
	a.stop()
	select {
	case <-ag.done:
		ag.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("the agent was not disconnected")
	}
	// Until the NATS server has seen A's connection close, a request may
	// still go to A's subscription and wait for the relay's timeout (then
	// it is queued all the same): wait for it, so the test stays quick.
	for deadline := time.Now().Add(10 * time.Second); ns.NumClients() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the NATS server still has %d clients", ns.NumClients())
		}
		time.Sleep(5 * time.Millisecond) // polling the NATS server's state
	}
	var ids []string
	for i := range 3 {
		resp, body := send(t, b.URL+"/c/"+cr.Channel+"/q", "queued "+string(rune('0'+i)))
		if resp.StatusCode != http.StatusAccepted || !strings.Contains(body, `"queued":true`) {
			t.Fatalf("with the agent's instance gone: %s %q", resp.Status, body)
		}
		ids = append(ids, resp.Header.Get("Devhook-Delivery"))
	}
	if n, err := b.store.Counts(); err != nil || n.Queued != 3 || n.Channels != 1 {
		t.Fatalf("counts %+v %v", n, err)
	}

	// Every relay restarts; the queue is in JetStream.
	b.stop()
	c, d := startInstance(t, ns), startInstance(t, ns)
	// One more, queued on c, while the agent is away.
	if resp, _ := send(t, c.URL+"/c/"+cr.Channel+"/q", "queued 3"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("queued on a new instance: %s", resp.Status)
	}
	ag2 := dialAgent(t, d.URL, cr, http.StatusOK)
	got := map[string]bool{}
	for range 4 {
		dl := ag2.next(t)
		if !dl.Queued || got[string(dl.Body)] {
			t.Fatalf("queued delivery %+v (seen %v)", dl, got)
		}
		got[string(dl.Body)] = true
	}
	if resp, _ := send(t, c.URL+"/c/"+cr.Channel+"/live", "live"); resp.StatusCode != http.StatusOK {
		t.Fatalf("live after the queue: %s", resp.Status)
	}
	ag2.next(t)
	// Acknowledged deliveries leave the queue off the connection's reader
	// (relay/drain.go): wait for their removal.
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := d.store.Counts()
		if err == nil && n.Queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after acks: %+v %v", n, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the store
	}
	select {
	case dl := <-ag2.got:
		t.Fatalf("sent twice: %+v", dl)
	default:
	}
	_ = ids
}

// The newest agent wins across instances: an agent connecting on B closes
// the one on A with CloseReplaced, and deliveries at A reach the new one.
func TestNewestAgentWinsAcrossInstances(t *testing.T) {
	ns := natstest.Run(t)
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr := openOn(t, a)
	first := dialAgent(t, a.URL, cr, http.StatusOK)
	second := dialAgent(t, b.URL, cr, http.StatusAccepted)
	select {
	case err := <-first.done:
		if !errors.Is(err, relayclient.ErrReplaced) {
			t.Fatalf("first agent: %v, want replaced", err)
		}
		first.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the first agent was not replaced")
	}
	resp, _ := send(t, a.URL+"/c/"+cr.Channel+"/x", "to the newest")
	if resp.StatusCode != http.StatusAccepted || string(second.next(t).Body) != "to the newest" {
		t.Fatalf("delivery at the old agent's instance: %s", resp.Status)
	}
	// And back: a third agent on A replaces the one on B.
	third := dialAgent(t, a.URL, cr, http.StatusTeapot)
	select {
	case err := <-second.done:
		if !errors.Is(err, relayclient.ErrReplaced) {
			t.Fatalf("second agent: %v", err)
		}
		second.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the second agent was not replaced")
	}
	if resp, _ := send(t, b.URL+"/c/"+cr.Channel+"/x", "3"); resp.StatusCode != http.StatusTeapot {
		t.Fatalf("delivery at B: %s", resp.Status)
	}
	third.next(t)
}

// Two agents of one channel connecting at the same moment to two
// instances: exactly one keeps the channel, on both instances.
func TestSimultaneousAgentsOneWins(t *testing.T) {
	ns := natstest.Run(t)
	a, b := startInstance(t, ns), startInstance(t, ns)
	for round := range 8 {
		cr := openOn(t, a)
		conns := make([]*relayclient.Conn, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, in := range []*instance{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				conns[i], errs[i] = relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: in.URL, Credentials: cr})
			}()
		}
		wg.Wait()
		loser, winner := -1, -1
		agents := make([]*agent, 2)
		for i := range 2 {
			switch {
			case errs[i] != nil && strings.Contains(errs[i].Error(), "4001"):
				loser, winner = i, 1-i // replaced before its hello was read
			case errs[i] != nil:
				t.Fatalf("round %d: dial: %v", round, errs[i])
			default:
				agents[i] = runAgent(t, conns[i], 200+i)
			}
		}
		if loser < 0 {
			select {
			case err := <-agents[0].done:
				agents[0].done <- err
				loser, winner = 0, 1
			case err := <-agents[1].done:
				agents[1].done <- err
				loser, winner = 1, 0
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: both agents still hold the channel", round)
			}
			if err := <-agents[loser].done; !errors.Is(err, relayclient.ErrReplaced) {
				t.Fatalf("round %d: the loser ended with %v", round, err)
			}
			agents[loser].done <- relayclient.ErrReplaced
		}
		if agents[winner] == nil {
			t.Fatalf("round %d: both agents were replaced", round)
		}
		for _, in := range []*instance{a, b} {
			resp, _ := send(t, in.URL+"/c/"+cr.Channel+"/x", "to the winner")
			if resp.StatusCode != 200+winner {
				t.Fatalf("round %d: via %s: %s, want the winner's %d", round, in.URL, resp.Status, 200+winner)
			}
			agents[winner].next(t)
		}
		select {
		case err := <-agents[winner].done:
			t.Fatalf("round %d: the winner was closed too: %v", round, err)
		default:
		}
	}
}

// A delivery passed to an instance that then dies is not left waiting for
// the relay's timeout: when the channel's agent attaches elsewhere, the
// sender gets 202 at once and the agent gets the delivery where it is.
func TestDeliveryWithADeadInstanceFollowsTheAgent(t *testing.T) {
	ns := natstest.Run(t)
	cfg := natsrelay.Config{ResponseTimeout: 20 * time.Second}
	a, b := startInstanceWith(t, ns, cfg), startInstanceWith(t, ns, cfg)
	cr := openOn(t, a)
	// An agent on A that takes deliveries and never answers: A holds the
	// delivery when it dies.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mute, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: a.URL, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	took := make(chan *devhook.Delivery, 1)
	go func() {
		if d, err := mute.Receive(); err == nil {
			took <- d
		}
	}()
	type result struct {
		status int
		after  time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, _ := send(t, b.URL+"/c/"+cr.Channel+"/follow", "follow me")
		done <- result{resp.StatusCode, time.Since(start)}
	}()
	select {
	case <-took:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent on A never got the delivery")
	}
	a.stop()
	start := time.Now()
	ag := dialAgent(t, b.URL, cr, http.StatusOK)
	select {
	case r := <-done:
		if r.status != http.StatusAccepted {
			t.Fatalf("sender got %d, want 202 (queued)", r.status)
		}
	case <-time.After(15 * time.Second): // the relay's timeout, and its margin, would be 25 s
		t.Fatalf("the sender still waits %s after its agent attached on B", time.Since(start))
	}
	if d := ag.next(t); string(d.Body) != "follow me" || !d.Queued {
		t.Fatalf("agent on B got %+v, want the delivery, queued", d)
	}
}

// The watch of the agents bucket runs behind under load: a delivery sent to
// instance B for the agent on A may leave before B's watch has seen that
// agent's announcement. When it sees it, with the delivery in flight, it is
// no new attachment: the sender still gets the agent's answer, not a 202
// (the delivery queued, and delivered twice).
func TestDeliveryOutlivesTheWatchSeeingItsOwnAgent(t *testing.T) {
	ns := natstest.Run(t)
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr := openOn(t, a)
	// B's watch hands the puts of the channel to the test, which acts on
	// them when it chooses.
	puts := make(chan func(), 10)
	b.router.SetWatched(func(channel string, seen func()) {
		if channel != cr.Channel {
			seen()
			return
		}
		puts <- seen
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: a.URL, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type result struct {
		status int
		body   string
	}
	done := make(chan result, 1)
	go func() {
		resp, body := send(t, b.URL+"/c/"+cr.Channel+"/late", "late watch")
		done <- result{resp.StatusCode, body}
	}()
	d, err := conn.Receive()
	if err != nil {
		t.Fatal(err)
	}
	// The delivery is with the agent, B waits for its answer: B's watch
	// now sees the agent's announcement.
	select {
	case seen := <-puts:
		seen()
	case <-time.After(30 * time.Second):
		t.Fatal("B's watch never saw the agent's announcement")
	}
	if err := conn.Respond(d.ID, http.StatusCreated, nil, []byte("answered")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.status != http.StatusCreated || r.body != "answered" {
			t.Fatalf("sender got %d %q, want the agent's answer", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sender got no answer")
	}
}

// Deliveries sent to instance B while the channel's agent attaches on A
// reach it once each: queued while B cannot reach it, passed to A once
// A announced it; none is taken at once for a delivery that met a newer
// agent (queued as well as delivered). Several attachments, deliveries sent
// without pause throughout.
func TestDeliveriesDuringAttachReachTheAgentOnce(t *testing.T) {
	ns := natstest.Run(t)
	// Neither taken back from A's relay, as for a newer agent, nor left
	// unanswered by A (then queued after the relay's timeout).
	var requeued atomic.Int32
	cfg := natsrelay.Config{ResponseTimeout: 10 * time.Second, Logf: func(format string, args ...any) {
		if strings.Contains(format, "attached anew") || strings.Contains(format, "did not answer") {
			requeued.Add(1)
		}
		t.Logf(format, args...)
	}}
	a, b := startInstanceWith(t, ns, cfg), startInstanceWith(t, ns, cfg)
	cr := openOn(t, a)
	client := &http.Client{Timeout: 30 * time.Second}
	for round := range 10 {
		stop := make(chan struct{})
		type sent struct {
			bodies []string
			err    error
		}
		done := make(chan sent, 1)
		go func() {
			var s sent
			for i := 0; ; i++ {
				select {
				case <-stop:
					done <- s
					return
				default:
				}
				body := fmt.Sprintf("round %d delivery %d", round, i)
				resp, err := client.Post(b.URL+"/c/"+cr.Channel+"/during", "text/plain", strings.NewReader(body))
				if err != nil {
					s.err = err
					done <- s
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
					s.err = fmt.Errorf("%s: %s", body, resp.Status)
					done <- s
					return
				}
				s.bodies = append(s.bodies, body)
			}
		}()
		ag := dialAgent(t, a.URL, cr, http.StatusOK)
		// Some deliveries after the attachment too.
		got := map[string]int{}
		for len(got) < 3 {
			got[string(ag.next(t).Body)]++
		}
		close(stop)
		s := <-done
		if s.err != nil {
			t.Fatalf("round %d: %v", round, s.err)
		}
		for _, body := range s.bodies {
			for got[body] == 0 {
				got[string(ag.next(t).Body)]++
			}
		}
		for body, n := range got {
			if n != 1 {
				t.Errorf("round %d: %q reached the agent %d times", round, body, n)
			}
		}
		if n := requeued.Load(); n != 0 {
			t.Fatalf("round %d: %d deliveries taken back from the agent's relay, or not answered, and queued", round, n)
		}
		ag.conn.Close()
		<-ag.done
		ag.done <- nil // for the cleanup
	}
}
