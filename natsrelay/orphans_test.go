package natsrelay_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// bucketState is what the bucket of large deliveries holds: its visible
// objects and its sets of chunks (one an object, named by its metadata
// or left without).
type bucketState struct {
	objects []string
	chunks  int
	bytes   uint64
}

func bucket(t *testing.T, ns *server.Server) bucketState {
	t.Helper()
	st, err := jsStream(t, ns, "OBJ_devhook_large")
	if err != nil {
		t.Fatal(err)
	}
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
	s, err := js.Stream(ctx, "OBJ_devhook_large")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("$O.devhook_large.C.>"))
	if err != nil {
		t.Fatal(err)
	}
	return bucketState{objects: objects(t, ns), chunks: len(info.State.Subjects), bytes: st.State.Bytes}
}

// objectEntries counts the queued and parked entries that point to an
// object, over every channel, and the queued entries in all.
func objectEntries(t *testing.T, ns *server.Server) (pointing, queued int) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"DEVHOOK_QUEUE", "DEVHOOK_PARKED"} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); ; {
			m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("devhook.>"))
			if err != nil {
				break // ErrMsgNotFound: the end
			}
			seq = m.Sequence + 1
			if name == "DEVHOOK_QUEUE" {
				queued++
			}
			if m.Header.Get("Devhook-Object") != "" {
				pointing++
			}
		}
	}
	return pointing, queued
}

// metric returns the value of a counter or gauge in the relay's /metrics.
func metric(t *testing.T, in *instance, name string) float64 {
	t.Helper()
	resp, err := http.Get(in.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// lineCounter is a Logf that counts the lines containing a mark.
type lineCounter struct {
	t    *testing.T
	mark string
	mu   sync.Mutex
	hits []string
}

func (c *lineCounter) Logf(format string, args ...any) {
	c.t.Logf(format, args...)
	line := fmt.Sprintf(format, args...)
	if strings.Contains(line, c.mark) {
		c.mu.Lock()
		c.hits = append(c.hits, line)
		c.mu.Unlock()
	}
}

func (c *lineCounter) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.hits...)
}

// A queue filled until large deliveries are refused (503) leaves no
// object behind: the bucket holds objects only for entries, and once the
// queue is drained a large delivery is queued again at once, on every
// channel (it was refused for the bucket's TTL, Quota.MaxAge and an hour,
// when each refused delivery left its object).
func TestFullQueueLeavesNoOrphans(t *testing.T) {
	const total = 8 << 20
	ns := natstest.Run(t)
	in := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second, Quota: relay.Quota{TotalBytes: total, ChannelBytes: total}})
	small := []wire.Credentials{openOn(t, in), openOn(t, in)}
	large := []wire.Credentials{openOn(t, in), openOn(t, in), openOn(t, in)}

	// The queue fills with small deliveries, smaller and smaller, until
	// even a few bytes are refused (over two channels: the channel's
	// quota counts a little less than the queue's bytes).
	accepted := map[string]int{}
	for _, size := range []int{512 << 10, 64 << 10, 8 << 10, 1 << 10, 16} {
		for i := 0; ; i++ {
			if i > 64 {
				t.Fatalf("%d bytes: never refused", size)
			}
			cr := small[i%2]
			resp, body := send(t, in.URL+"/c/"+cr.Channel+"/s", strings.Repeat("s", size))
			if resp.StatusCode == http.StatusServiceUnavailable {
				break
			}
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("filling the queue: %s %q", resp.Status, body)
			}
			accepted[cr.Channel]++
		}
	}
	// The flood of large deliveries: twice what the bucket holds. The
	// first may find room for their entry in the queue.
	body := bigBody(2<<20, 11)
	refused := 0
	for round := range 3 {
		for _, cr := range large {
			resp, got := send(t, in.URL+"/c/"+cr.Channel+"/l", body)
			switch {
			case resp.StatusCode == http.StatusAccepted:
				accepted[cr.Channel]++
			case resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "":
				t.Fatalf("round %d: a large delivery with the queue full: %s %q", round, resp.Status, got)
			default:
				refused++
			}
		}
	}
	if refused < 6 {
		t.Fatalf("%d large deliveries refused, want the queue full", refused)
	}
	b := bucket(t, ns)
	pointing, queued := objectEntries(t, ns)
	t.Logf("after the flood: %d objects (%d sets of chunks, %d bytes) in the bucket for %d entries pointing to one (%d queued in all)",
		len(b.objects), b.chunks, b.bytes, pointing, queued)
	if len(b.objects) != pointing || b.chunks != pointing {
		t.Fatalf("after the flood: objects %v and %d sets of chunks for %d entries pointing to one: orphans", b.objects, b.chunks, pointing)
	}

	// Drained, the queue takes a large delivery at once, on every channel.
	for _, cr := range append(small, large...) {
		ag := dialAgent(t, in.URL, cr, http.StatusOK)
		for range accepted[cr.Channel] {
			ag.next(t)
		}
		waitQueueEmpty(t, in.store, cr.Channel)
		ag.conn.Close()
		<-ag.done
		ag.done <- nil // for the cleanup
	}
	for _, cr := range large {
		if resp, got := send(t, in.URL+"/c/"+cr.Channel+"/l", body); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("a large delivery once the queue drained: %s, %.200q", resp.Status, got)
		}
	}
	b = bucket(t, ns)
	pointing, queued = objectEntries(t, ns)
	t.Logf("after the drain: %d objects (%d sets of chunks) for %d entries pointing to one (%d queued in all)", len(b.objects), b.chunks, pointing, queued)
	if len(b.objects) != len(large) || pointing != len(large) || b.chunks != len(large) {
		t.Fatalf("after the drain: objects %v, %d sets of chunks, %d entries pointing to one", b.objects, b.chunks, pointing)
	}
}

// putOrphan writes object name as writeEntry would, and no entry: a
// writer killed between its two steps.
func putOrphan(t *testing.T, in *instance, name string, size int) {
	t.Helper()
	js, err := jetstream.New(in.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := js.ObjectStore(ctx, "devhook_large")
	if err != nil {
		t.Fatal(err)
	}
	meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(in.store.PartSize())}}
	if _, err := obs.Put(ctx, meta, strings.NewReader(bigBody(size, 3))); err != nil {
		t.Fatal(err)
	}
}

// putChunks writes chunks of an object and not its metadata: a writer
// killed while it wrote the object.
func putChunks(t *testing.T, in *instance, n int) {
	t.Helper()
	js, err := jetstream.New(in.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subject := "$O.devhook_large.C." + strings.ReplaceAll(uuid.NewString(), "-", "")
	for i := range n {
		if _, err := js.Publish(ctx, subject, []byte(bigBody(64<<10, uint64(i)))); err != nil {
			t.Fatal(err)
		}
	}
}

// What a writer killed between its steps leaves (an object no entry points
// to, chunks no object names) is removed by the sweep once older than
// Config.OrphanGrace, counted in /metrics and logged once with the count;
// the objects of queued and parked deliveries stay.
func TestSweepRemovesOrphans(t *testing.T) {
	ns := natstest.Run(t)
	logs := &lineCounter{t: t, mark: "removed from bucket"}
	in := startInstanceWith(t, ns, natsrelay.Config{ResponseTimeout: 10 * time.Second, Logf: logs.Logf})
	cr := openOn(t, in)
	var ids []string
	for i := range 2 {
		resp, got := send(t, in.URL+"/c/"+cr.Channel+"/q", bigBody(2<<20, uint64(i)))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("queued: %s %q", resp.Status, got)
		}
		ids = append(ids, resp.Header.Get("Devhook-Delivery"))
	}
	if err := in.store.Park(cr.Channel, ids[1], "kept for the operator"); err != nil {
		t.Fatal(err)
	}
	orphan := cr.Channel + "." + uuid.Must(uuid.NewV7()).String()
	putOrphan(t, in, orphan, 2<<20)
	putChunks(t, in, 3)
	if b := bucket(t, ns); len(b.objects) != 3 || b.chunks != 4 {
		t.Fatalf("before the sweep: objects %v, %d sets of chunks", b.objects, b.chunks)
	}

	// Younger than the grace: a writer may be between its steps.
	in.srv.Sweep()
	in.later(natsrelay.DefaultOrphanGrace / 2)
	in.srv.Sweep()
	if b := bucket(t, ns); len(b.objects) != 3 || b.chunks != 4 || metric(t, in, "devhook_relay_queue_orphans_removed_total") != 0 {
		t.Fatalf("within the grace: objects %v, %d sets of chunks", b.objects, b.chunks)
	}
	in.later(natsrelay.DefaultOrphanGrace)
	in.srv.Sweep()
	b := bucket(t, ns)
	if len(b.objects) != 2 || b.chunks != 2 || strings.Contains(strings.Join(b.objects, " "), orphan) {
		t.Fatalf("after the sweep: objects %v, %d sets of chunks; want the queued and the parked delivery's", b.objects, b.chunks)
	}
	if n := metric(t, in, "devhook_relay_queue_orphans_removed_total"); n != 2 {
		t.Fatalf("devhook_relay_queue_orphans_removed_total %v, want 2", n)
	}
	if l := logs.lines(); len(l) != 1 || !strings.Contains(l[0], "2 orphans") || !strings.Contains(l[0], "1 objects") || !strings.Contains(l[0], "1 sets of chunks (3 chunks)") {
		t.Fatalf("log lines %q, want one with the count", l)
	}
	// Nothing more to remove: no more counted, no more logged.
	in.later(natsrelay.DefaultOrphanGrace)
	in.srv.Sweep()
	if n := metric(t, in, "devhook_relay_queue_orphans_removed_total"); n != 2 || len(logs.lines()) != 1 {
		t.Fatalf("a sweep with nothing to remove: %v counted, %d lines", n, len(logs.lines()))
	}
	// The queued and the parked deliveries are whole.
	ag := dialAgent(t, in.URL, cr, http.StatusOK)
	if d := ag.next(t); d.ID != ids[0] || string(d.Body) != bigBody(2<<20, 0) {
		t.Fatalf("agent got %s, %d bytes", d.ID, len(d.Body))
	}
	if p, err := in.store.ParkedDelivery(ids[1]); err != nil || p.Size != 2<<20 {
		t.Fatalf("parked delivery: %+v %v", p, err)
	}
}
