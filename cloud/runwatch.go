package cloud

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/devhook/devhook/auth"
)

// Defaults of RunWatch.
const (
	DefaultWatchMin      = 250 * time.Millisecond
	DefaultWatchMax      = 2 * time.Second
	DefaultWatchFailures = 20
	// logAnchor is how much of the end of the log seen so far WatchRun
	// looks for first in a log whose start the service dropped; then half
	// as much, down to minLogAnchor.
	logAnchor    = 4096
	minLogAnchor = 16
)

// RunWatch says how WatchRun follows a run.
type RunWatch struct {
	// Min and Max pace the reads: the second read comes Min after the
	// first, and each next one twice as long after the one before while
	// nothing changes (the status, the log), up to Max; after a change,
	// Min again. Zero means DefaultWatchMin and DefaultWatchMax.
	Min, Max time.Duration
	// OnStatus, when not nil, is called with the run each time its
	// status changes, the first read included.
	OnStatus func(Run)
	// OnLog, when not nil, makes WatchRun read the run's log too and is
	// called with each piece of it not seen before, in order, the last
	// once the run has ended. gap is true when some text was not seen:
	// more came between two reads than the service keeps of a log (it
	// keeps the end), and text is then the whole log as it is. An error
	// from OnLog ends the watch with it.
	OnLog func(text string, gap bool) error
	// OnTrouble, when not nil, hears of reads that fail in a way time may
	// cure (no answer, a 5xx, a 429), which WatchRun tries again, paced
	// as above: once with the error at the first failure of a row, and
	// once with nil and the count when a read succeeds after them.
	OnTrouble func(err error, failures int)
	// MaxFailures is how many such failures in a row end the watch; 0
	// means DefaultWatchFailures.
	MaxFailures int
	// After waits d; nil means time.After of d give or take a tenth, so
	// that many watchers do not read in step. Tests give their own.
	After func(d time.Duration) <-chan time.Time
}

func (w *RunWatch) defaults() {
	if w.Min <= 0 {
		w.Min = DefaultWatchMin
	}
	if w.Max <= 0 {
		w.Max = DefaultWatchMax
	}
	w.Max = max(w.Max, w.Min)
	if w.MaxFailures <= 0 {
		w.MaxFailures = DefaultWatchFailures
	}
	if w.After == nil {
		w.After = func(d time.Duration) <-chan time.Time {
			return time.After(d + time.Duration((rand.Float64()-0.5)*0.2*float64(d)))
		}
	}
}

// WatchRun reads the run's metadata (and, with OnLog, its log first)
// until its status is final or ctx ends, paced by w, and returns the whole
// record (as GetRun). It returns at once on an answer time does not cure
// (a 404, a 401), and after w.MaxFailures failures in a row of the others.
func (c *Client) WatchRun(ctx context.Context, app, id string, w RunWatch) (Run, error) {
	w.defaults()
	var (
		status   string
		log      logFollower
		wait     = w.Min
		failures int
		lastErr  error
	)
	for {
		r, changed, err := c.watchOnce(ctx, app, id, &w, &status, &log)
		switch {
		case err == nil:
			if failures > 0 && w.OnTrouble != nil {
				w.OnTrouble(nil, failures)
			}
			failures = 0
			if r.Final() {
				return c.watchEnd(ctx, app, id, r, &w, &log)
			}
		case ctx.Err() != nil || !transient(err):
			return r, fmt.Errorf("wait for run %s (last status %q): %w", id, status, err)
		default:
			failures++
			lastErr = err
			if failures >= w.MaxFailures {
				return r, fmt.Errorf("wait for run %s (last status %q): %d reads in a row failed, the last: %w", id, status, failures, lastErr)
			}
			if failures == 1 && w.OnTrouble != nil {
				w.OnTrouble(err, 1)
			}
		}
		if changed {
			wait = w.Min
		} else {
			wait = min(2*wait, w.Max)
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("wait for run %s (last status %q): %w", id, status, context.Cause(ctx))
		case <-w.After(wait):
		}
	}
}

// watchOnce reads the log (with OnLog) and then the metadata, so that a
// final status read after it means the log has only its end to come.
func (c *Client) watchOnce(ctx context.Context, app, id string, w *RunWatch, status *string, log *logFollower) (r Run, changed bool, err error) {
	if w.OnLog != nil {
		grew, err := log.read(ctx, c, app, id, w.OnLog)
		if err != nil {
			return r, false, err
		}
		changed = grew
	}
	r, err = c.RunMetadata(ctx, app, id)
	if err != nil {
		return r, changed, err
	}
	if s := r.Status(); s != *status {
		*status = s
		changed = true
		if w.OnStatus != nil {
			w.OnStatus(r)
		}
	}
	return r, changed, nil
}

// watchEnd reads the end of the log of a run that ended, and its record.
func (c *Client) watchEnd(ctx context.Context, app, id string, r Run, w *RunWatch, log *logFollower) (Run, error) {
	if w.OnLog != nil {
		if _, err := log.read(ctx, c, app, id, w.OnLog); err != nil {
			return r, fmt.Errorf("read the log of run %s: %w", id, err)
		}
	}
	done, err := c.runWithOutput(ctx, app, id, r)
	if err != nil {
		return done, fmt.Errorf("read run %s: %w", id, err)
	}
	return done, nil
}

// transient reports whether a failed call may succeed if tried again: no
// answer came, or the service said it is busy or failing.
func transient(err error) bool {
	if errors.As(err, new(onLogError)) {
		return false
	}
	var ae *auth.HTTPError
	if !errors.As(err, &ae) {
		return !errors.Is(err, context.Canceled)
	}
	return ae.Status == http.StatusTooManyRequests || ae.Status >= 500
}

// logFollower keeps the log seen so far, to hand on only what is new.
type logFollower struct{ seen string }

// read reads the log and calls emit with its new text; grew says there
// was some.
func (f *logFollower) read(ctx context.Context, c *Client, app, id string, emit func(string, bool) error) (grew bool, err error) {
	cur, err := c.RunLogs(ctx, app, id)
	if err != nil {
		return false, err
	}
	text, gap := newLogText(f.seen, cur)
	f.seen = cur
	if text == "" && !gap {
		return false, nil
	}
	if err := emit(text, gap); err != nil {
		return true, onLogError{err}
	}
	return true, nil
}

// onLogError is an error of RunWatch.OnLog: it ends the watch.
type onLogError struct{ error }

func (e onLogError) Unwrap() error { return e.error }

// newLogText is what of the log cur is new after prev, the log as last
// read. A log grows at its end, so it is what follows prev. A service that
// keeps only the end of a long log (the emulator keeps 1 MiB, after a line
// saying how much it left out) drops its start: the new text then follows
// the end of prev in cur, the last logAnchor bytes of it or, when the
// service dropped some of those too, fewer, down to minLogAnchor. When
// none of that end is in cur (more came between the reads than the service
// keeps), all of cur is new and some text was not seen (gap).
func newLogText(prev, cur string) (text string, gap bool) {
	if strings.HasPrefix(cur, prev) {
		return cur[len(prev):], false
	}
	for k := min(len(prev), logAnchor); ; k /= 2 {
		if i := strings.LastIndex(cur, prev[len(prev)-k:]); i >= 0 {
			return cur[i+k:], false
		}
		if k/2 < minLogAnchor {
			return cur, true
		}
	}
}
