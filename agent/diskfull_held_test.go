package agent_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/internal/fulldisk"
	"github.com/devhook/devhook/storage"
)

// countingStore counts the writes of a real store that failed, and those
// that succeeded.
type countingStore struct {
	*storage.DB
	failed, ok atomic.Int64

	mu      sync.Mutex
	lastErr error
}

func (s *countingStore) count(err error) {
	if err == nil {
		s.ok.Add(1)
		return
	}
	if devhook.ErrorCode(err) == devhook.ENOTFOUND {
		return
	}
	s.failed.Add(1)
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

func (s *countingStore) PutDelivery(d *devhook.Delivery) (bool, error) {
	created, err := s.DB.PutDelivery(d)
	s.count(err)
	return created, err
}

func (s *countingStore) AddAttempt(id string, a devhook.Attempt) (devhook.Attempt, error) {
	rec, err := s.DB.AddAttempt(id, a)
	s.count(err)
	return rec, err
}

func (s *countingStore) PutRetry(id string, st devhook.RetryState) error {
	err := s.DB.PutRetry(id, st)
	s.count(err)
	return err
}

func (s *countingStore) DeleteRetry(id string) error {
	err := s.DB.DeleteRetry(id)
	s.count(err)
	return err
}

// Queued deliveries held on a really full disk (a tmpfs filled to its
// last page as the agent connects, so that every delivery the relay sends
// is held) wait at the store's gate: the disk gets one failed write per
// backoff of the gate's probe, however many are held, not one per held
// delivery. Once the filler is removed, every held delivery is recorded,
// forwarded once and acknowledged, as before the gate.
//
// The failed writes are counted over a window and bounded from above by
// what the probe's backoff allows in the time the window took, with
// slack: a slow machine makes fewer, never more.
func TestHeldDeliveriesShareOneProbeOnAFullDisk(t *testing.T) {
	disk := fulldisk.Mount(t, "8m")
	rec, recv := newRecorder(t)
	var store *countingStore
	logs := &logLines{}
	var fillOnce sync.Once
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		db, err := storage.Open(filepath.Join(disk.Dir, "deliveries.db"), storage.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() }) // after the agent stops (newTunnel's cleanup)
		store = &countingStore{DB: db}
		c.Store = store
		c.Logf = logs.logf
		connected := c.OnConnect
		c.OnConnect = func(cn agent.Connection) {
			// Before the connection's first delivery is read: the agent
			// checked for room before it dialled.
			fillOnce.Do(disk.Fill)
			connected(cn)
		}
	})
	// Fewer than the relay's window (64): all of them are sent at once,
	// and all held, each on a path of its own (no two in one run's line,
	// order.go). Each body (8 KiB) needs pages the full disk has not.
	const queued = 40
	var want []string
	for i := range queued {
		body := []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("p", 8<<10)))
		want = append(want, string(body))
		if resp, _ := tn.post(fmt.Sprintf("/q%d", i), body, signed(body)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %d with no agent: %s, want 202", i, resp.Status)
		}
	}
	healthOf := startAgentWithHealth(t, tn)
	eventually(t, "every queued delivery held", func() bool { return healthOf().Held == queued })
	if n := len(rec.requests()); n != 0 {
		t.Fatalf("the receiver got %d deliveries not recorded", n)
	}
	store.mu.Lock()
	lastErr := store.lastErr
	store.mu.Unlock()
	if !errors.Is(lastErr, syscall.ENOSPC) {
		t.Fatalf("the store's writes failed with %v, want ENOSPC", lastErr)
	}

	// The window: the failed writes of the held deliveries alone.
	failed0, ok0, start := store.failed.Load(), store.ok.Load(), time.Now()
	<-time.After(time.Second) // a measuring window, not a wait for an event
	failed, ok, took := store.failed.Load()-failed0, store.ok.Load()-ok0, time.Since(start)
	// The probe's backoff: from MinBackoff (10 ms here) doubling to the
	// ceiling, min(2 s, MaxBackoff: 100 ms here); a jittered wait is at
	// least half of it. Past the doubling steps, at most one probe per
	// half ceiling; a write that succeeds (none should) opens the gate to
	// every held one once.
	minB, ceil := tn.cfg.MinBackoff, min(2*time.Second, tn.cfg.MaxBackoff)
	steps := int64(math.Ceil(math.Log2(float64(ceil) / float64(minB))))
	bound := 2*(steps+1+int64(took/(ceil/2))) + ok*queued
	t.Logf("%d failed writes, %d succeeded, in %s with %d deliveries held (bound %d; one backoff each would give about %d)",
		failed, ok, took.Round(time.Millisecond), queued, bound, int64(queued)*int64(took/ceil))
	if failed > bound {
		t.Errorf("%d failed writes in %s with %d deliveries held, want at most %d: one probe per backoff, not one per held delivery", failed, took.Round(time.Millisecond), queued, bound)
	}
	if h := healthOf(); h.Held != queued || !strings.Contains(h.StorageError, "no space left on device") {
		t.Errorf("health %+v during the window, want %d held and the disk's error", h, queued)
	}

	// Room again: every held delivery goes through, once.
	disk.Free()
	rec.waitFor(t, queued)
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	waitStored(t, store.DB, queued)
	eventually(t, "recording works again, none held", func() bool {
		h := healthOf()
		return h.StorageError == "" && h.Held == 0
	})
	got := map[string]int{}
	for _, r := range rec.requests() {
		got[string(r.Body)]++
	}
	for i, body := range want {
		if got[body] != 1 {
			t.Errorf("queued delivery %d reached the receiver %d times, want once", i, got[body])
		}
	}
	list, err := store.DB.List(devhook.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if !s.Queued || s.Attempts != 1 || s.Status != http.StatusOK {
			t.Errorf("delivery %s recorded as %+v, want queued with one attempt answered 200", s.ID, s)
		}
	}
	tn.waitResults(queued)
	for _, r := range tn.resultsCopy() {
		if r.Status != http.StatusOK || r.Attempt == nil || r.Attempt.Seq != 1 || r.Error != "" || r.Cut {
			t.Errorf("result %+v, want 200 with its attempt recorded", r)
		}
	}
	if f, w := logs.count("recording failed: "), logs.count("recording works again"); f != 1 || w != 1 {
		t.Errorf("log said recording failed %d times and works again %d times, want once each", f, w)
	}
}
