package agent_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/storage"
)

// An owed delivery whose body the store can no longer read (a byte of its
// body file changed while the agent was stopped) is not sent, and once
// RetryFor has passed it is given up, the reason saying what cannot be
// read. Before, each retry found the read failing, rescheduled it without
// counting a try, as on a full disk: it stayed owed for ever, read again
// at every backoff, and nothing said so.
func TestOwedDeliveryWithUnreadableBodyGivenUp(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	var got atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer recv.Close()
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		fastRetries(c)
		c.RetryFor = time.Hour
		c.Now = now
	})
	// Large enough for a body file (storage keeps smaller ones in bbolt),
	// where a changed byte leaves the rest of the delivery readable.
	body := []byte(`{"pad":"` + strings.Repeat("p", 4<<10) + `"}`)
	resp, _ := tn.post("/q", body, signed(body))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery with no agent: %s, want 202", resp.Status)
	}
	id := resp.Header.Get("Devhook-Delivery")
	tn.startAgent()
	eventually(t, "owed and retried", func() bool {
		d, err := tn.db.Delivery(id)
		return err == nil && len(d.Attempts) >= 2 && retryStates(t, tn.db)[id].State == devhook.RetryOwed
	})
	tn.stopAgent()

	// Its body damaged in its body file, the store closed meanwhile (its
	// journal applied: the body is in the file).
	path := tn.db.Path()
	if err := tn.db.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(path + ".bodies/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no body file beside %s (%v)", path, err)
	}
	damaged := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, body); i >= 0 {
			b[i+len(body)/2] ^= 0x10
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			damaged = true
		}
	}
	if !damaged {
		t.Fatalf("the body is in none of the body files %q", files)
	}
	db, err := storage.Open(path, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tn.stopAgent(); db.Close() }) // before newTunnel's, which closed the first
	tn.db, tn.cfg.Store = db, db
	d, err := db.Delivery(id)
	var partial *devhook.PartialError
	if !errors.As(err, &partial) || partial.Body == nil {
		t.Fatalf("reading the damaged delivery: %v, want a *devhook.PartialError for its body", err)
	}
	attempts, sent := len(d.Attempts), got.Load()

	// Past RetryFor: given up, saying why, without sending it.
	skew.Store(int64(2 * time.Hour))
	tn.startAgent()
	eventually(t, "given up", func() bool { return retryStates(t, db)[id].State == devhook.RetryFailed })
	st := retryStates(t, db)[id]
	if !strings.HasPrefix(st.Reason, "gave up after 2h") || !strings.Contains(st.Reason, "its body cannot be read") {
		t.Errorf("reason %q, want it given up after 2h as its body cannot be read", st.Reason)
	}
	eventually(t, "a given-up result", func() bool {
		for _, r := range tn.resultsCopy() {
			if r.GaveUp && r.Delivery.ID == id && r.Error == st.Reason {
				return true
			}
		}
		return false
	})
	if d, _ := db.Delivery(id); len(d.Attempts) != attempts || got.Load() != sent {
		t.Errorf("%d attempts and %d requests to the receiver after its body was damaged, want %d and %d: a partial delivery is never sent",
			len(d.Attempts), got.Load(), attempts, sent)
	}
}
