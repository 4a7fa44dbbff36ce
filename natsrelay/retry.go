package natsrelay

// Trying again. Every loop of this package that tries again after a
// failure waits between tries, longer each time up to a ceiling, with
// jitter (backoff), and logs a failure that repeats once, then with a
// count (repeatLog), never once per try:
//
//   - the NATS connection's reconnects: ReconnectOptions, which the
//     relay's connection uses (nats.go's own loop, with this delay);
//   - catching up after NATS comes back (router.go, announceLoop): the
//     agents bucket watched anew, and the agents that attached meanwhile
//     announced; the local agents' queues read again then (kickAll: once
//     per reconnect; the relay's drain backs off its own reads);
//   - compare-and-set of a channel's usage count or its last opening
//     (quota.go): a few tries, apart, and only on a conflict;
//   - the sweep of objects no entry points to (orphans.go): after a
//     failure, the next waits longer, up to orphanBackoffMax.
//
// A live delivery passed to another instance is never retried here: it
// is queued, or its sender gets 503 and Retry-After.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// backoff is the wait before each next try: Min, doubling up to Max, each
// wait drawn in its upper half (jitter), so that instances that failed
// together do not try again together.
type backoff struct {
	Min, Max time.Duration
	n        int
}

// next returns the wait before the next try, and counts the try.
func (b *backoff) next() time.Duration {
	d := b.Min
	for i := 0; i < b.n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	b.n++
	return d/2 + rand.N(d/2+1)
}

// reset starts again from Min, after a success.
func (b *backoff) reset() { b.n = 0 }

// repeatLog logs a failure that repeats: its first occurrence at once,
// then at most one line every every, saying how many failures it left
// out, and one line when it ends.
type repeatLog struct {
	every time.Duration

	mu      sync.Mutex
	failing bool
	since   time.Time // the first failure
	last    time.Time // the last line written
	n       int       // failures since the first
	skipped int       // failures left out of the log since the last line
}

// fail records a failure at now and logs it if it is the first of a row,
// or if the last line is older than every.
func (l *repeatLog) fail(logf func(string, ...any), now time.Time, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	l.n++
	switch {
	case !l.failing:
		l.failing, l.since, l.last, l.n, l.skipped = true, now, now, 1, 0
		logf("%s", msg)
	case now.Sub(l.last) >= l.every:
		logf("%s (%d failures in a row since %s, %d not logged)", msg, l.n, l.since.UTC().Format(time.RFC3339), l.skipped)
		l.last, l.skipped = now, 0
	default:
		l.skipped++
	}
}

// ok records a success at now, logging the end of a row of failures with
// its count; what says what succeeded.
func (l *repeatLog) ok(logf func(string, ...any), now time.Time, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.failing {
		return
	}
	if l.n > 1 {
		logf("%s, after %d failures in a row over %s", what, l.n, now.Sub(l.since).Round(time.Millisecond))
	} else {
		logf("%s, after 1 failure", what)
	}
	l.failing, l.n, l.skipped = false, 0, 0
}

// Reconnects to NATS: the first after reconnectMin, doubling up to
// reconnectMax, with jitter. A connection that lived less than
// reconnectHealthy before it was lost again does not start again from
// reconnectMin: the count goes on, so that a server that accepts and
// drops connections is not dialled in a tight loop.
const (
	reconnectMin     = 100 * time.Millisecond
	reconnectMax     = 5 * time.Second
	reconnectHealthy = 30 * time.Second
)

// ReconnectOptions are the options of a relay's connection to NATS for
// its reconnects: the delay between tries (backoff with jitter and a
// ceiling, see reconnectMax), tries forever, and nothing kept for the
// reconnect (nats.go's buffer): a call made while the connection is lost
// fails at once rather than be sent when it is back, after its sender
// was answered 503 (link.go).
func ReconnectOptions() []nats.Option {
	r := &reconnectDelay{b: backoff{Min: reconnectMin, Max: reconnectMax}, now: time.Now}
	return []nats.Option{
		nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.CustomReconnectDelay(r.delay),
	}
}

// reconnectDelay is nats.go's CustomReconnectDelay, with the memory of
// the previous loss.
type reconnectDelay struct {
	now func() time.Time

	mu   sync.Mutex
	b    backoff
	last time.Time // the last call
}

// delay is the wait before the attempts-th pass over the servers of one
// loss of the connection.
func (r *reconnectDelay) delay(attempts int) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	// The first pass of a new loss: was the connection up long enough
	// since the last loss's tries for it to count as healthy?
	if attempts == 1 && (r.last.IsZero() || now.Sub(r.last) >= reconnectHealthy+reconnectMax) {
		r.b.reset()
	}
	r.last = now
	return r.b.next()
}

// sleep waits d, or less if ctx ends first; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// casBackoff is the wait between two tries of a compare-and-set that
// another writer won: short, as the winner is done already.
func casBackoff() backoff { return backoff{Min: time.Millisecond, Max: 50 * time.Millisecond} }

// conflict reports whether err is a compare-and-set another writer won,
// the one failure worth trying again at once.
func conflict(err error) bool { return errors.Is(err, jetstream.ErrKeyExists) }
