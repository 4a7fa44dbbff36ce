package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/storage"
)

// A worker that holds a queued delivery until the disk takes it leaves the
// reading of the connection to another, even with a single one
// (Concurrency 1): the next queued deliveries are read and held too, a
// live delivery meanwhile is answered 503 rather than left unread, and
// once there is room every one goes through; the workers end with Run.
//
// The full disk is injected (fullStore): it must fail every write from
// the first delivery on, then take them all at a moment the test chooses,
// while the agent is connected.
func TestServe_HeldDeliveryLeavesTheReadingToAnother(t *testing.T) {
	rec, recv := newRecorder(t)
	var store *fullStore
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		store = &fullStore{DB: c.Store.(*storage.DB)}
		c.Store = store
		c.Concurrency = 1
	})
	const queued = 3
	store.full.Store(true)
	for i := range queued {
		// Each on a path of its own: no two in one run's line (order.go),
		// so that all three are under way at once.
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		if resp, _ := tn.post(fmt.Sprintf("/q%d", i), body, signed(body)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %d with no agent: %s, want 202", i, resp.Status)
		}
	}
	healthOf := startAgentWithHealth(t, tn)
	eventually(t, "every queued delivery held", func() bool { return healthOf().Held == queued })

	resp, body := tn.post("/live", []byte(`{"live":1}`), nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "disk full") {
		t.Fatalf("live delivery while the queued ones are held: %s %q, want 503", resp.Status, body)
	}
	if n := workers(); n > 1+queued {
		t.Errorf("%d workers: one reading, and %d holding, at most", n, queued)
	}

	store.full.Store(false)
	rec.waitFor(t, queued)
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	eventually(t, "none held", func() bool { return healthOf().Held == 0 })
	if resp, _ := tn.post("/live", []byte(`{"live":2}`), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("live delivery after recovery: %s", resp.Status)
	}
	tn.stopAgent()
	eventually(t, "no workers left after Run returned", func() bool { return workers() == 0 })
}
