package natsrelay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// instance is one relay of a cluster: its own NATS connection, Store,
// Router, relay.Server and HTTP server.
type instance struct {
	URL    string
	nc     *nats.Conn
	store  *natsrelay.Store
	router *natsrelay.Router
	srv    *relay.Server
	hs     *httptest.Server
	once   sync.Once
	skew   atomic.Int64 // added to the time of the relay.Server (its sweeps'): tests move it
}

// later moves the instance's clock by d.
func (in *instance) later(d time.Duration) { in.skew.Add(int64(d)) }

func startInstance(t *testing.T, ns *server.Server, opts ...nats.Option) *instance {
	t.Helper()
	return startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second}, opts...)
}

func startInstanceWith(t *testing.T, ns *server.Server, cfg natsrelay.Config, opts ...nats.Option) *instance {
	t.Helper()
	return startInstanceSplit(t, ns, cfg, cfg, opts...)
}

// startInstanceSplit starts an instance whose Store and Router have
// configurations of their own (their Conn set here, Logf and
// ResponseTimeout the Store's).
func startInstanceSplit(t *testing.T, ns *server.Server, cfg, rcfg natsrelay.Config, opts ...nats.Option) *instance {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Conn, rcfg.Conn = nc, nc
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	rcfg.Logf, rcfg.ResponseTimeout = cfg.Logf, cfg.ResponseTimeout
	store, err := natsrelay.OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	router, err := natsrelay.OpenRouter(context.Background(), rcfg)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{nc: nc, store: store, router: router}
	srv, err := relay.NewServer(relay.Config{Store: store, Router: router, ResponseTimeout: cfg.ResponseTimeout, Logf: cfg.Logf,
		Now: func() time.Time { return time.Now().Add(time.Duration(in.skew.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	in.srv, in.hs = srv, httptest.NewServer(srv)
	in.URL = in.hs.URL
	t.Cleanup(in.stop)
	return in
}

// stop shuts the instance down as a crash would look to the others: its
// NATS connection goes first, then its agents are disconnected.
func (in *instance) stop() {
	in.once.Do(func() {
		in.nc.Close()
		in.srv.Close()
		in.hs.CloseClientConnections()
		in.hs.Close()
		in.router.Close()
	})
}

func openOn(t *testing.T, in *instance) wire.Credentials {
	t.Helper()
	cr, err := relayclient.Open(context.Background(), http.DefaultClient, in.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// agent is a minimal agent: it answers every delivery with answer and acks
// the queued ones, reporting each delivery on got.
type agent struct {
	conn *relayclient.Conn
	got  chan *devhook.Delivery
	done chan error
}

func dialAgent(t *testing.T, url string, cr wire.Credentials, status int) *agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: url, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	return runAgent(t, conn, status)
}

// runAgent answers conn's deliveries as dialAgent says.
func runAgent(t *testing.T, conn *relayclient.Conn, status int) *agent {
	a := &agent{conn: conn, got: make(chan *devhook.Delivery, 100), done: make(chan error, 1)}
	go func() {
		for {
			d, err := conn.Receive()
			if err != nil {
				a.done <- err
				return
			}
			conn.Respond(d.ID, status, http.Header{"X-Agent-Saw": {d.Method + " " + d.Path + "?" + d.RawQuery}, "X-Repeat": {"1", "2"}}, append([]byte("answer to "), d.Body...))
			if d.Queued {
				conn.Ack(d.ID)
			}
			a.got <- d
		}
	}()
	t.Cleanup(func() { conn.Close(); <-a.done })
	return a
}

func (a *agent) next(t *testing.T) *devhook.Delivery {
	t.Helper()
	select {
	case d := <-a.got:
		return d
	case err := <-a.done:
		t.Fatalf("agent's connection ended: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("no delivery reached the agent")
	}
	return nil
}

func send(t *testing.T, u, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	req.Header["X-Multi"] = []string{"a", "b"}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// ours counts the goroutines running code of the relay, of this package,
// of the NATS client or of a WebSocket: the NATS server's own come and go
// with its streams.
func ours() (int, string) {
	buf := make([]byte, 4<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	n := 0
	var found []string
	for _, g := range strings.Split(all, "\n\n") {
		for _, mark := range []string{"devhook/devhook/relay.", "devhook/devhook/natsrelay.", "nats-io/nats.go", "gorilla/websocket"} {
			if strings.Contains(g, mark) {
				n++
				found = append(found, g)
				break
			}
		}
	}
	return n, strings.Join(found, "\n\n")
}

func noLeaks(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, stacks := ours()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left (were %d):\n%s", n, before, stacks)
		}
		time.Sleep(10 * time.Millisecond) // goroutines end after Close returns
	}
}

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

// The Store keeps the relay.Store contract: unknown channels, the same id
// queued once, paging with after, dequeue of an unknown id, parking, and an
// unreadable entry reported with its id.
func TestStoreContract(t *testing.T) {
	ns := natstest.Run(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := natsrelay.OpenStore(context.Background(), natsrelay.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Channel("0123456789abcdef0123456789abcdef"); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("unknown channel: %v", err)
	}
	if _, err := s.Channel("../etc"); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("invalid channel: %v", err)
	}
	ch := relay.Channel{ID: "abcdef0123456789abcdef0123456789", TokenHash: []byte{1, 2}, CreatedAt: time.Unix(1, 0).UTC()}
	if err := s.PutChannel(ch); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Channel(ch.ID); err != nil || string(got.TokenHash) != "\x01\x02" || !got.CreatedAt.Equal(ch.CreatedAt) {
		t.Fatalf("channel %+v %v", got, err)
	}
	var ids []string
	for i := range 5 {
		id := uuid.Must(uuid.NewV7()).String()
		ids = append(ids, id)
		d := &devhook.Delivery{ID: id, Channel: ch.ID, Method: "POST", Path: "/p", Header: http.Header{"A": {"1", "2"}}, Body: []byte{byte(i)}, ReceivedAt: time.Unix(2, 0).UTC()}
		for range 2 {
			if err := s.Enqueue(ch.ID, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, err := s.Queued(ch.ID, "", 2)
	if err != nil || len(first) != 2 || first[0].ID != ids[0] || first[1].ID != ids[1] || !first[0].Queued || first[1].Body[0] != 1 {
		t.Fatalf("first page %v %v", first, err)
	}
	rest, err := s.Queued(ch.ID, first[1].ID, 0)
	if err != nil || len(rest) != 3 || rest[0].ID != ids[2] {
		t.Fatalf("rest %v %v", rest, err)
	}
	if err := s.Dequeue(ch.ID, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Dequeue(ch.ID, ids[0]); err != nil {
		t.Fatalf("dequeue twice: %v", err)
	}
	if err := s.Park(ch.ID, ids[1], "cannot be framed"); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Parked(ch.ID); err != nil || p[ids[1]] != "cannot be framed" {
		t.Fatalf("parked %v %v", p, err)
	}
	// An entry that is no deliver frame, between two good ones.
	badID := uuid.Must(uuid.NewV7()).String()
	// Published through JetStream, which answers once the stream has it:
	// a core publish and a flush return before the stream stores it.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), "devhook.queue."+ch.ID+"."+badID, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	all, err := s.Queued(ch.ID, "", 0)
	var bad *relay.UnreadableError
	if !errors.As(err, &bad) || bad.ID != badID || len(all) != 3 {
		t.Fatalf("unreadable entry: %d deliveries, %v", len(all), err)
	}
	if n, err := s.QueueLen(ch.ID); err != nil || n != 4 {
		t.Fatalf("queue length %d %v", n, err)
	}
	if n, err := s.Counts(); err != nil || n.Queued != 4 || n.Channels != 1 {
		t.Fatalf("counts %+v %v", n, err)
	}
	if status, err := s.Health(); err != nil || !strings.Contains(status, "nats: connected") {
		t.Fatalf("health %q %v", status, err)
	}
}

// /healthz reports the NATS connection: 503 once it is lost.
func TestHealthzReportsNATS(t *testing.T) {
	ns := natstest.Run(t)
	disconnected := make(chan struct{}, 1)
	in := startInstance(t, ns, nats.DisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case disconnected <- struct{}{}:
		default:
		}
	}))
	resp, body := send(t, in.URL+"/healthz", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "nats: connected to nats://127.0.0.1:") {
		t.Fatalf("healthz: %s %q", resp.Status, body)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	<-disconnected
	resp, body = send(t, in.URL+"/healthz", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "nats: ") {
		t.Fatalf("healthz with NATS down: %s %q", resp.Status, body)
	}
}

// A relay that vanished without closing its NATS connection still holds
// the agent's subscription until the NATS server notices: a delivery sent
// there gets no reply, and the sender's relay queues it (202) after its
// timeout rather than answer 504 for a delivery no agent has.
func TestDeliveryToAVanishedRelayIsQueued(t *testing.T) {
	ns := natstest.Run(t)
	in := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 300 * time.Millisecond})
	cr := openOn(t, in)
	// The vanished relay: subscribed for the channel, never answering.
	ghost, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer ghost.Close()
	got := make(chan *nats.Msg, 1)
	if _, err := ghost.QueueSubscribe("devhook.agent."+cr.Channel+".*", "devhook", func(m *nats.Msg) { got <- m }); err != nil {
		t.Fatal(err)
	}
	ghost.Flush()
	resp, body := send(t, in.URL+"/c/"+cr.Channel+"/x", "keep me")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("sender got %s %q, want 202", resp.Status, body)
	}
	<-got
	if n, err := in.store.QueueLen(cr.Channel); err != nil || n != 1 {
		t.Fatalf("queue length %d %v, want the delivery queued", n, err)
	}
}

// The queue is bounded in bytes: beyond Quota.ChannelBytes a channel's
// senders get 429, beyond Quota.TotalBytes every sender gets 503, both
// with Retry-After (nothing is dropped silently); the bucket of large
// deliveries is bounded alike.
func TestQueueBoundedBySize(t *testing.T) {
	ns := natstest.Run(t)
	in := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second, Quota: relay.Quota{ChannelBytes: 48 << 10, TotalBytes: 64 << 10}})
	cr, other := openOn(t, in), openOn(t, in)
	big := strings.Repeat("x", 40<<10)
	if resp, _ := send(t, in.URL+"/c/"+cr.Channel+"/x", big); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first: %s", resp.Status)
	}
	resp, body := send(t, in.URL+"/c/"+cr.Channel+"/x", big)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the channel's bytes: %s %q", resp.Status, body)
	}
	resp, body = send(t, in.URL+"/c/"+other.Channel+"/x", big)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the queue's bytes: %s %q", resp.Status, body)
	}
	if n, err := in.store.QueueLen(cr.Channel); err != nil || n != 1 {
		t.Fatalf("queue length %d %v", n, err)
	}
	// Deliveries over one NATS message: their objects' bucket is bounded
	// alike.
	large := startInstanceWith(t, ns, natsrelay.Config{Prefix: "large", ResponseTimeout: 10 * time.Second, Quota: relay.Quota{ChannelBytes: 3 << 20, TotalBytes: 3 << 20}})
	cr, other = openOn(t, large), openOn(t, large)
	if resp, body := send(t, large.URL+"/c/"+cr.Channel+"/x", strings.Repeat("y", 2<<20)); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first large: %s %q", resp.Status, body)
	}
	resp, body = send(t, large.URL+"/c/"+other.Channel+"/x", strings.Repeat("y", 2<<20))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the bucket's bytes: %s %q", resp.Status, body)
	}
	if n, err := large.store.QueueLen(cr.Channel); err != nil || n != 1 {
		t.Fatalf("queue length %d %v", n, err)
	}
}

// An instance cut off from NATS misses the kicks of deliveries queued
// meanwhile at other instances: once it is back, it reads its agents'
// queues again, and the agent gets them without another event.
func TestQueueReadAgainAfterReconnect(t *testing.T) {
	ns := natstest.Run(t)
	gate := make(chan struct{})
	down := make(chan struct{}, 1)
	// A JetStream call of A's whose reply is lost with the connection
	// (the read of the queue at the agent's connect) waits Timeout.
	a := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second, Timeout: time.Second},
		nats.CustomReconnectDelay(func(int) time.Duration { <-gate; return 0 }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case down <- struct{}{}:
			default:
			}
		}))
	b := startInstance(t, ns)
	cr := openOn(t, a)
	ag := dialAgent(t, a.URL, cr, http.StatusOK)
	id, err := a.nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	<-down
	for deadline := time.Now().Add(10 * time.Second); ns.NumClients() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the NATS server still has %d clients", ns.NumClients())
		}
		time.Sleep(5 * time.Millisecond) // polling the NATS server's state
	}
	if resp, body := send(t, b.URL+"/c/"+cr.Channel+"/x", "while A was cut off"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("with A cut off from NATS: %s %q", resp.Status, body)
	}
	close(gate) // A reconnects
	if d := ag.next(t); string(d.Body) != "while A was cut off" || !d.Queued {
		t.Fatalf("agent got %+v", d)
	}
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
