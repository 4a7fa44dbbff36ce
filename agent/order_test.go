package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/storage"
)

var runStatuses = []string{"queued", "running", "succeeded"}

// runReceiver is a receiver that remembers, for each run, the statuses it
// was sent (attempts) and those it took (2xx), in the order they came.
// With failFirst it answers 503 to the first attempt of each delivery.
// It keeps a run's first delivery a moment before answering, so that a
// later one of the run sent meanwhile would arrive first.
type runReceiver struct {
	failFirst bool

	mu       sync.Mutex
	attempts map[string][]string
	taken    map[string][]string
	tried    map[string]bool // bodies attempted once
	n        int             // deliveries taken
}

func newRunReceiver(t *testing.T, failFirst bool) (*runReceiver, *httptest.Server) {
	r := &runReceiver{failFirst: failFirst, attempts: map[string][]string{}, taken: map[string][]string{}, tried: map[string]bool{}}
	srv := httptest.NewServer(r.handler())
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *runReceiver) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var b devhook.RunStatus
		if err := json.NewDecoder(req.Body).Decode(&b); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		run, st := b.Data.RunID, b.Data.StatusV2
		key := run + "/" + st
		r.mu.Lock()
		r.attempts[run] = append(r.attempts[run], st)
		fail := r.failFirst && !r.tried[key]
		r.tried[key] = true
		r.mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if st == "queued" {
			// A receiver doing some work: what the agent sends of the
			// run meanwhile is done before this one.
			time.Sleep(20 * time.Millisecond)
		}
		// Taken once done, as a receiver's handler commits it.
		r.mu.Lock()
		r.taken[run] = append(r.taken[run], st)
		r.n++
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
}

func (r *runReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// check fails t unless every one of runs was taken in status order, and
// no status of a run was even attempted before the one before it was
// taken.
func (r *runReceiver) check(t *testing.T, runs []string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range runs {
		if got := r.taken[run]; !slices.Equal(got, runStatuses) {
			t.Errorf("run %s reached the receiver as %v, want %v", run, got, runStatuses)
		}
		last := 0
		for _, st := range r.attempts[run] {
			i := slices.Index(runStatuses, st)
			if i < last {
				t.Errorf("run %s: %s attempted after a later status; attempts %v", run, st, r.attempts[run])
				break
			}
			last = i
		}
	}
}

// queueRuns posts runs×3 signed run.status deliveries to url, a channel's
// public URL with no agent connected, each run's statuses in order, the
// runs interleaved; each must be queued (202).
func queueRuns(t *testing.T, url string, runs int) []string {
	t.Helper()
	names := runNames(runs)
	for _, st := range runStatuses {
		for _, run := range names {
			if code := postRun(t, url, run, st); code != http.StatusAccepted {
				t.Fatalf("%s %s with no agent: %d, want 202", run, st, code)
			}
		}
	}
	return names
}

func runNames(n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("run-%02d", i))
	}
	return names
}

// postRun posts run's status to url, a channel's public URL, signed, and
// returns the status of the answer.
func postRun(t *testing.T, url, run, status string) int {
	t.Helper()
	code, _ := postRunAnswer(t, url, run, status)
	return code
}

// postRunAnswer is postRun, with the answer's body.
func postRunAnswer(t *testing.T, url, run, status string) (int, string) {
	t.Helper()
	body, err := json.Marshal(devhook.NewRunStatus(run, "app-order", status, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/hooks/runs", strings.NewReader(string(body)))
	for k, v := range signed(body) {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

// sendRunsLive posts the first two statuses of runs to url with no agent
// connected, then starts the agent with start, and posts each run's last
// status live while the backlog drains: whatever it is answered (the
// receiver's answer, or 202 when it is queued behind the backlog), it
// must not overtake the earlier ones. A receiver that fails first
// attempts answers 503 to one that reaches it live, once the run's earlier
// ones are taken (the drain may be that quick): the sender sends it
// again, as the service does.
func sendRunsLive(t *testing.T, url string, runs []string, start func()) {
	t.Helper()
	for _, st := range runStatuses[:2] {
		for _, run := range runs {
			if code := postRun(t, url, run, st); code != http.StatusAccepted {
				t.Fatalf("%s %s with no agent: %d, want 202", run, st, code)
			}
		}
	}
	start()
	for _, run := range runs {
		code, answer := postRunAnswer(t, url, run, runStatuses[2])
		if code == http.StatusServiceUnavailable && answer == "" {
			t.Logf("%s %s live: the receiver's 503; sent again", run, runStatuses[2])
			code, answer = postRunAnswer(t, url, run, runStatuses[2])
		}
		if code != http.StatusAccepted && code/100 != 2 {
			t.Fatalf("%s %s live: %d %q", run, runStatuses[2], code, answer)
		}
	}
}

// Issue 30: runs queued at the relay while the agent was away reach the
// receiver each in its order (queued, running, succeeded), more of them
// than the relay's window, different runs in parallel.
func TestQueuedRunsReachTheReceiverInOrder(t *testing.T) {
	rec, rs := newRunReceiver(t, false)
	tn := newTunnel(t, rs.URL, nil)
	runs := queueRuns(t, tn.url(""), 30)
	tn.startAgent()
	eventually(t, "every delivery at the receiver", func() bool { return rec.count() == 3*len(runs) })
	rec.check(t, runs)
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
}

// Issue 30: a run's live delivery sent while its earlier ones are still
// in the relay's queue, beyond the relay's window, does not overtake them.
func TestLiveDeliveryDoesNotOvertakeItsRunsQueue(t *testing.T) {
	rec, rs := newRunReceiver(t, false)
	tn := newTunnelRelay(t, rs.URL, func(c *relay.Config) { c.Window = 3 }, nil)
	runs := runNames(10)
	sendRunsLive(t, tn.url(""), runs, tn.startAgent)
	eventually(t, "every delivery at the receiver", func() bool { return rec.count() == 3*len(runs) })
	rec.check(t, runs)
}

// Issue 30: with a receiver that fails every first attempt, a run's later
// delivery is not forwarded while an earlier one is owed: it waits behind
// it, and each run is taken in order.
func TestOwedDeliveryIsNotOvertakenByItsRun(t *testing.T) {
	rec, rs := newRunReceiver(t, true)
	tn := newTunnel(t, rs.URL, fastRetries)
	runs := queueRuns(t, tn.url(""), 8)
	tn.startAgent()
	eventually(t, "every delivery taken by the receiver", func() bool { return rec.count() == 3*len(runs) })
	rec.check(t, runs)
	eventually(t, "nothing owed", func() bool { return len(retryStates(t, tn.db)) == 0 })
}

// The deliveries of a run owed when the agent stops are retried in order
// by the next Run: each waits for the one before it, as before the
// restart.
func TestOwedRunResumesInOrderAfterRestart(t *testing.T) {
	addr := downAddr(t)
	tn := newTunnel(t, "http://"+addr, func(c *agent.Config) {
		c.RetryMinBackoff, c.RetryMaxBackoff = time.Hour, time.Hour // only the resume retries in time
	})
	runs := queueRuns(t, tn.url(""), 4)
	tn.startAgent()
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	eventually(t, "every delivery owed", func() bool { return len(retryStates(t, tn.db)) == 3*len(runs) })
	tn.stopAgent()

	rec := &runReceiver{attempts: map[string][]string{}, taken: map[string][]string{}, tried: map[string]bool{}}
	serveAt(t, addr, rec.handler())
	tn.startAgent()
	eventually(t, "every delivery taken by the receiver", func() bool { return rec.count() == 3*len(runs) })
	rec.check(t, runs)
}

// A live delivery of a run whose earlier delivery is owed to the receiver
// is not forwarded before it: its sender gets 202, and it follows the
// earlier one once the receiver takes that.
func TestLiveDeliveryWaitsBehindAnOwedOneOfItsRun(t *testing.T) {
	var mu sync.Mutex
	down := true
	var order []string
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var b devhook.RunStatus
		json.NewDecoder(req.Body).Decode(&b)
		mu.Lock()
		defer mu.Unlock()
		if down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		order = append(order, b.Data.RunID+"/"+b.Data.StatusV2)
		w.WriteHeader(http.StatusOK)
	}))
	defer rs.Close()
	tn := newTunnel(t, rs.URL, func(c *agent.Config) {
		c.RetryMinBackoff, c.RetryMaxBackoff = 50*time.Millisecond, 100*time.Millisecond
	})
	queued := []byte(mustJSON(t, devhook.NewRunStatus("run-live", "app", "queued", time.Now())))
	if resp, _ := tn.post("/hook", queued, signed(queued)); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("with no agent: %s", resp.Status)
	}
	tn.startAgent()
	eventually(t, "the queued delivery owed", func() bool { return len(retryStates(t, tn.db)) == 1 })

	running := []byte(mustJSON(t, devhook.NewRunStatus("run-live", "app", "running", time.Now())))
	resp, body := tn.post("/hook", running, signed(running))
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(body), "earlier delivery of this run") {
		t.Fatalf("live delivery behind an owed one: %s %s, want 202 saying why", resp.Status, body)
	}
	other := []byte(mustJSON(t, devhook.NewRunStatus("run-other", "app", "queued", time.Now())))
	if resp, _ := tn.post("/hook", other, signed(other)); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("live delivery of another run: %s, want the receiver's 503", resp.Status)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	eventually(t, "both deliveries of the run taken", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"run-live/queued", "run-live/running"}; !slices.Equal(order, want) {
		t.Fatalf("receiver took %v, want %v", order, want)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Issue 30, on the NATS store: the queue of a cluster drains each run in
// its order too, with a receiver that fails first attempts, and live
// deliveries sent to another instance while the queue drains.
func TestQueuedRunsInOrderOnNATS(t *testing.T) {
	ns := natstest.Run(t)
	url, _ := clusterRelay(t, ns, nil)
	other, _ := clusterRelay(t, ns, nil)
	rec, rs := newRunReceiver(t, true)
	cr, err := relayclient.Open(context.Background(), http.DefaultClient, url, "")
	if err != nil {
		t.Fatal(err)
	}
	runs := runNames(12)
	db, err := storage.Open(filepath.Join(t.TempDir(), "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := agent.Config{RelayURL: url, Credentials: cr, Forward: []string{rs.URL}, Store: db, Secret: secret,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logf: t.Logf}
	fastRetries(&cfg)
	ag, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	sendRunsLive(t, other+"/c/"+cr.Channel, runs, func() { go func() { done <- ag.Run(ctx) }() })
	eventually(t, "every delivery taken by the receiver", func() bool { return rec.count() == 3*len(runs) })
	rec.check(t, runs)
}

// gatedRetries is a store whose PutRetry waits while its gate is closed:
// a commit queued behind a slow flush, made to last.
type gatedRetries struct {
	*storage.DB
	closed  atomic.Bool
	open    chan struct{}
	waiting atomic.Int32 // PutRetry calls at the gate
}

func (s *gatedRetries) PutRetry(id string, st devhook.RetryState) error {
	if s.closed.Load() {
		s.waiting.Add(1)
		<-s.open
	}
	return s.DB.PutRetry(id, st)
}

// A delivery whose place behind an owed one of its run is being recorded
// hands the reading of the connection on before the write, which may
// wait: a live delivery of another run that comes meanwhile is read and
// forwarded (the receiver's 503), not left unread until the write is
// done.
//
// The wait is injected (gatedRetries): a bbolt commit that queues behind
// the journal's flush lasts milliseconds, too short to see.
func TestOwedBehindHandsTheReadingOnBeforeItsWrite(t *testing.T) {
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer rs.Close()
	var store *gatedRetries
	tn := newTunnel(t, rs.URL, func(c *agent.Config) {
		store = &gatedRetries{DB: c.Store.(*storage.DB), open: make(chan struct{})}
		c.Store = store
		c.RetryMinBackoff, c.RetryMaxBackoff = time.Hour, time.Hour
	})
	queued := []byte(mustJSON(t, devhook.NewRunStatus("run-gated", "app", "queued", time.Now())))
	if resp, _ := tn.post("/hook", queued, signed(queued)); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("with no agent: %s", resp.Status)
	}
	tn.startAgent()
	eventually(t, "the queued delivery owed", func() bool { return len(retryStates(t, tn.db)) == 1 })

	store.closed.Store(true)
	behind := make(chan int, 1)
	go func() {
		running := []byte(mustJSON(t, devhook.NewRunStatus("run-gated", "app", "running", time.Now())))
		resp, _ := tn.post("/hook", running, signed(running))
		behind <- resp.StatusCode
	}()
	eventually(t, "the delivery behind the owed one at its write", func() bool { return store.waiting.Load() > 0 })
	other := []byte(mustJSON(t, devhook.NewRunStatus("run-other", "app", "queued", time.Now())))
	resp, _ := tn.post("/hook", other, signed(other))
	close(store.open)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("live delivery of another run while a write waits: %s, want the receiver's 503", resp.Status)
	}
	if code := <-behind; code != http.StatusAccepted {
		t.Errorf("live delivery behind the owed one: %d, want 202", code)
	}
}

// A delivery owed behind an earlier one of its run was never tried: the
// try that delivers it after that one is its first, and its result says
// so (Followed, Retry 0), not "retry 1 after the first try failed"; the
// earlier one's says how many retries it took, since its first try.
func TestOwedBehindIsDeliveredAtItsFirstTry(t *testing.T) {
	var mu sync.Mutex
	down := true
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer rs.Close()
	tn := newTunnel(t, rs.URL, fastRetries)
	queueRuns(t, tn.url(""), 1)
	tn.startAgent()
	eventually(t, "the run's three deliveries owed", func() bool { return len(retryStates(t, tn.db)) == 3 })
	eventually(t, "the first one retried", func() bool {
		for _, r := range tn.resultsCopy() {
			if r.Owed && !r.Behind {
				d, err := tn.db.Delivery(r.Delivery.ID)
				return err == nil && len(d.Attempts) >= 2
			}
		}
		return false
	})
	mu.Lock()
	down = false
	mu.Unlock()
	eventually(t, "nothing owed", func() bool { return len(retryStates(t, tn.db)) == 0 })
	eventually(t, "three results of the deliveries that went", func() bool {
		n := 0
		for _, r := range tn.resultsCopy() {
			if r.Retry > 0 || r.Followed {
				n++
			}
		}
		return n == 3
	})
	retried, followed := 0, 0
	for _, r := range tn.resultsCopy() {
		if !r.Followed && r.Retry == 0 {
			continue
		}
		d, err := tn.db.Delivery(r.Delivery.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Followed:
			followed++
			if r.Retry != 0 || len(d.Attempts) != 1 || r.Since.After(r.Attempt.StartedAt) {
				t.Errorf("delivery %s owed behind: result retry %d since %v, %d attempts, want its first try", r.Delivery.ID, r.Retry, r.Since, len(d.Attempts))
			} else if k := d.Attempts[0].Kind; k != devhook.AttemptRedelivery {
				// Queued at the relay, sent for the first time: a
				// redelivery, as the others' first try (before, "retry").
				t.Errorf("delivery %s owed behind: its first try recorded as %q, want %q", r.Delivery.ID, k, devhook.AttemptRedelivery)
			}
		default:
			retried++
			if r.Retry != len(d.Attempts)-1 || !r.Since.Equal(d.Attempts[0].StartedAt) {
				t.Errorf("delivery %s: result retry %d since %v, want %d since its first try %v", r.Delivery.ID, r.Retry, r.Since, len(d.Attempts)-1, d.Attempts[0].StartedAt)
			}
		}
	}
	if retried != 1 || followed != 2 {
		t.Errorf("%d delivered by a retry and %d at their first try behind the first, want 1 and 2", retried, followed)
	}
}
