package main

import (
	"io"
	"sync"
)

// lineWriter lets many goroutines write whole lines to w with as few
// write(2)s as the load allows. A Write that finds another one in
// progress appends its bytes to a buffer and returns; the goroutine
// writing takes the buffer in its next write(2), and returns only when
// nothing is left. An idle lineWriter writes at once: nothing waits for a
// timer, so a line shows as soon as it would without it. Under load,
// listen prints one line per delivery; writing them one by one cost the
// agent a system call per delivery and the reader a wake-up per line.
type lineWriter struct {
	w io.Writer

	mu      sync.Mutex
	buf     []byte // bytes waiting for the goroutine writing
	spare   []byte
	writing bool
	err     error // of the last write(2); reported to the next Write
}

func newLineWriter(w io.Writer) *lineWriter { return &lineWriter{w: w} }

// Write writes p, or hands it to the Write in progress. p is copied.
func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf = append(l.buf, p...)
	if l.writing {
		err := l.err
		l.mu.Unlock()
		return len(p), err
	}
	l.writing = true
	var err error
	for len(l.buf) > 0 {
		out := l.buf
		l.buf = l.spare[:0]
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
	l.mu.Unlock()
	return len(p), err
}
