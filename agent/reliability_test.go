package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/storage"
)

// eventually polls cond until it holds, failing the test after 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronising
	}
}

// downAddr returns a loopback address where nothing listens (yet).
func downAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// serveAt starts h at addr, which downAddr returned.
func serveAt(t *testing.T, addr string, h http.Handler) {
	t.Helper()
	ln, err := listenRetry(addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
}

// fastRetries makes retries quick and the log visible.
func fastRetries(c *agent.Config) {
	c.RetryMinBackoff = 5 * time.Millisecond
	c.RetryMaxBackoff = 40 * time.Millisecond
}

func (tn *tunnel) queue(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		resp, _ := tn.post("/q", body, signed(body))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %d with no agent: %s, want 202", i, resp.Status)
		}
		ids = append(ids, resp.Header.Get("Devhook-Delivery"))
	}
	return ids
}

func (tn *tunnel) resultsCopy() []agent.Result {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return append([]agent.Result(nil), tn.results...)
}

func retryStates(t *testing.T, db *storage.DB) map[string]devhook.RetryState {
	t.Helper()
	ids, states, err := db.AllRetries()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]devhook.RetryState{}
	for i, id := range ids {
		m[id] = states[i]
	}
	return m
}

// Issue 10, item 2: queued deliveries drained while the receiver is down
// are owed, acknowledged, retried, and reach the receiver exactly once
// when it comes up; each has its retries recorded.
func TestOwedDeliveriesReachReceiverWhenItComesUp(t *testing.T) {
	addr := downAddr(t)
	tn := newTunnel(t, "http://"+addr, fastRetries)
	const n = 80 // more than the relay's window
	ids := tn.queue(t, n)
	tn.startAgent()

	// All are acknowledged (the queue empties) and owed.
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	eventually(t, "every delivery owed", func() bool { return len(retryStates(t, tn.db)) == n })
	for id, st := range retryStates(t, tn.db) {
		if st.State != devhook.RetryOwed || st.Since.IsZero() {
			t.Fatalf("delivery %s: retry state %+v", id, st)
		}
	}
	// Retried while down: wait until one has a recorded retry.
	eventually(t, "a recorded retry", func() bool {
		d, err := tn.db.Delivery(ids[0])
		return err == nil && len(d.Attempts) >= 2
	})

	rec := &recorder{notify: make(chan struct{}, 1024)}
	var seenMu sync.Mutex
	seen := map[string]int{}
	var order []string
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seenMu.Lock()
		seen[string(b)]++
		order = append(order, string(b))
		seenMu.Unlock()
		rec.notify <- struct{}{}
		w.Write([]byte("ok"))
	}))
	eventually(t, "nothing owed", func() bool { return len(retryStates(t, tn.db)) == 0 })
	seenMu.Lock()
	for i := range n {
		if c := seen[fmt.Sprintf(`{"n":%d}`, i)]; c != 1 {
			t.Errorf("delivery %d reached the receiver %d times, want 1", i, c)
		}
	}
	for i, b := range order {
		if want := fmt.Sprintf(`{"n":%d}`, i); b != want {
			t.Errorf("arrival %d at the receiver is %s, want %s: the queue's order", i, b, want)
			break
		}
	}
	seenMu.Unlock()
	for _, id := range ids {
		d, err := tn.db.Delivery(id)
		if err != nil {
			t.Fatal(err)
		}
		first, last := d.Attempts[0], d.LastAttempt()
		// They have no run_id and one path: one run, in order (order.go).
		// The first is forwarded and owed; the others are owed behind it,
		// not forwarded while it is owed.
		if id == ids[0] && (first.Kind != devhook.AttemptRedelivery || first.Status != 0 || !strings.Contains(first.Error, "connection refused")) {
			t.Errorf("delivery %s: first attempt %+v", id, first)
		}
		// Behind it: sent once it went, a first try, a redelivery (before,
		// recorded as a retry of a try never made).
		if id != ids[0] && (first.Kind != devhook.AttemptRedelivery || len(d.Attempts) != 1 || first.Status != 200) {
			t.Errorf("delivery %s, behind an owed one: first attempt %+v of %d", id, first, len(d.Attempts))
		}
		want := devhook.AttemptRetry
		if id != ids[0] {
			want = devhook.AttemptRedelivery
		}
		if last.Kind != want || last.Status != 200 || last.Request == nil || !last.Request.Resigned || last.Made != devhook.MadeResigned {
			t.Errorf("delivery %s: last attempt %s %d made %q (request %+v), want a re-signed %s answered 200", id, last.Kind, last.Status, last.Made, last.Request, want)
		}
		if id == ids[0] && first.Made != devhook.MadeResigned {
			t.Errorf("delivery %s: first attempt made %q, want re-signed", id, first.Made)
		}
	}
	// Each owed delivery had a result saying so, and one for the retry
	// that delivered it.
	eventually(t, "results", func() bool { return len(tn.resultsCopy()) >= 2*n })
	owed, retried := 0, 0
	for _, r := range tn.resultsCopy() {
		if r.Owed {
			owed++
		}
		if (r.Retry > 0 || r.Followed) && r.Status == 200 {
			retried++
		}
	}
	if owed != n || retried != n {
		t.Errorf("%d results owed and %d delivered by a retry, want %d each", owed, retried, n)
	}
}

// Owed deliveries survive a restart of the agent: the next Run resumes them.
func TestOwedDeliveriesResumeAfterRestart(t *testing.T) {
	addr := downAddr(t)
	tn := newTunnel(t, "http://"+addr, func(c *agent.Config) {
		fastRetries(c)
		c.RetryMaxBackoff = time.Hour // only the resume can deliver it in time
		c.RetryMinBackoff = time.Hour
	})
	ids := tn.queue(t, 3)
	tn.startAgent()
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	eventually(t, "owed", func() bool { return len(retryStates(t, tn.db)) == 3 })
	tn.stopAgent()

	rec := &recorder{notify: make(chan struct{}, 16)}
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.got = append(rec.got, seen{Method: r.Method})
		rec.mu.Unlock()
		rec.notify <- struct{}{}
	}))
	tn.startAgent()
	rec.waitFor(t, 3)
	eventually(t, "nothing owed", func() bool { return len(retryStates(t, tn.db)) == 0 })
	for i, id := range ids {
		d, _ := tn.db.Delivery(id)
		// One run: the first was tried and is retried; the others, owed
		// behind it, go for the first time (a redelivery).
		want := devhook.AttemptRetry
		if i > 0 {
			want = devhook.AttemptRedelivery
		}
		if last := d.LastAttempt(); last.Kind != want || last.Status != 200 {
			t.Errorf("delivery %s: last attempt %+v, want a %s answered 200", id, last, want)
		}
	}
}

// Which answers make a queued delivery owed.
func TestOwedOnlyWhenTheReceiverDidNotTakeIt(t *testing.T) {
	for _, tt := range []struct {
		status int
		owed   bool
	}{{200, false}, {204, false}, {400, false}, {404, false}, {408, true}, {429, true}, {500, true}, {503, true}} {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			var calls atomic.Int32
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.WriteHeader(tt.status)
				}
			}))
			defer recv.Close()
			tn := newTunnel(t, recv.URL, func(c *agent.Config) {
				fastRetries(c)
				c.RetryMinBackoff = time.Hour // keep it owed for the look
			})
			id := tn.queue(t, 1)[0]
			tn.startAgent()
			waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
			tn.waitResults(1)
			r := tn.resultsCopy()[0]
			st, owed := retryStates(t, tn.db)[id]
			if owed != tt.owed || r.Owed != tt.owed || owed && st.State != devhook.RetryOwed {
				t.Fatalf("answer %d: owed=%v (result %v, state %+v), want %v", tt.status, owed, r.Owed, st, tt.owed)
			}
		})
	}
}

// After Config.RetryFor the agent gives up, loudly.
func TestOwedDeliveryGivenUpAfterRetryFor(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer recv.Close()
	var changesMu sync.Mutex
	var changes []devhook.Change
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		fastRetries(c)
		c.RetryFor = time.Hour
		c.Now = now
		c.OnChange = func(ch devhook.Change) {
			changesMu.Lock()
			changes = append(changes, ch)
			changesMu.Unlock()
		}
	})
	id := tn.queue(t, 1)[0]
	tn.startAgent()
	eventually(t, "retries", func() bool {
		d, err := tn.db.Delivery(id)
		return err == nil && len(d.Attempts) >= 3
	})
	if st := retryStates(t, tn.db)[id]; st.State != devhook.RetryOwed {
		t.Fatalf("state %+v, want owed", st)
	}
	skew.Store(int64(2 * time.Hour))
	eventually(t, "given up", func() bool { return retryStates(t, tn.db)[id].State == devhook.RetryFailed })
	st := retryStates(t, tn.db)[id]
	d, _ := tn.db.Delivery(id)
	want := fmt.Sprintf("gave up after %d attempts over 2h: the receiver answered 503", len(d.Attempts))
	if st.Reason != want {
		t.Errorf("reason %q, want %q", st.Reason, want)
	}
	n := len(d.Attempts)
	eventually(t, "a given-up result", func() bool {
		for _, r := range tn.resultsCopy() {
			if r.GaveUp && r.Error == st.Reason && r.Delivery.ID == id {
				return true
			}
		}
		return false
	})
	changesMu.Lock()
	var sawFailed, sawHealth bool
	for _, c := range changes {
		if c.Kind == devhook.ChangeRetry && c.Summary.ID == id && c.Summary.Retry != nil && c.Summary.Retry.State == devhook.RetryFailed {
			sawFailed = true
		}
		if c.Kind == devhook.ChangeHealth && c.Health.Failed == 1 && c.Health.Owed == 0 {
			sawHealth = true
		}
	}
	changesMu.Unlock()
	if !sawFailed || !sawHealth {
		t.Errorf("changes: retry failed %v, health with failed=1 %v", sawFailed, sawHealth)
	}
	// No retry after giving up; a restart does not resume it.
	tn.stopAgent()
	tn.startAgent()
	tn.post("/live", []byte("x"), nil) // something for the agent to do meanwhile
	if d, _ := tn.db.Delivery(id); len(d.Attempts) != n {
		t.Errorf("%d attempts after giving up, want %d", len(d.Attempts), n)
	}
}

// fullStore is a real store whose writes fail as on a full disk while
// full is set.
type fullStore struct {
	*storage.DB
	full atomic.Bool
}

var errFull = fmt.Errorf("write journal: %w", syscall.ENOSPC)

func (s *fullStore) PutDelivery(d *devhook.Delivery) (bool, error) {
	if s.full.Load() {
		return false, errFull
	}
	return s.DB.PutDelivery(d)
}

func (s *fullStore) AddAttempt(id string, a devhook.Attempt) (devhook.Attempt, error) {
	if s.full.Load() {
		return devhook.Attempt{}, errFull
	}
	return s.DB.AddAttempt(id, a)
}

func (s *fullStore) PutRetry(id string, st devhook.RetryState) error {
	if s.full.Load() {
		return errFull
	}
	return s.DB.PutRetry(id, st)
}

// logLines collects an agent's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logLines) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// Issue 10, item 3: while recording fails, a live delivery is answered
// 503 and not forwarded; queued ones are held, and everything goes through
// by itself once recording works again.
func TestRecordingFailsThenRecovers(t *testing.T) {
	rec, recv := newRecorder(t)
	var store *fullStore
	logs := &logLines{}
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		store = &fullStore{DB: c.Store.(*storage.DB)}
		c.Store = store
		c.Logf = logs.logf
	})
	const queued = 70 // more than the relay's window of 64
	store.full.Store(true)
	tn.queue(t, queued)
	healthOf := startAgentWithHealth(t, tn)

	// Live: 503 with a reason, not forwarded.
	resp, body := tn.post("/live", []byte(`{"live":1}`), nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "could not record the delivery: disk full; not forwarded") {
		t.Fatalf("live delivery while full: %s %q (Retry-After %q)", resp.Status, body, resp.Header.Get("Retry-After"))
	}
	eventually(t, "held deliveries", func() bool { return healthOf().Held > 0 })
	h := healthOf()
	if !strings.Contains(h.StorageError, "no space left on device") || h.Since.IsZero() {
		t.Fatalf("health %+v", h)
	}
	if n := len(rec.requests()); n != 0 {
		t.Fatalf("the receiver saw %d deliveries that were not recorded", n)
	}
	if n, _ := tn.relayDB.QueueLen(tn.creds.Channel); n != queued {
		t.Fatalf("relay queue %d, want %d: held deliveries were acknowledged", n, queued)
	}

	store.full.Store(false)
	rec.waitFor(t, queued)
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	waitStored(t, tn.db, queued)
	eventually(t, "healthy", func() bool { h := healthOf(); return h.StorageError == "" && h.Held == 0 })
	if n := len(rec.requests()); n != queued {
		t.Fatalf("receiver saw %d, want %d", n, queued)
	}
	// And live deliveries work again, without a reconnect.
	if resp, _ := tn.post("/live", []byte(`{"live":2}`), nil); resp.StatusCode != 200 {
		t.Fatalf("live delivery after recovery: %s", resp.Status)
	}
	if f, w := logs.count("recording failed: "), logs.count("recording works again"); f != 1 || w != 1 {
		t.Errorf("log said recording failed %d times and works again %d times, want once each", f, w)
	}
}

// startAgentWithHealth starts tn's agent and returns its Health.
func startAgentWithHealth(t *testing.T, tn *tunnel) func() devhook.Health {
	t.Helper()
	cfg := tn.cfg
	cfg.RelayURL = tn.relaySrv.URL
	ag, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	tn.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	}
	select {
	case <-tn.connect:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not connect")
	}
	return ag.Health
}

// A write of an attempt that fails after the receiver answered is said,
// and the sender still gets the answer.
func TestAttemptNotRecorded(t *testing.T) {
	var store *fullStore
	logs := &logLines{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		store.full.Store(true) // the disk fills while the receiver works
		w.Write([]byte("taken"))
	}))
	defer recv.Close()
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		store = &fullStore{DB: c.Store.(*storage.DB)}
		c.Store = store
		c.Logf = logs.logf
	})
	tn.startAgent()
	resp, body := tn.post("/x", []byte("x"), nil)
	if resp.StatusCode != 200 || string(body) != "taken" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if logs.count("delivery "+resp.Header.Get("Devhook-Delivery")+": the receiver got it (answered 200) but devhook could not record the attempt") != 1 {
		t.Errorf("log: %q", logs.lines)
	}
}

// Issue 10, item 11: an answer whose headers cannot be framed is answered
// 502 at once, with the reason recorded.
func TestUnframableAnswerIs502(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Huge", strings.Repeat("h", 1100<<10))
		w.Write([]byte("fine"))
	}))
	defer recv.Close()
	tn := newTunnel(t, recv.URL, nil)
	tn.startAgent()
	start := time.Now()
	resp, body := tn.post("/big-answer", []byte("x"), nil)
	if took := time.Since(start); resp.StatusCode != http.StatusBadGateway || took > 5*time.Second {
		t.Fatalf("sender got %s after %s, want 502 at once", resp.Status, took)
	}
	if !strings.HasPrefix(string(body), "devhook: the receiver answered 200 with 11") || !strings.Contains(string(body), "bytes of headers, over the 1048576 devhook can pass back to the sender") {
		t.Errorf("body %q", body)
	}
	tn.waitResults(1)
	r := tn.resultsCopy()[0]
	if r.Status != http.StatusBadGateway || r.Attempt == nil || !strings.Contains(r.Attempt.Error, "bytes of headers") {
		t.Fatalf("result status %d attempt %+v", r.Status, r.Attempt)
	}
	d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
	if err != nil || len(d.Attempts) != 1 || d.Attempts[0].Status != 200 || !strings.HasSuffix(d.Attempts[0].Error, "; the sender got 502") {
		t.Fatalf("recorded %v %+v", err, d)
	}
}

// Issue 10, item 5: an agent whose channel another agent took over stops.
func TestRunStopsWhenReplaced(t *testing.T) {
	_, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	cfg := tn.cfg
	cfg.RelayURL = tn.relaySrv.URL
	ag, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- ag.Run(ctx) }()
	<-tn.connect
	other, err := relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: tn.relaySrv.URL, Credentials: tn.creds})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	select {
	case err := <-done:
		if !errors.Is(err, relayclient.ErrReplaced) {
			t.Fatalf("Run returned %v, want relayclient.ErrReplaced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still runs after another agent took the channel over")
	}
}

// attemptFullStore is a real store whose attempts fail as on a full disk
// while full is set, its deliveries still recorded. Injected: on a real
// disk a live delivery's own record fails before its attempt's (it is
// answered 503, not forwarded), and an attempt that fails alone is the
// disk filling between the two writes, which a test cannot time.
type attemptFullStore struct {
	*storage.DB
	full atomic.Bool
}

func (s *attemptFullStore) AddAttempt(id string, a devhook.Attempt) (devhook.Attempt, error) {
	if s.full.Load() {
		return devhook.Attempt{}, errFull
	}
	return s.DB.AddAttempt(id, a)
}

// Many attempts the receiver got but devhook could not record are said in
// one line, counted, and said to be over, with the count, once an attempt
// is recorded again: not a line per delivery. Each sender still gets the
// receiver's answer.
func TestUnrecordedAttemptsSaidOnce(t *testing.T) {
	_, recv := newRecorder(t)
	var store *attemptFullStore
	logs := &logLines{}
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		store = &attemptFullStore{DB: c.Store.(*storage.DB)}
		c.Store = store
		c.Logf = logs.logf
	})
	tn.startAgent()
	store.full.Store(true)
	const n = 30
	for i := range n {
		resp, body := tn.post(fmt.Sprintf("/u%d", i), []byte(fmt.Sprintf(`{"n":%d}`, i)), nil)
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Fatalf("delivery %d whose attempt is not recorded: %s %q, want the receiver's 200", i, resp.Status, body)
		}
	}
	tn.waitResults(n)
	if c := logs.countContaining("could not record the attempt"); c != 1 {
		t.Errorf("%d lines about deliveries whose attempt was not recorded, want 1: %q", c, logs.lines)
	}
	store.full.Store(false)
	if resp, _ := tn.post("/after", []byte(`{"after":1}`), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("delivery after the store took attempts again: %s", resp.Status)
	}
	tn.waitResults(n + 1)
	if c := logs.countContaining(fmt.Sprintf("attempts are recorded again: %d the receivers got in ", n)); c != 1 {
		t.Errorf("%d lines say attempts are recorded again after %d were not, want 1: %q", c, n, logs.lines)
	}
}

func (l *logLines) countContaining(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}
