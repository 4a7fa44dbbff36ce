package agent_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/agent"
)

// A route whose receiver takes requests and never answers should hold up
// no other route: with as many of its deliveries under way as the agent
// forwards at once, a delivery of another route should still reach its
// receiver, and its sender get the answer. Today it does not (RELIABILITY.md,
// "Known limits"): the other route's sender waits the relay's 30 s and gets
// 504, or 202 (queued), and its delivery waits until the hanging forwards
// end.
func TestRouteHangingReceiverHoldsUpNoOther(t *testing.T) {
	t.Skip("known limit: the agent's workers are shared by every route (docs/RELIABILITY.md)")
	rec, fast := newRecorder(t)
	in := make(chan struct{}, 64)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	const workers = 4
	tn := newTunnel(t, fast.URL, func(cfg *agent.Config) {
		cfg.Concurrency = workers
		cfg.ForwardTimeout = time.Hour // the hang lasts until the test ends
		cfg.Routes = mustRoutes(t, "path:/slow/** -> "+slow.URL)
	})
	tn.startAgent()
	var senders sync.WaitGroup
	t.Cleanup(func() {
		close(release)
		senders.Wait()
	})
	body := []byte(`{"n":1}`)
	for range workers {
		senders.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, tn.url("/slow/x"), bytes.NewReader(body))
			req.Header = signed(body)
			if resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	for i := range workers {
		select {
		case <-in:
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d deliveries reached the hanging receiver", i, workers)
		}
	}
	// Its receiver's answer, not 202 (queued by the relay) nor 504.
	if resp, rb := tn.post("/fast/x", body, signed(body)); resp.StatusCode != http.StatusOK || string(rb) != "ok" {
		t.Fatalf("a delivery of the other route, while the hanging receiver holds %d: %s %q", workers, resp.Status, rb)
	}
	if got := rec.waitFor(t, 1); got[0].RequestURI != "/fast/x" {
		t.Fatalf("the other route's receiver got %+v", got)
	}
}
