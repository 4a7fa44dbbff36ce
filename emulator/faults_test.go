package emulator_test

import (
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// logLines collects what the emulator logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
	added chan struct{}
}

func newLogLines() *logLines { return &logLines{added: make(chan struct{}, 1)} }

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
}

// matching returns the lines that contain s.
func (l *logLines) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// TestRunSurvivesAFullDisk: with the data directory's disk really full,
// the write that moves a run on fails; the run's schedule tries again
// with a growing wait, logs the failure once, and once there is room
// again the run goes on by itself and the count is logged.
func TestRunSurvivesAFullDisk(t *testing.T) {
	data := tmpfs(t, 16<<20)
	logs := newLogLines()
	cfg := testConfig()
	cfg.DataDir = data
	cfg.MaxInputBytes = 4 << 20
	cfg.Logf = logs.logf
	v := newEnv(t, cfg)
	v.newApp("app")
	// The disk is filled first, then given back room for the run's
	// start and not for its move: its record is large (2 MiB of input,
	// a start writes 2.1 MB), and moving it on needs as much again, which
	// bbolt has no free pages for. Filling it after the start would race
	// with the run's schedule (its move is due 20 ms after the start).
	filler := filepath.Join(data, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	var filled int64
	for {
		n, err := f.Write(buf)
		filled += int64(n)
		if err != nil {
			break // full
		}
	}
	if err := f.Truncate(filled - 3<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := v.startRun("app", "latest", map[string]any{"input": strings.Repeat("x", 2<<20)})
	// The queued run's move to running is due after QueueTime (20 ms):
	// it fails.
	eventually(t, func() bool { return len(logs.matching("failed")) > 0 }, "a failed write to be logged")
	first := time.Now()
	// Watch it try for a second, then give it room.
	<-time.After(time.Second)
	elapsed := time.Since(first)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The next try may be up to the emulator's longest wait (30 s) away,
	// if the machine was so busy that the backoff grew that far while the
	// disk was full.
	eventuallyWithin(t, 60*time.Second, func() bool { return v.metadata("app", r.ID).Metadata.StatusV2 == "succeeded" },
		"run %s to go on once there is room", r.ID)

	failed := logs.matching("failed")
	again := logs.matching("works again after")
	if len(failed) != 1 || len(again) != 1 {
		t.Fatalf("logged %q and %q: want the failure once and the recovery once", failed, again)
	}
	m := regexp.MustCompile(`after (\d+) failures`).FindStringSubmatch(again[0])
	n, _ := strconv.Atoi(m[1])
	// The waits start at 100 ms (80 ms with jitter) and double: within
	// the time the disk was full, at most this many tries fit, and one
	// more that was waiting when room came.
	most := 2 + int(math.Log2(float64(elapsed)/float64(80*time.Millisecond)))
	if n < 1 || n > most {
		t.Errorf("%d failed tries in %s with the disk full, want 1 to %d", n, elapsed.Round(time.Millisecond), most)
	}
}

// TestDeliveryGivenUpLoggedOnce: a delivery whose every attempt fails is
// logged once, with the count, not once an attempt.
func TestDeliveryGivenUpLoggedOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/"
	ln.Close() // nothing listens: every attempt is refused
	logs := newLogLines()
	cfg := testConfig()
	cfg.Logf = logs.logf
	v := newEnv(t, cfg)
	v.createWebhook("hook", closed)
	v.do("POST", "/v1/events/trigger", map[string]string{"event_type": "run.status"}, 202, nil)
	v.waitConversations("hook", 3) // the first attempt and the two retries of testConfig
	eventually(t, func() bool { return len(logs.matching("hook")) > 0 }, "the delivery given up to be logged")
	lines := logs.matching("hook")
	if len(lines) != 1 || !strings.Contains(lines[0], "all 3 attempts") || !strings.Contains(lines[0], "connection refused") {
		t.Errorf("logged %q, want one line with the count and the last error", lines)
	}
}
