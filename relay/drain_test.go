package relay_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
)

// faultyStore is a relay.Store whose queue reads fail while failReads is
// above zero (each failure counts it down), and whose removals wait for
// unblock while it is set.
type faultyStore struct {
	*boltrelay.Store
	failReads atomic.Int32
	reads     atomic.Int32
	removing  chan string   // told of each removal as it starts
	unblock   chan struct{} // when not nil, removals wait for it
}

func (s *faultyStore) Queued(channel, after string, limit int) ([]*devhook.Delivery, error) {
	s.reads.Add(1)
	if s.failReads.Add(-1) >= 0 {
		return nil, errors.New("injected: read queue: input/output error")
	}
	return s.Store.Queued(channel, after, limit)
}

func (s *faultyStore) Dequeue(channel, id string) error {
	if s.removing != nil {
		s.removing <- id
	}
	if s.unblock != nil {
		<-s.unblock
	}
	return s.Store.Dequeue(channel, id)
}

// newFaultyRelay is newRelay over a faultyStore.
func newFaultyRelay(t *testing.T, cfg relay.Config, fs *faultyStore) (*relay.Server, string) {
	t.Helper()
	db, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fs.Store = db
	cfg.Store = fs
	srv, err := relay.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	hs := serveRelay(t, srv)
	t.Cleanup(func() { srv.Close() })
	return srv, hs.URL
}

// Issue 29, the drain: a read of the queue that fails is tried again after
// a backoff, with a log line and a count in /metrics, and the queue
// reaches the agent without a new delivery, an ack or a reconnect.
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
	conn := dialWith(t, relay.DialConfig{RelayURL: u, Credentials: cr})
	// Not acknowledged: no ack kicks the drain.
	for _, id := range ids {
		if d := receive(t, conn, 20*time.Second); d.ID != id {
			t.Fatalf("got %s, want %s", d.ID, id)
		}
	}
	if n := fs.reads.Load(); n < failures+1 {
		t.Fatalf("%d reads of the queue, want at least %d", n, failures+1)
	}
	if got := strings.Count(logs.String(), "read queue: injected"); got < failures {
		t.Fatalf("%d log lines of a failed read, want %d; log:\n%s", got, failures, logs.String())
	}
	if !strings.Contains(logs.String(), "reading it again in") {
		t.Fatalf("the log does not say when the queue is read again:\n%s", logs.String())
	}
	_, m := get(t, u+"/metrics")
	if v, _ := strconv.Atoi(metricValue(m, "devhook_relay_queue_read_errors_total")); v < failures {
		t.Fatalf("devhook_relay_queue_read_errors_total %q, want at least %d", metricValue(m, "devhook_relay_queue_read_errors_total"), failures)
	}
}

// The wait between two reads of a failing queue grows to a bound: a store
// that fails for a while is read a few times, not in a loop.
func TestDrainReadBackoffIsBounded(t *testing.T) {
	var logs logBuffer
	fs := &faultyStore{}
	srv, u := newFaultyRelay(t, relay.Config{Logf: logs.printf}, fs)
	cr, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	fs.failReads.Store(1 << 30)
	dialWith(t, relay.DialConfig{RelayURL: u, Credentials: cr})
	waitFor(t, "five failed reads", func() bool { return fs.reads.Load() >= 5 })
	waits := []string{}
	for _, l := range strings.Split(logs.String(), "\n") {
		if _, w, ok := strings.Cut(l, "reading it again in "); ok {
			waits = append(waits, w)
		}
	}
	if len(waits) < 4 {
		t.Fatalf("log:\n%s", logs.String())
	}
	var prev time.Duration
	for _, w := range waits {
		d, err := time.ParseDuration(w)
		if err != nil || d < prev || d > 5*time.Second {
			t.Fatalf("waits %v: want growing, at most 5s", waits)
		}
		prev = d
	}
	if prev <= 50*time.Millisecond {
		t.Fatalf("waits %v do not grow", waits)
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
	conn := dialWith(t, relay.DialConfig{RelayURL: u, Credentials: cr})
	q := receive(t, conn, 10*time.Second)
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
	d := receive(t, conn, 10*time.Second)
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
	waitFor(t, "the removal", func() bool { n, _ := fs.QueueLen(cr.Channel); return n == 0 })
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
	_, hs, db := newRelay(t, relay.Config{Window: 1})
	cr := open(t, hs)
	var want []string
	for _, st := range []string{"queued", "running"} {
		body := runBody(t, "r1", st)
		if code, _ := post(t, cr.PublicURL+"/", body); code != http.StatusAccepted {
			t.Fatalf("%s with no agent: %d", st, code)
		}
		want = append(want, body)
	}
	conn := dial(t, hs, cr)
	first := receive(t, conn, 10*time.Second) // the window is full: the rest waits for its ack
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
	d := receive(t, conn, 10*time.Second)
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
		d := receive(t, conn, 10*time.Second)
		got = append(got, string(d.Body))
		conn.Ack(d.ID)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("agent got %d: %s, want %s", i, got[i], want[i])
		}
	}
	waitFor(t, "the queue to empty", func() bool { n, _ := db.QueueLen(cr.Channel); return n == 0 })

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
		d = receive(t, conn, 10*time.Second)
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
