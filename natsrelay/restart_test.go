package natsrelay_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// natsEvents follows one relay's NATS connection: failed reconnects
// counted, losses and returns signalled.
type natsEvents struct {
	attempts   atomic.Int64
	lost, back chan struct{}
}

func newNATSEvents() *natsEvents {
	return &natsEvents{lost: make(chan struct{}, 1), back: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// options are the relay's own reconnect options (natsrelay.ReconnectOptions)
// with e's handlers.
func (e *natsEvents) options() []nats.Option {
	return append(natsrelay.ReconnectOptions(),
		nats.ReconnectErrHandler(func(*nats.Conn, error) { e.attempts.Add(1) }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { signal(e.lost) }),
		nats.ReconnectHandler(func(*nats.Conn) { signal(e.back) }))
}

// logBook keeps the relays' log lines with their time.
type logBook struct {
	t     *testing.T
	mu    sync.Mutex
	times []time.Time
	lines []string
}

func (b *logBook) Logf(format string, args ...any) {
	b.t.Logf(format, args...)
	b.mu.Lock()
	b.times = append(b.times, time.Now())
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

// with returns the lines that hold part.
func (b *logBook) with(part string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range b.lines {
		if strings.Contains(l, part) {
			out = append(out, l)
		}
	}
	return out
}

// between counts the lines written between from and to.
func (b *logBook) between(from, to time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, at := range b.times {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// sent is one delivery of a flow and its answer.
type sent struct {
	channel    string
	large      bool
	status     int // 0: no answer
	id         string
	retryAfter string
	start, end time.Time
}

// flow sends deliveries to one channel through one relay, paced, until
// stopped, the way the service does: each on its own, a refused one not
// sent again (it is not acknowledged; the next is another delivery).
type flow struct {
	name    string
	url     string
	channel string
	bodies  []string // sent in turn

	mu   sync.Mutex
	sent []sent
}

func (f *flow) run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 60 * time.Second}
		tick := time.NewTicker(50 * time.Millisecond) // pacing, as a sender's rate
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			body := f.bodies[i%len(f.bodies)]
			s := sent{channel: f.channel, large: len(body) > 1<<20, start: time.Now()}
			resp, err := client.Post(f.url+"/c/"+f.channel+"/flow", "application/octet-stream", strings.NewReader(body))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s.status, s.id, s.retryAfter = resp.StatusCode, resp.Header.Get("Devhook-Delivery"), resp.Header.Get("Retry-After")
			}
			s.end = time.Now()
			f.mu.Lock()
			f.sent = append(f.sent, s)
			f.mu.Unlock()
		}
	}()
}

func (f *flow) all() []sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sent(nil), f.sent...)
}

// count counts the deliveries started after since that ok says yes to.
func (f *flow) count(since time.Time, ok func(sent) bool) int {
	n := 0
	for _, s := range f.all() {
		if !s.start.Before(since) && ok(s) {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // polling what the relays and senders did
	}
}

// collector is an agent that answers 200, acks, and records the ids it got.
type collector struct {
	conn *relayclient.Conn
	mu   sync.Mutex
	got  map[string]int
	done chan error
}

func collect(t *testing.T, url string, cr wire.Credentials) *collector {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: url, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{conn: conn, got: map[string]int{}, done: make(chan error, 1)}
	go func() {
		for {
			d, err := conn.Receive()
			if err != nil {
				c.done <- err
				return
			}
			conn.Respond(d.ID, http.StatusOK, nil, []byte("ok"))
			if d.Queued {
				conn.Ack(d.ID)
			}
			c.mu.Lock()
			c.got[d.ID]++
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-c.done })
	return c
}

func (c *collector) missing(ids []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, id := range ids {
		if c.got[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// reconnectBound is the most reconnects a relay can try in d with the
// backoff natsrelay.ReconnectOptions documents (100 ms, doubling up to
// 5 s), each wait at least half its step.
func reconnectBound(d time.Duration) int {
	n, wait, total := 0, 100*time.Millisecond, time.Duration(0)
	for total+wait/2 <= d {
		total += wait / 2
		n++
		wait = min(2*wait, 5*time.Second)
	}
	return n
}

// The NATS server killed (between a large delivery's object and its
// entry) and restarted on the same port with the same store, under a flow
// of deliveries, live and queued, small and larger than one NATS message,
// with an agent connected. While it is away: deliveries that need it are
// answered 503 with Retry-After within the bound (LostWait with slack),
// the agent's own relay still passes it live ones, the relays try to
// reconnect no faster than their backoff and log no more than the
// refusals. Once it is back, everything recovers by itself: deliveries
// are queued and passed again, every delivery answered 202 reaches its
// agent, and the object the killed write left is an orphan the sweep
// removes.
func TestNATSKilledAndRestarted(t *testing.T) {
	const bound = 3 * time.Second // LostWait, 1 s, with slack for a loaded machine
	natsd, ns := startRestartable(t)

	logs := &logBook{t: t}
	evA, evB := newNATSEvents(), newNATSEvents()
	cfg := natsrelay.Config{ResponseTimeout: 10 * time.Second, Logf: logs.Logf}
	a := startInstanceWith(t, ns, cfg, evA.options()...)
	b := startInstanceWith(t, ns, cfg, evB.options()...)
	live, queued := openOn(t, a), openOn(t, b)
	agent := collect(t, a.URL, live)

	small := "small delivery"
	large := bigBody(1<<20+64<<10, 21) // over one NATS message: in parts, and an object when queued
	flows := []*flow{
		{name: "live via the other relay", url: b.URL, channel: live.Channel, bodies: []string{small, small, large}},
		{name: "live via the agent's relay", url: a.URL, channel: live.Channel, bodies: []string{small}},
		{name: "queued", url: a.URL, channel: queued.Channel, bodies: []string{small, large}},
	}
	// Armed later: NATS is killed between a large queued delivery's
	// object and its entry.
	var armed atomic.Bool
	var killedAt time.Time
	killed := make(chan struct{})
	a.store.SetBeforePart(nil, func(object string) {
		if object != "" && armed.CompareAndSwap(true, false) {
			killedAt = time.Now()
			natsd.stop()
			close(killed)
		}
	})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for _, f := range flows {
		f.run(ctx, &wg)
	}
	start := time.Now()
	ok := func(s sent) bool { return s.status == http.StatusOK || s.status == http.StatusAccepted }
	for _, f := range flows {
		waitFor(t, "deliveries flowing "+f.name, 60*time.Second, func() bool {
			return f.count(start, func(s sent) bool { return ok(s) && (s.large || len(f.bodies) == 1) }) >= 2
		})
	}

	// The kill: between a large queued delivery's object and its entry.
	armed.Store(true)
	select {
	case <-killed:
	case <-time.After(60 * time.Second):
		t.Fatal("no large delivery was queued through the armed relay")
	}
	for _, ev := range []*natsEvents{evA, evB} {
		select {
		case <-ev.lost:
		case <-time.After(30 * time.Second):
			t.Fatal("a relay did not see NATS go")
		}
	}
	// Away long enough for several reconnects and refusals.
	waitFor(t, "reconnects and refusals while NATS is away", 60*time.Second, func() bool {
		for _, f := range flows {
			if f.count(killedAt, func(sent) bool { return true }) < 5 {
				return false
			}
		}
		return evA.attempts.Load() >= 5 && evB.attempts.Load() >= 5
	})
	attempts := [2]int64{evA.attempts.Load(), evB.attempts.Load()}
	natsd.restart()
	restartedAt := time.Now()
	outage := restartedAt.Sub(killedAt)

	// Recovery, by itself.
	for _, ev := range []*natsEvents{evA, evB} {
		select {
		case <-ev.back:
		case <-time.After(30 * time.Second):
			t.Fatal("a relay did not reconnect to NATS")
		}
	}
	back := time.Now()
	for _, f := range flows {
		waitFor(t, "deliveries flowing again "+f.name, 60*time.Second, func() bool {
			return f.count(back, func(s sent) bool { return ok(s) && (s.large || len(f.bodies) == 1) }) >= 2
		})
	}
	stop()
	wg.Wait()

	// While NATS was away.
	var during, refused int
	for _, f := range flows {
		for _, s := range f.all() {
			if s.end.Before(killedAt) || s.end.After(restartedAt) {
				continue // answered with NATS there, or perhaps back
			}
			during++
			from := s.start
			if from.Before(killedAt) {
				from = killedAt
			}
			switch {
			case s.status == http.StatusOK && f.url == a.URL && s.channel == live.Channel:
				// The agent's own relay passes it on.
			case s.status == http.StatusServiceUnavailable && s.retryAfter != "" && s.end.Sub(from) <= bound:
				refused++
			case s.status == http.StatusServiceUnavailable && s.retryAfter != "":
				t.Errorf("%s: 503 after %s with NATS away (bound %s)", f.name, s.end.Sub(from), bound)
			case s.status == http.StatusOK && s.end.Before(killedAt.Add(bound)):
				// Answered by the agent as NATS went.
			default:
				t.Errorf("%s: %d (Retry-After %q) after %s with NATS away", f.name, s.status, s.retryAfter, s.end.Sub(from))
			}
		}
	}
	lines := logs.between(killedAt, restartedAt)
	t.Logf("NATS away for %s: %d deliveries (%d refused), %d and %d reconnects tried (bound %d), %d log lines",
		outage.Round(time.Millisecond), during, refused, attempts[0], attempts[1], reconnectBound(outage)+2, lines)
	for i, n := range attempts {
		if n > int64(reconnectBound(outage)+2) {
			t.Errorf("relay %d tried to reconnect %d times in %s: faster than its backoff (at most %d)", i, n, outage, reconnectBound(outage)+2)
		}
	}
	// A line per refusal at most (the relay's for the delivery, the
	// store's or router's for its cause), and a few for the loss itself.
	if lines > 2*during+20 {
		t.Errorf("%d log lines in %s for %d deliveries: a loop logs", lines, outage, during)
	}

	// Every delivery answered 202 reaches its agent, after a restart of
	// NATS; what the killed write left is an orphan the sweep removes.
	var liveIDs, queuedIDs []string
	for _, f := range flows {
		for _, s := range f.all() {
			switch {
			case s.status != http.StatusAccepted:
			case s.channel == live.Channel:
				liveIDs = append(liveIDs, s.id)
			default:
				queuedIDs = append(queuedIDs, s.id)
			}
		}
	}
	late := collect(t, b.URL, queued)
	waitFor(t, "every delivery answered 202 reached its agent", 60*time.Second, func() bool {
		return len(agent.missing(liveIDs)) == 0 && len(late.missing(queuedIDs)) == 0
	})
	t.Logf("%d deliveries answered 202 reached their agents", len(liveIDs)+len(queuedIDs))
	waitQueueEmpty(t, b.store, queued.Channel)
	waitQueueEmpty(t, b.store, live.Channel)
	// The write NATS was killed in: its entry was lost with the
	// connection, and its object is an orphan; or nats.go had not
	// written the entry yet when the connection went and sent it on the
	// reconnect: the agent got the delivery (though its sender was
	// answered 503), and the object went with its acknowledgement.
	var cut sent
	for _, s := range flows[2].all() {
		if s.large && s.status == http.StatusServiceUnavailable && s.start.Before(killedAt) && !s.end.Before(killedAt) {
			cut = s
		}
	}
	before := bucket(t, natsd.running())
	orphan := strings.Contains(strings.Join(before.objects, " "), queued.Channel+"."+cut.id)
	delivered := cut.id != "" && len(late.missing([]string{cut.id})) == 0
	t.Logf("the write NATS was killed in: delivery %s, its object an orphan: %v, delivered: %v; the bucket: objects %v, %d sets of chunks",
		cut.id, orphan, delivered, before.objects, before.chunks)
	if !orphan && !delivered {
		t.Fatalf("the delivery NATS was killed in (%q) left no object and did not reach the agent", cut.id)
	}
	// All that is left is orphans (and objects of acknowledged
	// deliveries on their way out): the queues are empty.
	a.later(natsrelay.DefaultOrphanGrace + time.Minute)
	a.srv.Sweep()
	after := bucket(t, natsd.running())
	if len(after.objects) != 0 || after.chunks != 0 {
		t.Fatalf("after the sweep: objects %v, %d sets of chunks; were %v, %d", after.objects, after.chunks, before.objects, before.chunks)
	}
	if n := metric(t, a, "devhook_relay_queue_orphans_removed_total"); orphan && n < 1 {
		t.Fatalf("devhook_relay_queue_orphans_removed_total %v, want the orphan counted", n)
	}
	select {
	case err := <-agent.done:
		t.Fatalf("the agent's connection ended: %v", err)
	default:
	}
}

// restartable is a NATS server that a test stops and starts again, on
// the same port and with the same JetStream store; the one running when
// the test ends is stopped then.
type restartable struct {
	t       *testing.T
	dir     string
	port    int
	current atomic.Pointer[server.Server]
}

// startRestartable starts a restartable NATS server, and returns it and
// the server as first started.
func startRestartable(t *testing.T) (*restartable, *server.Server) {
	t.Helper()
	r := &restartable{t: t, dir: t.TempDir()}
	ns, err := natstest.Start(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	r.port = ns.Addr().(*net.TCPAddr).Port
	r.current.Store(ns)
	t.Cleanup(r.stop)
	return r, ns
}

// running is the server running, or the last one stopped.
func (r *restartable) running() *server.Server { return r.current.Load() }

// stop stops the server running, from any goroutine.
func (r *restartable) stop() {
	ns := r.current.Load()
	ns.Shutdown()
	ns.WaitForShutdown()
}

// restart starts the server again, where it was.
func (r *restartable) restart() {
	r.t.Helper()
	ns, err := natstest.Start(r.dir, natstest.Port(r.port))
	if err != nil {
		r.t.Fatal(err)
	}
	r.current.Store(ns)
}

// fakeAgent is a relay.Endpoint that records being replaced.
type fakeAgent struct{ replaced chan struct{} }

func (f *fakeAgent) Deliver(context.Context, *devhook.Delivery) (*wire.Answer, error) {
	return &wire.Answer{Status: http.StatusOK}, nil
}
func (f *fakeAgent) Kick()    {}
func (f *fakeAgent) Replace() { signal(f.replaced) }

// An agent that attaches while NATS is away is announced to the other
// relays once NATS is back (after a restart), so that the newest agent
// still wins: an agent attaching on another relay after that replaces it.
func TestAgentAttachedWhileNATSAwayIsAnnounced(t *testing.T) {
	natsd, ns := startRestartable(t)
	evA := newNATSEvents()
	a := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second}, evA.options()...)
	b := startInstance(t, ns)
	channel := "0123456789abcdef0123456789abcdef"

	natsd.stop()
	<-evA.lost
	first := &fakeAgent{replaced: make(chan struct{}, 1)}
	a.router.Attach(channel, first) // its Put fails: NATS is away
	natsd.restart()
	<-evA.back

	// Announced: the agents bucket names it.
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	var kv jetstream.KeyValue
	waitFor(t, "the agent attached while NATS was away announced", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if kv == nil {
			if kv, err = js.KeyValue(ctx, "devhook_agents"); err != nil {
				kv = nil
				return false
			}
		}
		e, err := kv.Get(ctx, channel)
		return err == nil && strings.HasPrefix(string(e.Value()), a.router.ID()+"/")
	})
	// A newer agent elsewhere replaces it.
	waitFor(t, "the other relay back on NATS", 30*time.Second, b.nc.IsConnected)
	second := &fakeAgent{replaced: make(chan struct{}, 1)}
	b.router.Attach(channel, second)
	select {
	case <-first.replaced:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent attached while NATS was away was not replaced by a newer one")
	}
	select {
	case <-second.replaced:
		t.Fatal("the newer agent was replaced")
	default:
	}
}

// A NATS server that drops the relay's connection as soon as it is back
// is not dialled in a loop: a connection lost again right after its
// reconnect goes on with the backoff where it was, rather than start
// again from its first, short wait.
func TestNATSDroppingEachConnectionIsNotRedialledInALoop(t *testing.T) {
	ns := natstest.Run(t)
	ev := newNATSEvents()
	nc, err := nats.Connect(ns.ClientURL(), ev.options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const drops = 6
	start := time.Now()
	for i := range drops {
		id, err := nc.GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		if err := ns.DisconnectClientByID(id); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ev.back:
		case <-time.After(60 * time.Second):
			t.Fatalf("drop %d: not reconnected", i)
		}
	}
	elapsed := time.Since(start)
	tries := drops + int(ev.attempts.Load())
	t.Logf("%d connections dropped at once in %s: %d reconnects tried (bound %d)", drops, elapsed.Round(time.Millisecond), tries, reconnectBound(elapsed)+2)
	if tries > reconnectBound(elapsed)+2 {
		t.Fatalf("%d reconnects in %s: faster than the backoff (at most %d)", tries, elapsed, reconnectBound(elapsed)+2)
	}
}

// An agent that goes while its relay is cut off from NATS leaves no
// subscription behind on the NATS server once the relay is back: the
// channel's deliveries passed on by that relay all reach the agent that
// attached since on another relay, none dropped by a subscription the
// relay no longer has (then queued after the relay's timeout).
func TestAgentGoneWhileNATSAwayLeavesNoSubscription(t *testing.T) {
	natsd, ns := startRestartable(t)
	evA := newNATSEvents()
	a := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second}, evA.options()...)
	b := startInstance(t, ns)
	channel := "0123456789abcdef0123456789abcdef"
	first := &fakeAgent{replaced: make(chan struct{}, 1)}
	a.router.Attach(channel, first)

	natsd.stop()
	<-evA.lost
	a.router.Detach(channel, first) // NATS is away
	natsd.restart()
	<-evA.back
	waitFor(t, "the other relay back on NATS", 30*time.Second, b.nc.IsConnected)
	b.router.Attach(channel, &fakeAgent{replaced: make(chan struct{}, 1)})

	// The NATS server picks one of a channel's subscriptions for each
	// delivery: 20 would meet a subscription left behind, but for one
	// chance in a million.
	for i := range 20 {
		d := &devhook.Delivery{ID: fmt.Sprintf("delivery-%d", i), Channel: channel, Method: http.MethodPost, Path: "/"}
		ans, err := a.router.Deliver(context.Background(), d)
		if err != nil || ans.Status != http.StatusOK {
			t.Fatalf("delivery %d passed on by the relay that was cut off: %v, %v", i, ans, err)
		}
	}
}
