package agent

import (
	"cmp"
	"context"
	"fmt"
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
// devhook.ChangeHealth (changed: Agent.publishHealth), not once per
// delivery; an episode that starts within quietAfter of the end of the
// last one is not logged, so that a disk at the edge does not fill the
// terminal.
type health struct {
	now     func() time.Time
	logf    func(format string, args ...any)
	changed func()

	failing atomic.Bool  // read on every record: the only cost when all is well
	held    atomic.Int64 // queued deliveries waiting for a write

	mu    sync.Mutex
	err   string
	since time.Time
	quiet bool      // this episode is not logged
	ended time.Time // when the last episode ended

	out lineQueue // the lines, in the order of the changes they say
}

// quietAfter: see health.
const quietAfter = 10 * time.Second

// failed notes that a write failed.
func (h *health) failed(err error) {
	h.mu.Lock()
	first := !h.failing.Load()
	if first {
		h.since = h.now()
		h.failing.Store(true)
		h.quiet = !h.ended.IsZero() && h.since.Sub(h.ended) < quietAfter
	}
	h.err = err.Error()
	if first && !h.quiet {
		h.out.add(fmt.Sprintf("recording failed: %v; live deliveries are answered 503 and not forwarded, queued ones are held and retried until recording works again", err))
	}
	h.mu.Unlock()
	if first {
		h.changed()
	}
	h.out.write(h.logf)
}

// ok notes that a write succeeded.
func (h *health) ok() {
	if !h.failing.Load() || h.held.Load() > 0 {
		return
	}
	h.mu.Lock()
	if !h.failing.Load() {
		h.mu.Unlock()
		return
	}
	h.failing.Store(false)
	h.err = ""
	h.ended = h.now()
	if !h.quiet {
		h.out.add("recording works again after " + FormatDuration(h.ended.Sub(h.since)))
	}
	h.mu.Unlock()
	h.out.write(h.logf)
	h.changed()
}

// state returns whether recording works and how many deliveries are held
// (Agent.Health adds the owed ones).
func (h *health) state() devhook.Health {
	s := devhook.Health{Held: int(h.held.Load())}
	h.mu.Lock()
	if h.failing.Load() {
		s.StorageError, s.Since = h.err, h.since.UTC()
	}
	h.mu.Unlock()
	return s
}

// unrecordedEvery is how often attempts that keep going unrecorded are
// said again, with their count.
const unrecordedEvery = 10 * time.Minute

// unrecordedLog says the attempts the receiver got but the store did not
// take (forward.go: attemptNotRecorded), without a line per delivery: on
// a full disk under load that would fill the terminal. The first is said
// in full when it starts; the next ones are counted, and said with their
// count at most every unrecordedEvery while it lasts; when an attempt is
// recorded again, a line says so, with how many were not since the last
// line. The same as natsrelay.ConnLog does for the relay's NATS errors.
type unrecordedLog struct {
	now   func() time.Time
	logf  func(format string, args ...any)
	every time.Duration // 0: unrecordedEvery

	failing atomic.Bool // read after every attempt recorded: the only cost when all is well

	mu     sync.Mutex
	since  time.Time // the first attempt not recorded
	said   time.Time // the last line
	n      int       // not recorded since since
	unsaid int       // of them, since the last line
	err    string    // the last one's error

	out lineQueue // the lines, in the order of the changes they say
}

// failed notes an attempt not recorded because of err; full is its line
// in full, said when it is the first.
func (l *unrecordedLog) failed(err error, full func() string) {
	now := l.now()
	l.mu.Lock()
	l.err = err.Error()
	if !l.failing.Load() {
		l.failing.Store(true)
		l.since, l.said, l.n, l.unsaid = now, now, 1, 0
		l.out.add(full() + " (said once: the next attempts not recorded are counted until one is recorded again)")
		l.mu.Unlock()
		l.out.write(l.logf)
		return
	}
	l.n++
	l.unsaid++
	every := cmp.Or(l.every, unrecordedEvery)
	if now.Sub(l.said) < every {
		l.mu.Unlock()
		return
	}
	l.out.add(fmt.Sprintf("still not recording attempts: %d more the receivers got but devhook could not record, %d in %s (last: %s); said again every %s while it lasts",
		l.unsaid, l.n, FormatDuration(now.Sub(l.since)), l.err, FormatDuration(every)))
	l.said, l.unsaid = now, 0
	l.mu.Unlock()
	l.out.write(l.logf)
}

// recorded notes an attempt recorded, which ends a failure under way.
func (l *unrecordedLog) recorded() {
	if !l.failing.Load() {
		return
	}
	now := l.now()
	l.mu.Lock()
	if !l.failing.Load() {
		l.mu.Unlock()
		return
	}
	l.failing.Store(false)
	l.out.add(fmt.Sprintf("attempts are recorded again: %d the receivers got in %s were not recorded (%d since the last line)", l.n, FormatDuration(now.Sub(l.since)), l.unsaid))
	l.mu.Unlock()
	l.out.write(l.logf)
}

// maxUnwritten bounds the lines a lineQueue holds while its writer is
// slow; the lines between the first ones and the newest are counted, and
// their count said.
const maxUnwritten = 100

// lineQueue writes log lines in the order they were added, without a lock
// held while a line is written. A change is said by adding its line under
// the lock that orders the changes (so the lines are in their order),
// then, once that lock is released, calling write: it writes every line
// added, unless another goroutine is writing them already, which then
// writes those added meanwhile too before it returns. So only the
// goroutine writing waits for a slow writer (a terminal that is not read,
// a full pipe), as it would for its own line; every other one adds its
// line and goes on. Writing under the lock instead would stop every
// delivery that notes a change behind that writer.
type lineQueue struct {
	mu      sync.Mutex
	lines   []string
	dropped int  // lines not kept: maxUnwritten were waiting
	writing bool // a goroutine is in write's loop
}

// add queues line, after the lines added before it. With maxUnwritten
// waiting, line takes the last one's place, which is counted: the newest
// line says the state things are in now, and is never the one lost.
func (q *lineQueue) add(line string) {
	q.mu.Lock()
	if len(q.lines) < maxUnwritten {
		q.lines = append(q.lines, line)
	} else {
		q.lines[len(q.lines)-1] = line
		q.dropped++
	}
	q.mu.Unlock()
}

// write writes the lines queued with logf, in order, unless a goroutine is
// writing them already. No lock is held while logf runs.
func (q *lineQueue) write(logf func(format string, args ...any)) {
	q.mu.Lock()
	if q.writing {
		q.mu.Unlock()
		return
	}
	q.writing = true
	for len(q.lines) > 0 || q.dropped > 0 {
		lines, dropped := q.lines, q.dropped
		q.lines, q.dropped = nil, 0
		q.mu.Unlock()
		for i, line := range lines {
			if dropped > 0 && i == len(lines)-1 { // the newest, after those it replaced
				logf("%d more lines about recording were not written: the log's output was too slow to take them", dropped)
			}
			logf("%s", line)
		}
		q.mu.Lock()
	}
	q.writing = false
	q.mu.Unlock()
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

// waitWritable returns true once store can take a write, false if ctx
// ends first, with how long it waited (0 when it could at once). Until then the agent does not connect: a delivery it takes
// it must record before it answers or acknowledges, so it takes none, and
// the relay keeps the channel's deliveries queued (a sender gets 202). The
// store is checked again after minBackoff, then twice as long each time,
// up to maxSpacePoll; the history stays readable meanwhile. Each change is
// a log line and a devhook.ChangeHealth.
func (h *health) waitWritable(ctx context.Context, store any, minBackoff time.Duration) (time.Duration, bool) {
	wc, ok := store.(writeChecker)
	if !ok {
		return 0, true
	}
	err := wc.CheckWrite()
	if err == nil {
		return 0, true
	}
	start := h.now()
	h.mu.Lock()
	first := !h.failing.Load()
	if first {
		h.since = h.now()
		h.failing.Store(true)
		h.quiet = false
	}
	h.err = err.Error()
	h.out.add(fmt.Sprintf("cannot record deliveries: %v; taking none until there is room again: not connected to the relay, which keeps this channel's deliveries queued meanwhile; recorded deliveries stay readable", err))
	h.mu.Unlock()
	if first {
		h.changed()
	}
	h.out.write(h.logf)
	wait := minBackoff
	for {
		select {
		case <-ctx.Done():
			return h.now().Sub(start), false
		case <-time.After(wait):
		}
		if wc.CheckWrite() == nil {
			h.ok()
			return h.now().Sub(start), true
		}
		wait = min(2*wait, maxSpacePoll)
	}
}
