package scripts

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stressRun is scripts/stress started with args from the repository's
// root, its output collected.
type stressRun struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startStress(t *testing.T, env []string, args ...string) *stressRun {
	t.Helper()
	if testing.Short() {
		t.Skip("runs go test under scripts/stress: not with -short")
	}
	r := &stressRun{cmd: exec.Command("./stress", args...), out: &lockedBuffer{}, done: make(chan struct{})}
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait waits for the script's end, bounded by what compiling and running
// the fixtures under load takes, and returns its exit status.
func (r *stressRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("scripts/stress did not end within 5 minutes:\n%s", r.out)
	}
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return ee.ExitCode()
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return 0
}

// busyPIDs are the busy loops' pids the script printed.
func (r *stressRun) busyPIDs(t *testing.T) []int {
	t.Helper()
	m := regexp.MustCompile(`busy loops \(pids ([0-9 ]+)\)`).FindStringSubmatch(r.out.String())
	if m == nil {
		t.Fatalf("scripts/stress printed no busy loops' pids:\n%s", r.out)
	}
	var pids []int
	for _, f := range strings.Fields(m[1]) {
		pid, _ := strconv.Atoi(f)
		pids = append(pids, pid)
	}
	return pids
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// scripts/stress runs each package beside busy loops, exits 1 when one
// fails, names the package and its failed test, and stops its loops.
func TestStress_NamesTheFailuresAndStopsItsLoops(t *testing.T) {
	r := startStress(t, nil, "-busy", "2", "./scripts/testdata/stress/passes", "./scripts/testdata/stress/fails")
	if code := r.wait(t); code != 1 {
		t.Fatalf("exit status %d, want 1:\n%s", code, r.out)
	}
	out := r.out.String()
	for _, want := range []string{
		"ok    ./scripts/testdata/stress/passes",
		"FAIL  ./scripts/testdata/stress/fails",
		"failing on purpose",
		"scripts/stress: FAIL ./scripts/testdata/stress/fails: TestFailsOnPurpose",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scripts/stress does not say %q:\n%s", want, out)
		}
	}
	pids := r.busyPIDs(t)
	if len(pids) != 2 {
		t.Errorf("busy loops %v, want 2", pids)
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("busy loop %d still runs after scripts/stress ended", pid)
		}
	}

	ok := startStress(t, nil, "-busy", "1", "-count", "2", "./scripts/testdata/stress/passes")
	if code := ok.wait(t); code != 0 || !strings.Contains(ok.out.String(), "every package passed") || !strings.Contains(ok.out.String(), "-count 2") {
		t.Errorf("scripts/stress of a passing package: exit %d\n%s", code, ok.out)
	}
}

// Stopped by SIGTERM while a test runs, scripts/stress stops that test
// (the test binary too, not only go test) and its busy loops, and exits
// 143.
func TestStress_StopsEverythingWhenTerminated(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "test.pid")
	r := startStress(t, []string{"STRESS_FIXTURE_PIDFILE=" + pidFile}, "-busy", "2", "./scripts/testdata/stress/blocks")
	var testPID int
	deadline := time.Now().Add(5 * time.Minute)
	for testPID == 0 {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
			testPID, _ = strconv.Atoi(string(b))
			break
		}
		select {
		case <-r.done:
			t.Fatalf("scripts/stress ended before the test ran:\n%s", r.out)
		case <-time.After(20 * time.Millisecond): // polling for the test's start
		}
		if time.Now().After(deadline) {
			t.Fatalf("the blocking test did not start within 5 minutes:\n%s", r.out)
		}
	}
	pids := r.busyPIDs(t)
	r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(t); code != 143 {
		t.Errorf("exit status %d, want 143:\n%s", code, r.out)
	}
	for _, pid := range append(pids, testPID) {
		for end := time.Now().Add(30 * time.Second); !gone(pid) && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond) // polling for a process's end
		}
		if !gone(pid) {
			t.Errorf("process %d (busy loop or test binary) still runs after scripts/stress was terminated", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
