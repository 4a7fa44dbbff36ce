package relay

import (
	"math/rand/v2"
	"time"
)

// Every loop of the Server that tries a store call again after it failed
// (a read of a channel's queue, the removal of an acknowledged delivery,
// the parking of one that can never be sent, each step of the sweeper)
// keeps a retry: the wait before the next try doubles from a minimum to a
// ceiling, each wait drawn between half and all of it (jitter, so that
// the connections of a relay whose store failed do not all try again at
// once), and back to the minimum after a try that worked. A failure that
// repeats is logged once when it begins, then at most once every
// retryLogEvery with the count of failures so far, and once when it ends,
// with the count: never a line per try.

// Bounds of the wait before a failed read of a channel's queue, a failed
// removal of an acknowledged delivery or a failed park is tried again.
const (
	RetryMin = 50 * time.Millisecond
	RetryMax = 5 * time.Second
)

// SweepRetryMax bounds the wait before a failed step of the sweeper is
// tried again; the wait begins at Config.SweepInterval (and is never
// below it).
const SweepRetryMax = 10 * time.Minute

// logStore logs a store call a request made (a delivery, a channel opened
// or checked, an agent connecting) that failed: at most one line every 10
// seconds, saying how many it left out, so that a flood of requests to a
// failing store is not a flood of lines.
func (s *Server) logStore(format string, args ...any) {
	n := s.storeLog.skip(time.Now())
	if n < 0 {
		return
	}
	if n > 0 {
		format += " (and %d more failures of the store since the last line)"
		args = append(args, n)
	}
	s.cfg.Logf(format, args...)
}

// retryLogEvery is how often a failure that goes on is logged again.
const retryLogEvery = time.Minute

// retry is the state of one retry loop. Its owner serializes calls.
type retry struct {
	min, max time.Duration       // zero: RetryMin, RetryMax
	rand     func(n int64) int64 // in [0, n); nil: math/rand/v2

	wait  time.Duration // the last wait before jitter; 0 after a try that worked
	fails int           // failures since the last try that worked
	since time.Time     // the first of them
	told  time.Time     // when they were last logged
}

// fail records a try that failed at now. It returns the wait before the
// next try, and whether to log the failure now (the first one, then once
// every retryLogEvery while they go on).
func (r *retry) fail(now time.Time) (wait time.Duration, log bool) {
	if r.fails == 0 {
		r.since = now
	}
	r.fails++
	lo, hi := r.min, r.max
	if lo <= 0 {
		lo = RetryMin
	}
	if hi <= 0 {
		hi = RetryMax
	}
	r.wait = min(max(2*r.wait, lo), max(hi, lo))
	if r.fails == 1 || now.Sub(r.told) >= retryLogEvery {
		r.told, log = now, true
	}
	return r.jitter(r.wait), log
}

// jitter returns a wait between d/2 and d.
func (r *retry) jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	n := rand.Int64N
	if r.rand != nil {
		n = r.rand
	}
	return d/2 + time.Duration(n(int64(d-d/2)+1))
}

// ok records a try that worked. It returns how many failed before it,
// and since when: a line then says the failing ended (none when fails is 0).
func (r *retry) ok() (fails int, since time.Time) {
	fails, since = r.fails, r.since
	r.wait, r.fails = 0, 0
	return fails, since
}

// failing reports the failures since the last try that worked.
func (r *retry) failing() int { return r.fails }

// RetrySchedule returns the most tries a retry loop whose waits double
// from lo to hi makes within d of its first try, each wait being at least
// half of its step (the jitter): the bound a test of such a loop asserts.
func RetrySchedule(lo, hi, d time.Duration) int {
	tries, at, wait := 1, time.Duration(0), time.Duration(0)
	for {
		wait = min(max(2*wait, lo), max(hi, lo))
		at += wait / 2
		if at > d || wait <= 0 {
			return tries
		}
		tries++
	}
}
