package agent_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

// hangingReceiver takes requests and answers none until release is
// called (the test's end at the latest); in gets a value as each one
// arrives.
func hangingReceiver(t *testing.T) (srv *httptest.Server, in chan string, release func()) {
	t.Helper()
	in = make(chan string, 64)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in <- r.URL.Path
		select {
		case <-gate:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() { release(); srv.Close() })
	return srv, in, release
}

// A receiver that takes requests and never answers holds at most its share
// of the workers: a delivery over it is not sent, its sender gets 503 with
// Retry-After and its record says why, and the other route's receiver gets
// its deliveries at once. (Before, the hanging receiver held every worker,
// the agent read nothing more, and the other route's sender got the
// relay's 504.)
func TestHangingReceiverHoldsOnlyItsShare(t *testing.T) {
	hang, in, release := hangingReceiver(t)
	recB, b := newRecorder(t)
	const workers = 4 // a share of 3
	tn := newTunnelRelay(t, b.URL, func(c *relay.Config) {
		c.ResponseTimeout = 20 * time.Second // the old agent's deliveries for B waited this long, then 504
	}, func(cfg *agent.Config) {
		cfg.Concurrency = workers
		cfg.ForwardTimeout = time.Minute
		cfg.Routes = mustRoutes(t, "path:/hang/** -> "+hang.URL)
	})
	tn.startAgent()

	var wg sync.WaitGroup
	t.Cleanup(func() { release(); wg.Wait() }) // before the tunnel stops
	for i := range workers - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(fmt.Sprintf(`{"n":%d}`, i))
			tn.post("/hang/x", body, signed(body))
		}()
	}
	for range workers - 1 {
		select {
		case <-in:
		case <-time.After(time.Minute):
			t.Fatal("the hanging receiver did not get its requests")
		}
	}

	body := []byte(`{"n":"over"}`)
	resp, got := tn.post("/hang/x", body, signed(body))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(got), fmt.Sprintf("not sent: %d requests to %s are under way", workers-1, hang.URL)) {
		t.Fatalf("a delivery over the hanging receiver's share: %s %q %v", resp.Status, got, resp.Header)
	}
	d := mustDelivery(t, tn, resp.Header.Get("Devhook-Delivery"))
	if len(d.Attempts) != 1 || d.Attempts[0].Status != 0 || !strings.HasPrefix(d.Attempts[0].Error, "not sent: ") ||
		d.Attempts[0].Target != hang.URL+"/hang/x" || d.Attempts[0].Route == nil || d.Attempts[0].Route.Index != 1 {
		t.Fatalf("its record: %+v", d.Attempts)
	}
	select {
	case p := <-in:
		t.Fatalf("the receiver got %s over its share", p)
	default:
	}

	for i := range 2 * workers {
		body := []byte(fmt.Sprintf(`{"b":%d}`, i))
		resp, got := tn.post("/b", body, signed(body))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the other receiver's delivery %d: %s %q", i, resp.Status, got)
		}
	}
	if n := len(recB.requests()); n != 2*workers {
		t.Errorf("the other receiver got %d, want %d", n, 2*workers)
	}
}

// With one receiver there is no other to keep workers for: every worker
// may wait on it.
func TestOneReceiverHasEveryWorker(t *testing.T) {
	hang, in, release := hangingReceiver(t)
	const workers = 4
	tn := newTunnel(t, hang.URL, func(cfg *agent.Config) {
		cfg.Concurrency = workers
		cfg.ForwardTimeout = time.Minute
	})
	tn.startAgent()
	var wg sync.WaitGroup
	t.Cleanup(func() { release(); wg.Wait() })
	codes := make(chan int, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(fmt.Sprintf(`{"n":%d}`, i))
			resp, _ := tn.post("/x", body, signed(body))
			codes <- resp.StatusCode
		}()
	}
	for range workers {
		select {
		case <-in:
		case c := <-codes:
			t.Fatalf("a sender got %d while the receiver had every worker", c)
		case <-time.After(time.Minute):
			t.Fatal("the receiver did not get every worker's request")
		}
	}
}

// readCountingStore counts the reads of deliveries of a real store.
type readCountingStore struct {
	*storage.DB
	reads atomic.Int64
}

func (s *readCountingStore) Delivery(id string) (*devhook.Delivery, error) {
	s.reads.Add(1)
	return s.DB.Delivery(id)
}

// Queued deliveries over a hanging receiver's share are owed, not sent:
// their retries wait while the share is full, without counting as tries,
// being recorded or reading their deliveries (before, each retry read its
// delivery, at every turn, for nothing), and go once the receiver answers
// again.
func TestHangingReceiverShareQueuedAndRetries(t *testing.T) {
	hang, in, release := hangingReceiver(t)
	_, b := newRecorder(t)
	const workers = 4 // a share of 3
	var store *readCountingStore
	tn := newTunnel(t, b.URL, func(cfg *agent.Config) {
		store = &readCountingStore{DB: cfg.Store.(*storage.DB)}
		cfg.Store = store
		fastRetries(cfg)
		cfg.Concurrency = workers
		cfg.ForwardTimeout = time.Minute
		cfg.Routes = mustRoutes(t, "path:/hang/** -> "+hang.URL)
	})
	t.Cleanup(release) // before the tunnel stops
	var ids []string
	for i := range workers + 1 { // each its own run: its own path
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		resp, _ := tn.post(fmt.Sprintf("/hang/%d", i), body, signed(body))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("queued %d: %s", i, resp.Status)
		}
		ids = append(ids, resp.Header.Get("Devhook-Delivery"))
	}
	tn.startAgent()
	for range workers - 1 {
		select {
		case <-in:
		case <-time.After(time.Minute):
			t.Fatal("the hanging receiver did not get its share")
		}
	}
	eventually(t, "two owed", func() bool { return len(retryStates(t, tn.db)) == 2 })
	owed := retryStates(t, tn.db)
	for id := range owed {
		d := mustDelivery(t, tn, id)
		if len(d.Attempts) != 1 || !strings.HasPrefix(d.Attempts[0].Error, "not sent: 3 requests to "+hang.URL) {
			t.Fatalf("owed delivery %s: %+v", id, d.Attempts)
		}
	}
	// A while for retries to come round (every 5 to 40 ms) while the
	// share is full; a slow machine sees fewer, and checks less, never
	// wrongly.
	reads := store.reads.Load()
	time.Sleep(300 * time.Millisecond)
	select {
	case p := <-in:
		t.Fatalf("the receiver got %s over its share", p)
	default:
	}
	if n := store.reads.Load() - reads; n != 0 {
		t.Errorf("%d reads of owed deliveries while their receiver's share was full, want none", n)
	}
	release()
	eventually(t, "nothing owed", func() bool { return len(retryStates(t, tn.db)) == 0 })
	for _, id := range ids {
		d := mustDelivery(t, tn, id)
		if _, wasOwed := owed[id]; wasOwed {
			if len(d.Attempts) != 2 || d.Attempts[1].Kind != devhook.AttemptRetry || d.Attempts[1].Status != 200 {
				t.Errorf("owed delivery %s: %+v, want its not-sent attempt and one retry", id, d.Attempts)
			}
		} else if len(d.Attempts) != 1 || d.Attempts[0].Status != 200 {
			t.Errorf("delivery %s: %+v", id, d.Attempts)
		}
	}
}
