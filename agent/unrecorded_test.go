package agent

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The attempts not recorded are said once when it starts, counted, said
// again with their count at most every unrecordedEvery, and once when an
// attempt is recorded again; a recorded attempt while all is well says
// nothing. The clock is the test's.
func TestUnrecordedLog_SaidOnceCountedAndEnded(t *testing.T) {
	var (
		mu    sync.Mutex
		lines []string
	)
	now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	l := unrecordedLog{
		now: func() time.Time { return now },
		logf: func(format string, args ...any) {
			mu.Lock()
			lines = append(lines, fmt.Sprintf(format, args...))
			mu.Unlock()
		},
	}
	took := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := lines
		lines = nil
		return out
	}
	errDisk := errors.New("write journal: no space left on device")
	fail := func(n int) {
		for i := range n {
			l.failed(errDisk, func() string { return fmt.Sprintf("delivery %d: not recorded", i) })
			now = now.Add(time.Second)
		}
	}

	l.recorded()
	fail(100) // 100 s
	if got := took(); len(got) != 1 || !strings.HasPrefix(got[0], "delivery 0: not recorded (said once") {
		t.Fatalf("100 attempts not recorded said %q, want the first one's line alone", got)
	}
	now = now.Add(unrecordedEvery - 100*time.Second)
	fail(1) // the 101st, unrecordedEvery after the first line
	got := took()
	if len(got) != 1 || !strings.HasPrefix(got[0], "still not recording attempts: 100 more the receivers got but devhook could not record, 101 in 10m (last: write journal: no space left on device)") {
		t.Fatalf("after %s: %q, want one line with the count", unrecordedEvery, got)
	}
	fail(3)
	if got := took(); len(got) != 0 {
		t.Fatalf("right after the count was said: %q, want nothing", got)
	}
	l.recorded()
	got = took()
	if len(got) != 1 || !strings.HasPrefix(got[0], "attempts are recorded again: 104 the receivers got in 10m4s were not recorded (3 since the last line)") {
		t.Fatalf("recorded again: %q", got)
	}
	l.recorded()
	if got := took(); len(got) != 0 {
		t.Fatalf("a second attempt recorded said %q", got)
	}
	// A new failure is said in full again.
	fail(2)
	if got := took(); len(got) != 1 || !strings.HasPrefix(got[0], "delivery 0: not recorded") {
		t.Fatalf("a new failure said %q, want its first line", got)
	}
}

// heldWriter is a log whose first line is held: the writer stops (a
// terminal not read, a full pipe) once entered, until release is closed.
// A line is in lines once written.
type heldWriter struct {
	entered, release chan struct{}

	mu    sync.Mutex
	calls int
	lines []string
}

func newHeldWriter() *heldWriter {
	return &heldWriter{entered: make(chan struct{}), release: make(chan struct{})}
}

func (w *heldWriter) logf(format string, args ...any) {
	w.mu.Lock()
	w.calls++
	first := w.calls == 1
	w.mu.Unlock()
	if first {
		close(w.entered)
		<-w.release
	}
	w.mu.Lock()
	w.lines = append(w.lines, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

func (w *heldWriter) written() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

// heldWhile runs first, whose line the writer holds, in a goroutine; once
// the writer holds it, runs then, which must not wait for the writer;
// and lets the writer go. It returns the lines written.
func heldWhile(t *testing.T, w *heldWriter, first, then func()) []string {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		first()
	}()
	<-w.entered
	thenDone := make(chan struct{})
	go func() {
		defer close(thenDone)
		then()
	}()
	select {
	case <-thenDone:
	case <-time.After(30 * time.Second): // far beyond a call that does not wait
		close(w.release)
		t.Fatal("a change waited for the log's writer, held by another's line")
	}
	close(w.release)
	<-done
	return w.written()
}

// The lines come out in the order of the changes they say, though the
// first is being written (a slow writer) when the second change comes:
// before, "recorded again" could be written before the first "not
// recorded" line, each written after its lock was let go. The second
// change does not wait for the writer: its line is written after the
// first by the goroutine writing.
func TestUnrecordedLog_LinesInTheOrderOfTheChanges(t *testing.T) {
	w := newHeldWriter()
	l := unrecordedLog{now: time.Now, logf: w.logf}
	errDisk := errors.New("write journal: no space left on device")
	got := heldWhile(t, w,
		func() { l.failed(errDisk, func() string { return "delivery 1: not recorded" }) },
		l.recorded)
	if len(got) != 2 || !strings.HasPrefix(got[0], "delivery 1: not recorded") || !strings.HasPrefix(got[1], "attempts are recorded again: 1 ") {
		t.Fatalf("lines %q, want the attempt not recorded, then recorded again", got)
	}

	// While the writer is held, a disk at the edge flips many times: the
	// lines waiting are bounded, the rest counted and said.
	w = newHeldWriter()
	l = unrecordedLog{now: time.Now, logf: w.logf}
	got = heldWhile(t, w,
		func() { l.failed(errDisk, func() string { return "delivery 1: not recorded" }) },
		func() {
			for i := range 500 {
				l.recorded()
				l.failed(errDisk, func() string { return fmt.Sprintf("delivery %d: not recorded", i+2) })
			}
			l.recorded()
			l.failed(errDisk, func() string { return "delivery last: not recorded" })
		})
	// The last line is the state things ended in, though the lines
	// before it were too many: it replaced the last one kept (before, it
	// was the one lost).
	if len(got) != 1+maxUnwritten+1 || !strings.HasPrefix(got[1], "attempts are recorded again") || !strings.HasPrefix(got[2], "delivery 2: not recorded") ||
		got[len(got)-2] != fmt.Sprintf("%d more lines about recording were not written: the log's output was too slow to take them", 1002-maxUnwritten) ||
		!strings.HasPrefix(got[len(got)-1], "delivery last: not recorded") {
		t.Fatalf("%d lines, want the first, %d in order, the count of the rest and the last: %q", len(got), maxUnwritten-1, got)
	}
}

// The same for the store's health: "recording works again" comes after
// "recording failed", though the failure's line is being written when
// recording works again.
func TestHealth_LinesInTheOrderOfTheChanges(t *testing.T) {
	w := newHeldWriter()
	h := &health{now: time.Now, logf: w.logf, changed: func() {}}
	got := heldWhile(t, w,
		func() { h.failed(errors.New("write journal: no space left on device")) },
		h.ok)
	if len(got) != 2 || !strings.HasPrefix(got[0], "recording failed: write journal: no space left on device") || !strings.HasPrefix(got[1], "recording works again after ") {
		t.Fatalf("lines %q, want recording failed, then works again", got)
	}
}
