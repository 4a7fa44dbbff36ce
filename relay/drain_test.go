package relay_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
)

// faultyStore is a relay.Store whose queue reads fail while failReads is
// above zero (each failure counts it down), whose removals fail while
// failRemovals is set, and wait for unblock while it is set.
type faultyStore struct {
	*boltrelay.Store
	failReads    atomic.Int32
	reads        atomic.Int32
	failRemovals atomic.Bool
	removes      atomic.Int32  // calls of Dequeue
	removing     chan string   // told of each removal as it starts
	unblock      chan struct{} // when not nil, removals wait for it
}

// errNoSpace is what a removal from a full bbolt file fails with.
var errNoSpace = fmt.Errorf("boltrelay: dequeue: %w: write relay.db: %w", relay.ErrStorageFull, syscall.ENOSPC)

func (s *faultyStore) Queued(channel, after string, limit int) ([]*devhook.Delivery, error) {
	s.reads.Add(1)
	if s.failReads.Add(-1) >= 0 {
		return nil, errors.New("injected: read queue: input/output error")
	}
	return s.Store.Queued(channel, after, limit)
}

func (s *faultyStore) Dequeue(channel string, ids ...string) error {
	s.removes.Add(1)
	if s.failRemovals.Load() {
		return errNoSpace
	}
	if s.removing != nil {
		s.removing <- ids[0]
	}
	if s.unblock != nil {
		<-s.unblock
	}
	return s.Store.Dequeue(channel, ids...)
}

// newFaultyRelay is newRelay over a faultyStore.
func newFaultyRelay(t *testing.T, cfg relay.Config, fs *faultyStore) (*relay.Server, string) {
	t.Helper()
	srv, hs, _ := relaytest.NewWith(t, func(db *boltrelay.Store) relay.Config {
		fs.Store, cfg.Store = db, fs
		return cfg
	})
	return srv, hs.URL
}

// Issue 29, the drain: a read of the queue that fails is tried again after
// a backoff, counted in /metrics and logged once with a count (issue 36),
// and the queue reaches the agent without a new delivery, an ack or a
// reconnect.
func TestDrainRetriesAFailedQueueRead(t *testing.T) {
	var logs logBuffer
	fs := &faultyStore{}
	srv, u := newFaultyRelay(t, relay.Config{Logf: logs.printf}, fs)
	cr, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	cr.PublicURL = u + "/c/" + cr.Channel
	var ids []string
	for i := range 3 {
		st, _ := post(t, cr.PublicURL+"/", fmt.Sprint(i))
		if st != http.StatusAccepted {
			t.Fatalf("delivery %d with no agent: %d", i, st)
		}
	}
	ids = queuedIDs(t, fs.Store, cr.Channel)
	const failures = 3
	fs.failReads.Store(failures)
	conn := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: u, Credentials: cr})
	// Not acknowledged: no ack kicks the drain.
	for _, id := range ids {
		if d := relaytest.Receive(t, conn, 20*time.Second); d.ID != id {
			t.Fatalf("got %s, want %s", d.ID, id)
		}
	}
	if n := fs.reads.Load(); n < failures+1 {
		t.Fatalf("%d reads of the queue, want at least %d", n, failures+1)
	}
	if got := strings.Count(logs.String(), "read queue: injected"); got != 1 {
		t.Fatalf("%d log lines of the failed reads, want 1 (then a count); log:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "reading it again in") || !strings.Contains(logs.String(), fmt.Sprintf("read queue: works again after %d failures", failures)) {
		t.Fatalf("the log does not say when the queue is read again, nor how many reads failed:\n%s", logs.String())
	}
	_, m := get(t, u+"/metrics")
	if v, _ := strconv.Atoi(metricValue(m, "devhook_relay_queue_read_errors_total")); v < failures {
		t.Fatalf("devhook_relay_queue_read_errors_total %q, want at least %d", metricValue(m, "devhook_relay_queue_read_errors_total"), failures)
	}
}

// A queue that keeps failing is read by the backoff's schedule, however
// many deliveries are queued meanwhile (each one a kick of the drain):
// a few reads, not one per kick, and one log line.
func TestDrainReadBackoffIsBounded(t *testing.T) {
	var logs logBuffer
	fs := &faultyStore{}
	srv, u := newFaultyRelay(t, relay.Config{Logf: logs.printf}, fs)
	cr, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := u + "/c/" + cr.Channel + "/"
	if st, _ := post(t, pub, runBody(t, "r1", "first")); st != http.StatusAccepted {
		t.Fatalf("with no agent: %d", st)
	}
	fs.failReads.Store(1 << 30)
	start := time.Now()
	relaytest.DialWith(t, relayclient.DialConfig{RelayURL: u, Credentials: cr})
	// The queue is not sent: run.status deliveries of its run are queued
	// behind it, and each queued one kicks the drain.
	const kicks = 40
	for i := range kicks {
		if st, _ := post(t, pub, runBody(t, "r1", fmt.Sprint("s", i))); st != http.StatusAccepted {
			t.Fatalf("run.status behind an unsent queue: %d, want 202", st)
		}
	}
	reads, elapsed := fs.reads.Load(), time.Since(start)
	bound := 2*relay.RetrySchedule(relay.RetryMin, relay.RetryMax, elapsed) + 2
	if int(reads) > bound {
		t.Fatalf("%d reads of a failing queue in %s with %d kicks, want at most %d (the backoff's schedule, with slack)", reads, elapsed, kicks, bound)
	}
	if got := logLines(logs.String(), "read queue"); got != 1 {
		t.Fatalf("%d log lines of %d failed reads, want 1; log:\n%s", got, reads, logs.String())
	}
}

// Issue 36: a removal of an acknowledged delivery that fails (a full
// disk) leaves it queued and in flight: it is not sent again on the
// connection, the removal is tried again by the backoff's schedule,
// logged once, counted in /metrics; ack counts only what was removed; the
// queue empties by itself once removals work.
func TestFailedRemovalIsNotResent(t *testing.T) {
	var logs logBuffer
	fs := &faultyStore{}
	srv, u := newFaultyRelay(t, relay.Config{Logf: logs.printf}, fs)
	cr, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := post(t, u+"/c/"+cr.Channel+"/", "queued"); st != http.StatusAccepted {
		t.Fatalf("with no agent: %d", st)
	}
	fs.failRemovals.Store(true)
	start := time.Now()
	conn := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: u, Credentials: cr})
	var got atomic.Int32
	go func() {
		for {
			d, err := conn.Receive()
			if err != nil {
				return
			}
			got.Add(1)
			conn.Ack(d.ID)
		}
	}()
	relaytest.WaitFor(t, "four failed removals", func() bool { return fs.removes.Load() >= 4 })
	removes, elapsed := fs.removes.Load(), time.Since(start)
	if n := got.Load(); n != 1 {
		t.Fatalf("the agent got the delivery %d times while its removal failed, want once", n)
	}
	if bound := 2*relay.RetrySchedule(relay.RetryMin, relay.RetryMax, elapsed) + 2; int(removes) > bound {
		t.Fatalf("%d removals in %s, want at most %d (the backoff's schedule, with slack)", removes, elapsed, bound)
	}
	_, m := get(t, u+"/metrics")
	for name, want := range map[string]string{
		"devhook_relay_queue_acked_total":      "0",
		"devhook_relay_queue_removals_waiting": "1",
	} {
		if v := metricValue(m, name); v != want {
			t.Errorf("while the removal fails: %s = %q, want %s", name, v, want)
		}
	}
	if v, _ := strconv.Atoi(metricValue(m, "devhook_relay_queue_remove_errors_total")); v < 4 {
		t.Errorf("devhook_relay_queue_remove_errors_total = %d, want at least 4", v)
	}
	if n := logLines(logs.String(), "remove acknowledged"); n != 1 {
		t.Fatalf("%d log lines of %d failed removals, want 1; log:\n%s", n, removes, logs.String())
	}

	fs.failRemovals.Store(false)
	waitLong(t, "the queue to empty once removals work", func() bool { n, _ := fs.QueueLen(cr.Channel); return n == 0 })
	waitLong(t, "the removal counted", func() bool {
		_, m = get(t, u+"/metrics")
		return metricValue(m, "devhook_relay_queue_acked_total") == "1" && metricValue(m, "devhook_relay_queue_removals_waiting") == "0"
	})
	if n := got.Load(); n != 1 {
		t.Fatalf("the agent got the delivery %d times, want once", n)
	}
	if !strings.Contains(logs.String(), "removing acknowledged deliveries from the queue works again after") {
		t.Fatalf("the log does not say removals work again:\n%s", logs.String())
	}
}

// Issue 36: when the connection ends while removals fail, each is tried
// once more, not again and again; the deliveries stay queued and reach
// the channel's next connection once; the relay closes without waiting
// for removals that fail.
func TestFailedRemovalsWhenTheConnectionEnds(t *testing.T) {
	var logs logBuffer
	fs := &faultyStore{}
	srv, u := newFaultyRelay(t, relay.Config{Logf: logs.printf}, fs)
	cr, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if st, _ := post(t, u+"/c/"+cr.Channel+"/", fmt.Sprint(i)); st != http.StatusAccepted {
			t.Fatalf("with no agent: %d", st)
		}
	}
	fs.failRemovals.Store(true)
	got := map[string]int{}
	for round := range 2 {
		conn := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: u, Credentials: cr})
		before := fs.removes.Load()
		for range 2 {
			d := relaytest.Receive(t, conn, 20*time.Second)
			got[d.ID]++
			conn.Ack(d.ID)
		}
		relaytest.WaitFor(t, "a failed removal", func() bool { return fs.removes.Load() > before })
		if round == 1 {
			break
		}
		conn.Close()
		relaytest.WaitFor(t, "the removals given up", func() bool { return strings.Contains(logs.String(), "2 stay queued") })
		if n, _ := fs.QueueLen(cr.Channel); n != 2 {
			t.Fatalf("queue holds %d, want the 2 whose removal failed", n)
		}
	}
	for id, n := range got {
		if n != 2 {
			t.Fatalf("delivery %s reached the agent %d times over 2 connections, want once each", id, n)
		}
	}
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay does not close while removals fail")
	}
	if n, _ := fs.QueueLen(cr.Channel); n != 2 {
		t.Fatalf("queue holds %d after the relay closed, want the 2 whose removal failed", n)
	}
}

// logLines counts the lines of log that contain substr.
func logLines(log, substr string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// waitLong polls cond until it holds, failing the test after 30 s: for
// what waits on a backoff (up to relay.RetryMax) on a busy machine.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 29, the drain: removing an acknowledged delivery from the store
// does not run on the connection's only reader. While a removal is
// stuck, a live delivery is answered all the same.
func TestLiveAnswerNotBlockedByAStuckRemoval(t *testing.T) {
	fs := &faultyStore{removing: make(chan string, 4), unblock: make(chan struct{})}
	srv, u := newFaultyRelay(t, relay.Config{ResponseTimeout: 20 * time.Second}, fs)
	released := false
	release := func() {
		if !released {
			released = true
			close(fs.unblock)
		}
	}
	t.Cleanup(release) // before the relay closes: cleanups run last to first
	cr, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := u + "/c/" + cr.Channel
	if st, _ := post(t, pub+"/", "queued"); st != http.StatusAccepted {
		t.Fatalf("with no agent: %d", st)
	}
	conn := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: u, Credentials: cr})
	q := relaytest.Receive(t, conn, 10*time.Second)
	conn.Respond(q.ID, 200, nil, nil)
	conn.Ack(q.ID)
	select {
	case <-fs.removing:
	case <-time.After(10 * time.Second):
		t.Fatal("the ack did not start a removal")
	}

	type result struct {
		status int
		body   string
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post(pub+"/live", "text/plain", strings.NewReader("live"))
		if err != nil {
			done <- result{0, err.Error()}
			return
		}
		defer resp.Body.Close()
		b := make([]byte, 64)
		n, _ := resp.Body.Read(b)
		done <- result{resp.StatusCode, string(b[:n])}
	}()
	d := relaytest.Receive(t, conn, 10*time.Second)
	if string(d.Body) != "live" {
		t.Fatalf("got %q, want the live delivery", d.Body)
	}
	conn.Respond(d.ID, http.StatusCreated, nil, []byte("answered"))
	select {
	case r := <-done:
		if r.status != http.StatusCreated || r.body != "answered" {
			t.Fatalf("live delivery answered %d %q, want the agent's 201", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the live answer waited behind the stuck removal")
	}
	if n, _ := fs.QueueLen(cr.Channel); n != 1 {
		t.Fatalf("queue holds %d while the removal is stuck, want 1", n)
	}
	release()
	relaytest.WaitFor(t, "the removal", func() bool { n, _ := fs.QueueLen(cr.Channel); return n == 0 })
}

// queuedIDs returns the ids queued for channel, in order.
func queuedIDs(t *testing.T, db *boltrelay.Store, channel string) []string {
	t.Helper()
	ds, err := db.Queued(channel, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	return ids
}

// runBody is a run.status body of run in status.
func runBody(t *testing.T, run, status string) string {
	t.Helper()
	b, err := json.Marshal(devhook.NewRunStatus(run, "app", status, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Issue 30: while the queue holds deliveries not yet sent to the agent, a
// live run.status delivery is queued behind them (202), and reaches the
// agent after them; a live delivery without a run goes at once; once the
// queue is sent, live ones go to the agent again.
func TestLiveRunDeliveryQueuedBehindUnsentQueue(t *testing.T) {
	_, hs, db := relaytest.New(t, relay.Config{Window: 1})
	cr := relaytest.Open(t, hs)
	var want []string
	for _, st := range []string{"queued", "running"} {
		body := runBody(t, "r1", st)
		if code, _ := post(t, cr.PublicURL+"/", body); code != http.StatusAccepted {
			t.Fatalf("%s with no agent: %d", st, code)
		}
		want = append(want, body)
	}
	conn := relaytest.Dial(t, hs, cr)
	first := relaytest.Receive(t, conn, 10*time.Second) // the window is full: the rest waits for its ack
	if string(first.Body) != want[0] {
		t.Fatalf("first queued delivery %s", first.Body)
	}
	live := runBody(t, "r1", "succeeded")
	code, answer := post(t, cr.PublicURL+"/", live)
	if code != http.StatusAccepted || !strings.Contains(answer, `"queued":true`) {
		t.Fatalf("live run.status behind the queue: %d %q, want 202", code, answer)
	}
	want = append(want, live)

	plain := make(chan int, 1)
	go func() {
		resp, err := http.Post(cr.PublicURL+"/plain", "text/plain", strings.NewReader("no run"))
		if err != nil {
			plain <- 0
			return
		}
		resp.Body.Close()
		plain <- resp.StatusCode
	}()
	d := relaytest.Receive(t, conn, 10*time.Second)
	if d.Queued || string(d.Body) != "no run" {
		t.Fatalf("got %q (queued %v), want the live delivery without a run", d.Body, d.Queued)
	}
	conn.Respond(d.ID, http.StatusTeapot, nil, nil)
	if st := <-plain; st != http.StatusTeapot {
		t.Fatalf("live delivery without a run: %d, want the agent's 418", st)
	}

	got := []string{string(first.Body)}
	conn.Ack(first.ID)
	for len(got) < len(want) {
		d := relaytest.Receive(t, conn, 10*time.Second)
		got = append(got, string(d.Body))
		conn.Ack(d.ID)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("agent got %d: %s, want %s", i, got[i], want[i])
		}
	}
	relaytest.WaitFor(t, "the queue to empty", func() bool { n, _ := db.QueueLen(cr.Channel); return n == 0 })

	// Caught up: live run.status deliveries go to the agent again (one
	// sent as the last removal commits may still be queued, and comes
	// queued).
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		done := make(chan int, 1)
		go func() {
			resp, err := http.Post(cr.PublicURL+"/", "application/json", strings.NewReader(runBody(t, fmt.Sprint("r", i), "queued")))
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		d = relaytest.Receive(t, conn, 10*time.Second)
		if d.Queued {
			conn.Ack(d.ID)
			if st := <-done; st != http.StatusAccepted {
				t.Fatalf("a delivery that came queued was answered %d", st)
			}
			if time.Now().After(deadline) {
				t.Fatal("live run.status deliveries are still queued after the queue was sent")
			}
			continue
		}
		conn.Respond(d.ID, http.StatusCreated, nil, nil)
		if st := <-done; st != http.StatusCreated {
			t.Fatalf("live run.status once the queue is sent: %d, want the agent's 201", st)
		}
		break
	}
}
