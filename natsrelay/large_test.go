package natsrelay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// bigBody is n bytes that no shift or truncation leaves equal.
func bigBody(n int, seed uint64) string {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
	return string(b)
}

// objects lists the visible objects of the bucket of large deliveries.
func objects(t *testing.T, ns *server.Server) []string {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := js.ObjectStore(ctx, "devhook_large")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	return names
}

// logWatch is a Logf that also reports lines containing a mark.
type logWatch struct {
	t    *testing.T
	mark string
	seen chan string
}

func watchLog(t *testing.T, mark string) *logWatch {
	return &logWatch{t: t, mark: mark, seen: make(chan string, 16)}
}

func (w *logWatch) Logf(format string, args ...any) {
	w.t.Logf(format, args...)
	if line := strings.TrimSpace(fmt.Sprintf(format, args...)); strings.Contains(line, w.mark) {
		select {
		case w.seen <- line:
		default:
		}
	}
}

func (w *logWatch) wait(t *testing.T) string {
	t.Helper()
	select {
	case line := <-w.seen:
		return line
	case <-time.After(15 * time.Second):
		t.Fatalf("no log line with %q", w.mark)
	}
	return ""
}

// A 10 MiB delivery sent to instance B reaches the agent on instance A
// byte-exact through a NATS server at its defaults (max_payload 1 MiB),
// and the sender gets the agent's real answer, larger than 10 MiB: both
// crossed NATS in parts. Then the other way round, and a delivery just
// under one message and one just over.
func TestLargeDeliveryAcrossInstances(t *testing.T) {
	ns := natstest.Run(t)
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr := openOn(t, a)
	ag := dialAgent(t, a.URL, cr, http.StatusCreated)
	size := a.store.PartSize()
	for i, tc := range []struct {
		via *instance
		n   int
	}{
		{b, wire.DefaultMaxBody},
		{a, wire.DefaultMaxBody},
		{b, size - 2<<10}, // one message
		{b, size + 1},     // two parts, the answer too
	} {
		body := bigBody(tc.n, uint64(i))
		resp, got := send(t, tc.via.URL+"/c/"+cr.Channel+"/big", body)
		if resp.StatusCode != http.StatusCreated || got != "answer to "+body || resp.Header.Get("X-Agent-Saw") != "POST /big?" {
			t.Fatalf("%d bytes via %s: %s, answer of %d bytes (want %d)", tc.n, tc.via.URL, resp.Status, len(got), len(body)+10)
		}
		d := ag.next(t)
		if d.Queued || string(d.Body) != body || strings.Join(d.Header["X-Multi"], ",") != "a,b" {
			t.Fatalf("%d bytes via %s: the agent got %d bytes, queued %v", tc.n, tc.via.URL, len(d.Body), d.Queued)
		}
	}
	select {
	case d := <-ag.got:
		t.Fatalf("a delivery came twice: %d bytes", len(d.Body))
	default:
	}
}

// A 10 MiB delivery sent while the agent is away is queued (202), its
// frame in the object bucket, and reaches the agent byte-exact when it
// connects, with the small ones queued around it in order; once
// acknowledged, the queue and the bucket are empty.
func TestLargeDeliveryThroughTheQueue(t *testing.T) {
	ns := natstest.Run(t)
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr := openOn(t, a)
	size := a.store.PartSize()
	bodies := []string{"small", bigBody(wire.DefaultMaxBody, 1), bigBody(size-2<<10, 2), bigBody(size+1, 3), "last"}
	for i, body := range bodies {
		resp, got := send(t, []*instance{a, b}[i%2].URL+"/c/"+cr.Channel+"/q", body)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %d: %s %q", i, resp.Status, got)
		}
	}
	if names := objects(t, ns); len(names) != 2 {
		t.Fatalf("objects %v, want the two deliveries over one message", names)
	}
	ag := dialAgent(t, b.URL, cr, http.StatusOK)
	for i, body := range bodies {
		d := ag.next(t)
		if !d.Queued || string(d.Body) != body {
			t.Fatalf("queued delivery %d: %d bytes, want %d", i, len(d.Body), len(body))
		}
	}
	if resp, _ := send(t, a.URL+"/c/"+cr.Channel+"/live", "live"); resp.StatusCode != http.StatusOK {
		t.Fatalf("live: %s", resp.Status)
	}
	ag.next(t)
	waitQueueEmpty(t, a.store, cr.Channel)
	if names := waitObjects(t, ns, 0); len(names) != 0 {
		t.Fatalf("objects left after acks: %v", names)
	}
}

// An instance that loses NATS while it writes a large delivery's object,
// or between the object and the queue entry, leaves nothing in the queue:
// its sender gets 503 and sends again, and the agent gets that delivery
// once. What it wrote is removed by the sweep, once older than
// Config.OrphanGrace.
func TestQueueWriterKilledBetweenParts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kill   func(in *instance)
		orphan bool // the whole object is left behind
	}{
		{"mid-object", func(in *instance) {
			in.store.SetBeforePart(func(written int) {
				if written >= 3<<20 {
					in.nc.Close()
				}
			}, nil)
		}, false},
		{"after the object", func(in *instance) {
			in.store.SetBeforePart(nil, func(string) { in.nc.Close() })
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := natstest.Run(t)
			a, b := startInstance(t, ns), startInstance(t, ns)
			cr := openOn(t, a)
			tc.kill(a)
			body := bigBody(wire.DefaultMaxBody, 7)
			resp, got := send(t, a.URL+"/c/"+cr.Channel+"/q", body)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("sender got %s %q, want 503 and Retry-After", resp.Status, got)
			}
			lost := resp.Header.Get("Devhook-Delivery")
			if n, err := b.store.QueueLen(cr.Channel); err != nil || n != 0 {
				t.Fatalf("queue length %d %v: a delivery the sender was refused is queued", n, err)
			}
			names := objects(t, ns)
			if tc.orphan != (len(names) == 1 && strings.HasSuffix(names[0], lost)) || !tc.orphan && len(names) != 0 {
				t.Fatalf("objects %v", names)
			}
			// The sender sends again.
			if resp, _ := send(t, b.URL+"/c/"+cr.Channel+"/q", body); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("sent again: %s", resp.Status)
			}
			ag := dialAgent(t, b.URL, cr, http.StatusOK)
			if d := ag.next(t); !d.Queued || string(d.Body) != body || d.ID == lost {
				t.Fatalf("agent got %s: %d bytes", d.ID, len(d.Body))
			}
			if resp, _ := send(t, b.URL+"/c/"+cr.Channel+"/live", "live"); resp.StatusCode != http.StatusOK {
				t.Fatalf("live: %s", resp.Status)
			}
			if d := ag.next(t); d.Queued {
				t.Fatalf("a queued delivery came twice: %s", d.ID)
			}
			waitQueueEmpty(t, b.store, cr.Channel)
			if left := waitObjects(t, ns, len(names)); len(left) != len(names) {
				t.Fatalf("objects %v after the ack, were %v", left, names)
			}
			// What is left behind (the object, or chunks no object
			// names) goes with the next sweep after the grace.
			left := bucket(t, ns)
			orphans := left.chunks // the delivery sent again went with its object
			if tc.orphan && (orphans != 1 || len(left.objects) != 1) {
				t.Fatalf("before the sweep: objects %v, %d sets of chunks, want the orphan", left.objects, left.chunks)
			}
			t.Logf("before the sweep: objects %v, %d sets of chunks", left.objects, left.chunks)
			b.later(natsrelay.DefaultOrphanGrace + time.Minute)
			b.srv.Sweep()
			if after := bucket(t, ns); len(after.objects) != 0 || after.chunks != 0 {
				t.Fatalf("after the sweep: objects %v, %d sets of chunks", after.objects, after.chunks)
			}
			if n := metric(t, b, "devhook_relay_queue_orphans_removed_total"); n != float64(orphans) {
				t.Fatalf("devhook_relay_queue_orphans_removed_total %v, want %d", n, orphans)
			}
		})
	}
}

func jsStream(t *testing.T, ns *server.Server, name string) (*jetstream.StreamInfo, error) {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

// An instance that loses NATS while it sends a large delivery's parts to
// the agent's instance: the agent's instance never hands the partial
// delivery to the agent; the sender gets 503, sends again, and the agent
// gets it once. One that loses NATS while it sends the answer's parts: the
// sender's instance queues the delivery (202), nothing is lost.
func TestInstanceKilledBetweenRequestParts(t *testing.T) {
	ns := natstest.Run(t)
	partial := watchLog(t, "did not come whole")
	a := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second, Timeout: time.Second, Logf: partial.Logf})
	b := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second, Timeout: time.Second})
	cr := openOn(t, a)
	ag := dialAgent(t, a.URL, cr, http.StatusOK)
	b.router.SetBeforePart(func(i int) {
		if i == 3 {
			b.nc.Close()
		}
	})
	body := bigBody(wire.DefaultMaxBody, 9)
	resp, got := send(t, b.URL+"/c/"+cr.Channel+"/x", body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("sender got %s %q, want 503 and Retry-After", resp.Status, got)
	}
	t.Logf("the agent's relay: %s", partial.wait(t))
	if resp, _ := send(t, a.URL+"/c/"+cr.Channel+"/x", body); resp.StatusCode != http.StatusOK {
		t.Fatalf("sent again: %s", resp.Status)
	}
	if d := ag.next(t); string(d.Body) != body {
		t.Fatalf("agent got %d bytes", len(d.Body))
	}
	select {
	case d := <-ag.got:
		t.Fatalf("the agent got a delivery twice: %s", d.ID)
	default:
	}

	// The agent's relay loses NATS while it sends the answer. The
	// sender's relay gives up on the missing part after its Router's
	// Timeout (short, to keep the test quick), and queues the delivery:
	// its Store writes a 10 MiB object, which a loaded machine does not
	// do within so short a Timeout (the sender would get 503): its
	// Store has the default.
	c := startInstanceSplit(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second}, natsrelay.Config{Timeout: time.Second})
	a.router.SetBeforePart(func(i int) {
		if i == 3 {
			a.nc.Close()
		}
	})
	resp, got = send(t, c.URL+"/c/"+cr.Channel+"/x", body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("answer cut: sender got %s %q, want 202", resp.Status, got)
	}
	if n, err := c.store.QueueLen(cr.Channel); err != nil || n != 1 {
		t.Fatalf("queue length %d %v", n, err)
	}
	ag.next(t)
}

// A queued delivery whose object is missing is parked with the reason,
// not dropped, and the queue behind it goes on.
func TestMissingObjectIsParked(t *testing.T) {
	ns := natstest.Run(t)
	in := startInstance(t, ns)
	cr := openOn(t, in)
	big := bigBody(2<<20, 4)
	resp, _ := send(t, in.URL+"/c/"+cr.Channel+"/q", big)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("queued: %s", resp.Status)
	}
	id := resp.Header.Get("Devhook-Delivery")
	if resp, _ := send(t, in.URL+"/c/"+cr.Channel+"/q", "behind"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("queued: %s", resp.Status)
	}
	// The object goes, behind the relay's back.
	js, err := jetstream.New(in.nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(context.Background(), "devhook_large")
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Delete(context.Background(), cr.Channel+"."+id); err != nil {
		t.Fatal(err)
	}
	_, err = in.store.Queued(cr.Channel, "", 0)
	var bad *relay.UnreadableError
	if !errors.As(err, &bad) || bad.ID != id || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("reading the queue: %v", err)
	}
	ag := dialAgent(t, in.URL, cr, http.StatusOK)
	if d := ag.next(t); string(d.Body) != "behind" {
		t.Fatalf("agent got %q", d.Body)
	}
	parked, err := in.store.Parked(cr.Channel)
	if err != nil || !strings.Contains(parked[id], "missing") {
		t.Fatalf("parked %v %v", parked, err)
	}
}

// A parked large delivery keeps its object; the Store contract holds for
// large deliveries: queued once, read back, dequeued with their object.
func TestStoreContractLarge(t *testing.T) {
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
	ch := "abcdef0123456789abcdef0123456789"
	var ds []*devhook.Delivery
	for i := range 3 {
		d := &devhook.Delivery{ID: "0190000" + string(rune('0'+i)) + "-0000-7000-8000-000000000000", Channel: ch, Method: "POST", Path: "/p",
			Header: http.Header{"A": {"1"}}, Body: []byte(bigBody(3<<20, uint64(i))), ReceivedAt: time.Unix(2, 0).UTC()}
		ds = append(ds, d)
		for range 2 {
			if err := s.Enqueue(ch, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, err := s.QueueLen(ch); err != nil || n != 3 {
		t.Fatalf("queue length %d %v", n, err)
	}
	got, err := s.Queued(ch, "", 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("queued %d %v", len(got), err)
	}
	for i, d := range got {
		if d.ID != ds[i].ID || string(d.Body) != string(ds[i].Body) || !d.Queued || d.Header.Get("A") != "1" {
			t.Fatalf("delivery %d: %s, %d bytes", i, d.ID, len(d.Body))
		}
	}
	if err := s.Park(ch, ds[0].ID, "a reason\nwith a newline"); err != nil {
		t.Fatal(err)
	}
	if err := s.Dequeue(ch, ds[1].ID); err != nil {
		t.Fatal(err)
	}
	if names := objects(t, ns); len(names) != 2 {
		t.Fatalf("objects %v: want the parked one's and the queued one's", names)
	}
	if p, err := s.Parked(ch); err != nil || p[ds[0].ID] != "a reason with a newline" {
		t.Fatalf("parked %v %v", p, err)
	}
	// Dequeued by a Store that did not read it.
	other, err := natsrelay.OpenStore(context.Background(), natsrelay.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Dequeue(ch, ds[2].ID); err != nil {
		t.Fatal(err)
	}
	if names := objects(t, ns); len(names) != 1 || names[0] != ch+"."+ds[0].ID {
		t.Fatalf("objects %v: want the parked one's", names)
	}
	if n, err := s.QueueLen(ch); err != nil || n != 0 {
		t.Fatalf("queue length %d %v", n, err)
	}
}

// A NATS server whose max_payload is small still carries the largest
// deliveries, in more parts; one too small to be of use is refused at
// start, saying what to change.
func TestMaxPayloadChecked(t *testing.T) {
	tiny := natstest.Run(t, natstest.MaxPayload(16<<10))
	nc, err := nats.Connect(tiny.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, err = natsrelay.OpenStore(context.Background(), natsrelay.Config{Conn: nc})
	if err == nil || !strings.Contains(err.Error(), "max_payload is 16384 bytes") || !strings.Contains(err.Error(), "raise it") {
		t.Fatalf("OpenStore with a 16 KiB max_payload: %v", err)
	}

	ns := natstest.Run(t, natstest.MaxPayload(64<<10))
	a, b := startInstance(t, ns), startInstance(t, ns)
	cr := openOn(t, a)
	body := bigBody(wire.DefaultMaxBody, 5)
	if resp, _ := send(t, b.URL+"/c/"+cr.Channel+"/q", body); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("queued: %s", resp.Status)
	}
	ag := dialAgent(t, a.URL, cr, http.StatusOK)
	if d := ag.next(t); !d.Queued || string(d.Body) != body {
		t.Fatalf("queued delivery: %d bytes", len(d.Body))
	}
	resp, got := send(t, b.URL+"/c/"+cr.Channel+"/live", body)
	if resp.StatusCode != http.StatusOK || got != "answer to "+body {
		t.Fatalf("across instances: %s, %d bytes", resp.Status, len(got))
	}
	if d := ag.next(t); string(d.Body) != body {
		t.Fatalf("live delivery: %d bytes", len(d.Body))
	}
}

// waitQueueEmpty waits for the removal of channel's acknowledged
// deliveries, which leave the queue off the agent connection's reader
// (relay/drain.go), failing t after 10 s.
func waitQueueEmpty(t *testing.T, s *natsrelay.Store, channel string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := s.QueueLen(channel)
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue length %d %v after the acks", n, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the store
	}
}

// waitObjects returns the objects of the large deliveries' bucket once
// there are n, or after 10 s: a removal takes the queue entry first, then
// its object.
func waitObjects(t *testing.T, ns *server.Server, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		names := objects(t, ns)
		if len(names) == n || time.Now().After(deadline) {
			return names
		}
		time.Sleep(5 * time.Millisecond) // polling the bucket
	}
}
