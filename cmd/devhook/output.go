package main

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// lineWriter lets many goroutines write whole lines to w with as few
// write(2)s as the load allows. A Write that finds another one in
// progress appends its bytes to a buffer and returns; the goroutine
// writing takes the buffer in its next write(2), and returns only when
// nothing is left. A Write within gap of the last write(2) waits, with
// the lines after it, for a timer at gap after that write(2): under load,
// listen makes at most one write(2) per gap instead of one per delivery
// (a system call for the agent, a wake-up for the reader). A Write after
// a quiet gap goes out at once, so a line shows as soon as it would
// without any of this, or at most gap later. Close writes what waits.
type lineWriter struct {
	w   io.Writer
	gap time.Duration

	mu      sync.Mutex
	buf     []byte // bytes waiting for the goroutine writing, or the timer
	spare   []byte
	writing bool
	idle    *sync.Cond // on mu: broadcast when writing ends
	last    time.Time  // when the last write(2) started
	timer   *time.Timer
	armed   bool // the timer will write buf
	closed  bool
	err     error // of the last write(2); reported to the next Write
}

// lineGap is listen's gap between two writes of its output.
const lineGap = 2 * time.Millisecond

func newLineWriter(w io.Writer, gap time.Duration) *lineWriter {
	l := &lineWriter{w: w, gap: gap}
	l.idle = sync.NewCond(&l.mu)
	return l
}

// Write writes p, or hands it to the Write in progress or the timer. p is
// copied.
func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if l.writing || l.armed {
		return len(p), l.err
	}
	if wait := l.gap - time.Since(l.last); wait > 0 && !l.closed {
		l.armed = true
		if l.timer == nil {
			l.timer = time.AfterFunc(wait, l.fire)
		} else {
			l.timer.Reset(wait)
		}
		return len(p), l.err
	}
	return len(p), l.drain()
}

// fire is the timer's: it writes what waited for it.
func (l *lineWriter) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.armed {
		return // Close wrote it
	}
	l.armed = false
	if !l.writing {
		l.drain()
	}
}

// drain writes buf until it is empty; l.mu is held, and released around
// each write(2).
func (l *lineWriter) drain() error {
	l.writing = true
	var err error
	for len(l.buf) > 0 {
		out := l.buf
		l.buf = l.spare[:0]
		l.last = time.Now()
		l.mu.Unlock()
		_, err = l.w.Write(out)
		l.mu.Lock()
		l.err = err
		if cap(out) <= 64<<10 {
			l.spare = out
		} else {
			l.spare = nil // a burst's buffer is not kept
		}
	}
	l.writing = false
	l.idle.Broadcast()
	return err
}

// Close writes what waits, after a write(2) in progress, and makes every
// later Write go out at once.
func (l *lineWriter) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.armed {
		l.armed = false
		l.timer.Stop()
	}
	for l.writing {
		l.idle.Wait()
	}
	if len(l.buf) > 0 {
		return l.drain()
	}
	return l.err
}

// printJSON writes v as indented JSON, the --json output of the commands
// that print one document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
