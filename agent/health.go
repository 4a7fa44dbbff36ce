package agent

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
)

// health tracks whether recording works. When a write to the store fails
// (a full disk, typically), live deliveries are answered 503 without being
// forwarded and queued ones are held; the first success ends that. Each
// change is said once, in a log line and a devhook.ChangeHealth, not once
// per delivery.
type health struct {
	failing atomic.Bool  // read on every record: the only cost when all is well
	held    atomic.Int64 // queued deliveries waiting for a write

	mu    sync.Mutex
	err   string
	since time.Time
}

// holdMaxBackoff caps the wait between two tries of a held write, so that
// the relay's queue moves again soon after room returns.
const holdMaxBackoff = 2 * time.Second

// storeFailed notes that a write failed.
func (a *Agent) storeFailed(err error) {
	h := &a.health
	h.mu.Lock()
	first := !h.failing.Load()
	if first {
		h.since = a.cfg.Now()
		h.failing.Store(true)
	}
	h.err = err.Error()
	h.mu.Unlock()
	if first {
		a.cfg.Logf("recording failed: %v; live deliveries are answered 503 and not forwarded, queued ones are held and retried until recording works again", err)
		a.publishHealth()
	}
}

// storeOK notes that a write succeeded.
func (a *Agent) storeOK() {
	h := &a.health
	if !h.failing.Load() {
		return
	}
	h.mu.Lock()
	if !h.failing.Load() {
		h.mu.Unlock()
		return
	}
	h.failing.Store(false)
	since := h.since
	h.err = ""
	h.mu.Unlock()
	a.cfg.Logf("recording works again after %s; %d held deliveries resume", fmtDuration(a.cfg.Now().Sub(since)), h.held.Load())
	a.publishHealth()
}

// hold retries the write res waits for until it succeeds, then carries on
// with d. It returns false when held ends first: the connection ended (the
// relay sends d again on the next one) or the agent is stopping.
func (a *Agent) hold(work, held context.Context, d *devhook.Delivery, res *processed) bool {
	a.health.held.Add(1)
	defer a.health.held.Add(-1)
	wait := a.cfg.MinBackoff
	for res.hold != 0 {
		t := time.NewTimer(a.jitter(wait))
		select {
		case <-held.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(wait*2, holdMaxBackoff, a.cfg.MaxBackoff)
		switch res.hold {
		case holdRecord:
			created, err := a.cfg.Store.PutDelivery(d)
			if err != nil {
				a.storeFailed(err)
				continue
			}
			a.storeOK()
			*res = a.forwardRecorded(work, d, created)
		case holdOwed:
			if err := a.cfg.Store.PutRetry(d.ID, *res.owe); err != nil {
				a.storeFailed(err)
				continue
			}
			a.storeOK()
			a.owedRecorded(d, res.Attempt, *res.owe)
			res.hold = 0
		}
	}
	return true
}

// Health returns whether recording works and how many deliveries are
// held, owed and given up.
func (a *Agent) Health() devhook.Health {
	h := devhook.Health{Held: int(a.health.held.Load())}
	a.health.mu.Lock()
	if a.health.failing.Load() {
		h.StorageError, h.Since = a.health.err, a.health.since.UTC()
	}
	a.health.mu.Unlock()
	h.Owed, h.Failed = a.owed.counts()
	return h
}

func (a *Agent) publishHealth() {
	if a.cfg.OnChange == nil {
		return
	}
	h := a.Health()
	a.cfg.OnChange(devhook.Change{Kind: devhook.ChangeHealth, Health: &h})
}

// fmtDuration writes d rounded to the second, without zero units:
// "1h", "1h30m", "45s".
func fmtDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
