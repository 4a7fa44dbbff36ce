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
