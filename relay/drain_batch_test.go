package relay_test

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
	"github.com/devhook/devhook/relay/wire"
)

// runBlindRouter is a Hub that, as a router that is not a
// relay.RunKicker, does not tell the agent's connection the run of what
// was queued: every run.status delivery of the channel then waits behind
// its queue. (The Router embedded, not the Hub: its KickRun is hidden.)
type runBlindRouter struct{ relay.Router }

// Issue 39, the drain's cursor: the drain reads on from the last delivery
// it read, but a delivery can be queued with an id before that one (its
// id is made as it arrives, and it is queued once its body is read). The
// Kick of its enqueue has the queue read again from its start: it reaches
// the agent, and before a later delivery of its run.
func TestDrainSendsADeliveryQueuedBehindItsCursor(t *testing.T) {
	_, hs, _ := relaytest.New(t, relay.Config{Window: 1, Router: runBlindRouter{relay.NewHub()}})
	cr := relaytest.Open(t, hs)
	for i := range 2 {
		if code, _ := post(t, cr.PublicURL+"/", runBody(t, fmt.Sprint("q", i), "queued")); code != http.StatusAccepted {
			t.Fatalf("with no agent: %d", code)
		}
	}
	conn := relaytest.Dial(t, hs, cr)
	q0 := relaytest.Receive(t, conn, 10*time.Second) // the window is full: the queue is not sent to its end

	// L, of run r, arrives: its id is made, its body is still coming.
	late := runBody(t, "r", "queued")
	raw := rawRequest(t, hs, cr, "Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(late)), late[:10])
	relaytest.WaitFor(t, "the relay reading L's body", func() bool {
		_, m := get(t, hs.URL+"/metrics")
		n, _ := strconv.Atoi(metricValue(m, "devhook_relay_inflight_bytes"))
		return n >= 10
	})
	// A delivery queued after L arrived, behind the queue: its id is
	// after L's.
	if code, _ := post(t, cr.PublicURL+"/", runBody(t, "q1", "running")); code != http.StatusAccepted {
		t.Fatalf("run.status behind the queue: %d, want 202", code)
	}
	// The drain reads on past L's id.
	conn.Ack(q0.ID)
	q1 := relaytest.Receive(t, conn, 10*time.Second)
	conn.Ack(q1.ID)
	past := relaytest.Receive(t, conn, 10*time.Second)
	if ev := devhook.ParseEvent(past.Body); ev.RunID != "q1" || ev.StatusV2 != "running" {
		t.Fatalf("third queued delivery %s, want run q1's running", past.Body)
	}
	// L comes whole, and is queued behind the queue, before the cursor.
	if _, err := raw.Write([]byte(late[10:])); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("L behind the queue: %d, want 202", resp.StatusCode)
	}
	next := runBody(t, "r", "running")
	if code, _ := post(t, cr.PublicURL+"/", next); code != http.StatusAccepted {
		t.Fatalf("run r's next status behind the queue: %d, want 202", code)
	}
	conn.Ack(past.ID)
	for _, want := range []string{late, next} {
		d := relaytest.Receive(t, conn, 20*time.Second)
		if string(d.Body) != want {
			t.Fatalf("got %s, want %s: run r's deliveries out of order, or L never sent", d.Body, want)
		}
		conn.Ack(d.ID)
	}
}

// countingStore is a relay.Store that counts its queue's reads (calls and
// deliveries returned) and removals (calls and ids), and whose removals
// wait, while gate is not nil, for a value from it.
type countingStore struct {
	*boltrelay.Store
	mu       sync.Mutex
	reads    int
	read     int        // deliveries returned by reads
	removals [][]string // ids of each removal, in order
	gate     chan struct{}
	fail     atomic.Bool // removals fail (a full disk)
}

func (s *countingStore) Queued(channel, after string, limit int) ([]*devhook.Delivery, error) {
	ds, err := s.Store.Queued(channel, after, limit)
	s.mu.Lock()
	s.reads++
	s.read += len(ds)
	s.mu.Unlock()
	return ds, err
}

func (s *countingStore) Dequeue(channel string, ids ...string) error {
	s.mu.Lock()
	s.removals = append(s.removals, slices.Clone(ids))
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if s.fail.Load() {
		return errNoSpace
	}
	return s.Store.Dequeue(channel, ids...)
}

func (s *countingStore) counts() (reads, read int, removals [][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.read, slices.Clone(s.removals)
}

// newCountingRelay is newRelay over a countingStore, with n run.status
// deliveries queued for a channel with no agent.
func newCountingRelay(t *testing.T, cfg relay.Config, cs *countingStore, n int) (string, wire.Credentials) {
	t.Helper()
	_, hs, _ := relaytest.NewWith(t, func(db *boltrelay.Store) relay.Config {
		cs.Store, cfg.Store = db, cs
		return cfg
	})
	cr := relaytest.Open(t, hs)
	for i := range n {
		if code, _ := post(t, cr.PublicURL+"/", runBody(t, fmt.Sprint("run-", i), "queued")); code != http.StatusAccepted {
			t.Fatalf("with no agent: %d", code)
		}
	}
	return hs.URL, cr
}

// Issue 39: the drain reads each queued delivery once, reading on from
// the last it read, not the deliveries in flight again for each ack (a
// backlog drained at 430-730 deliveries/s on a loaded machine).
func TestDrainReadsEachDeliveryOnce(t *testing.T) {
	const n, window = 200, 16
	cs := &countingStore{}
	u, cr := newCountingRelay(t, relay.Config{Window: window}, cs, n)
	conn := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: u, Credentials: cr})
	seen := map[string]bool{}
	for len(seen) < n {
		d := relaytest.Receive(t, conn, 20*time.Second)
		if seen[d.ID] {
			t.Fatalf("delivery %s sent twice", d.ID)
		}
		seen[d.ID] = true
		conn.Ack(d.ID)
	}
	waitLong(t, "the queue to empty", func() bool { k, _ := cs.QueueLen(cr.Channel); return k == 0 })
	reads, read, _ := cs.counts()
	if read > n+window {
		t.Fatalf("the drain read %d deliveries in %d reads for a queue of %d, window %d; want each read once (at most %d)", read, reads, n, window, n+window)
	}
}

// Issue 39: acks that arrive while a removal is being made are removed
// together by the next one: one call of the store (one transaction, one
// fsync) for all of them, not one each.
func TestAcksRemovedTogether(t *testing.T) {
	const n = 10
	cs := &countingStore{gate: make(chan struct{})}
	open := true
	t.Cleanup(func() {
		if open {
			close(cs.gate)
		}
	})
	u, cr := newCountingRelay(t, relay.Config{Window: 2 * n}, cs, n)
	conn := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: u, Credentials: cr})
	var ids []string
	for range n {
		ids = append(ids, relaytest.Receive(t, conn, 20*time.Second).ID)
	}
	conn.Ack(ids[0])
	relaytest.WaitFor(t, "the first removal", func() bool { _, _, r := cs.counts(); return len(r) == 1 })
	for _, id := range ids[1:] {
		conn.Ack(id)
	}
	// The acks reach the relay in order, after a live delivery sent after
	// them: once its answer is back, every ack has been read.
	liveAfter(t, conn, cr)
	open = false
	close(cs.gate)
	waitLong(t, "the queue to empty", func() bool { k, _ := cs.QueueLen(cr.Channel); return k == 0 })
	_, _, removals := cs.counts()
	if len(removals) != 2 || len(removals[1]) != n-1 {
		t.Fatalf("removals %v; want 2: the first ack, then the %d that came while it was made", removals, n-1)
	}
}

// liveAfter sends a live delivery without a run through the relay to conn
// and answers it, failing t if a queued delivery comes first: what conn
// wrote before its answer has been read by the relay once it returns.
func liveAfter(t *testing.T, conn *relayclient.Conn, cr wire.Credentials) {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(cr.PublicURL+"/live", "text/plain", strings.NewReader("live"))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	d := relaytest.Receive(t, conn, 20*time.Second)
	if d.Queued {
		t.Fatalf("queued delivery %s sent before the live one", d.ID)
	}
	conn.Respond(d.ID, http.StatusNoContent, nil, nil)
	if st := <-done; st != http.StatusNoContent {
		t.Fatalf("live delivery: %d, want the agent's 204", st)
	}
}

// Issue 39: the window bounds the deliveries the agent has not yet
// acknowledged; those acknowledged whose removal is still being made do
// not hold it up (up to a window more of them): the agent works on while
// removals commit. While removals fail, the drain stops there.
func TestWindowCountsUnacknowledged(t *testing.T) {
	const window = 2
	cs := &countingStore{}
	cs.fail.Store(true)
	u, cr := newCountingRelay(t, relay.Config{Window: window}, cs, 10)
	conn := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: u, Credentials: cr})
	got := map[string]int{}
	for range 2 * window {
		d := relaytest.Receive(t, conn, 20*time.Second)
		got[d.ID]++
		conn.Ack(d.ID)
	}
	// Nothing more while the removals fail: a live delivery gets through,
	// and no queued one came before it.
	liveAfter(t, conn, cr)
	if _, _, r := cs.counts(); len(r) == 0 {
		t.Fatal("no removal tried")
	}
	cs.fail.Store(false)
	for len(got) < 10 {
		d := relaytest.Receive(t, conn, 30*time.Second)
		got[d.ID]++
		conn.Ack(d.ID)
	}
	for id, k := range got {
		if k != 1 {
			t.Fatalf("delivery %s sent %d times", id, k)
		}
	}
}
