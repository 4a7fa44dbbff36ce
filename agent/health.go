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
// forwarded and queued ones are held. A success ends that once no write is
// held: on a disk with a little room a small write may succeed while larger
// ones still fail. Each change is said in a log line and a
// devhook.ChangeHealth, not once per delivery; an episode that starts
// within quietAfter of the end of the last one is not logged, so that a
// disk at the edge does not fill the terminal.
type health struct {
	failing atomic.Bool  // read on every record: the only cost when all is well
	held    atomic.Int64 // queued deliveries waiting for a write

	mu    sync.Mutex
	err   string
	since time.Time
	quiet bool      // this episode is not logged
	ended time.Time // when the last episode ended
}

// quietAfter: see health.
const quietAfter = 10 * time.Second

// storeFailed notes that a write failed.
func (a *Agent) storeFailed(err error) {
	h := &a.health
	h.mu.Lock()
	first := !h.failing.Load()
	if first {
		h.since = a.cfg.Now()
		h.failing.Store(true)
		h.quiet = !h.ended.IsZero() && h.since.Sub(h.ended) < quietAfter
	}
	h.err = err.Error()
	quiet := h.quiet
	h.mu.Unlock()
	if first {
		a.publishHealth()
	}
	if first && !quiet {
		a.cfg.Logf("recording failed: %v; live deliveries are answered 503 and not forwarded, queued ones are held and retried until recording works again", err)
	}
}

// storeOK notes that a write succeeded.
func (a *Agent) storeOK() {
	h := &a.health
	if !h.failing.Load() || h.held.Load() > 0 {
		return
	}
	h.mu.Lock()
	if !h.failing.Load() {
		h.mu.Unlock()
		return
	}
	h.failing.Store(false)
	since, quiet := h.since, h.quiet
	h.err = ""
	h.ended = a.cfg.Now()
	h.mu.Unlock()
	if !quiet {
		a.cfg.Logf("recording works again after %s", FormatDuration(h.ended.Sub(since)))
	}
	a.publishHealth()
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

// FormatDuration writes d rounded to the second, without zero units:
// "1h", "1h30m", "45s" (under a second: to the millisecond). The agent's
// messages use it, and so does listen's output.
func FormatDuration(d time.Duration) string {
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

// writeChecker is what a Store may also do: say whether it can take a
// write now (storage.DB.CheckWrite).
type writeChecker interface{ CheckWrite() error }

// maxSpacePoll bounds the wait between two checks of a store that cannot
// take writes.
const maxSpacePoll = 5 * time.Second

// waitWritable returns true once the store can take a write, false if ctx
// ends first. Until then the agent does not connect: a delivery it takes
// it must record before it answers or acknowledges, so it takes none, and
// the relay keeps the channel's deliveries queued (a sender gets 202). The
// store is checked again after MinBackoff, then twice as long each time,
// up to maxSpacePoll; the history stays readable meanwhile. Each change is
// a log line and a devhook.ChangeHealth.
func (a *Agent) waitWritable(ctx context.Context) bool {
	wc, ok := a.cfg.Store.(writeChecker)
	if !ok {
		return true
	}
	err := wc.CheckWrite()
	if err == nil {
		return true
	}
	h := &a.health
	h.mu.Lock()
	first := !h.failing.Load()
	if first {
		h.since = a.cfg.Now()
		h.failing.Store(true)
		h.quiet = false
	}
	h.err = err.Error()
	h.mu.Unlock()
	if first {
		a.publishHealth()
	}
	a.cfg.Logf("cannot record deliveries: %v; taking none until there is room again: not connected to the relay, which keeps this channel's deliveries queued meanwhile; recorded deliveries stay readable", err)
	wait := a.cfg.MinBackoff
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		if wc.CheckWrite() == nil {
			a.storeOK()
			return true
		}
		wait = min(2*wait, maxSpacePoll)
	}
}
