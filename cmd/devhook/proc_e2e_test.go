package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// End-to-end tests run the real devhook binary, built once per test process
// by devhookBinary, as separate processes they can kill.

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binOut  []byte
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// devhookBinary builds cmd/devhook once and returns the binary's path. It
// skips in -short mode: the tests that need it are end-to-end.
func devhookBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: builds and runs devhook")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "devhook-e2e-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "devhook")
		binOut, binErr = exec.Command("go", "build", "-o", binPath, "github.com/devhook/devhook/cmd/devhook").CombinedOutput()
	})
	if binErr != nil {
		t.Fatalf("building devhook: %v\n%s", binErr, binOut)
	}
	return binPath
}

// proc is a devhook process started by startProc. Its stdout lines are
// collected (parsed when they are JSON); stderr is kept.
type proc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited and its output is read
	err    error         // Wait's error, after done
}

// syncBuffer is a bytes.Buffer safe for a writer and readers at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProc runs the devhook binary with args. The process is killed at the
// end of the test if it is still running.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCmd(t, devhookBinary(t), args...)
}

// startCmd runs any command, such as devhook under unshare, as a proc.
func startCmd(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), lines: make(chan string, 4096),
		stderr: &syncBuffer{}, done: make(chan struct{})}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.err = p.cmd.Wait()
		close(p.lines)
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to timeout for the process to end; then
// it kills it and fails the test.
func (p *proc) stop(t *testing.T, timeout time.Duration) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		t.Fatalf("devhook did not stop within %s of SIGTERM; stderr: %s", timeout, p.stderr)
	}
}

// nextJSON returns the next stdout line that is a JSON object with
// "event": event, waiting up to 20 s.
func (p *proc) nextJSON(t *testing.T, event string) map[string]any {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("devhook ended before a %q line; stderr: %s", event, p.stderr)
			}
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["event"] == event {
				return m
			}
		case <-timeout:
			t.Fatalf("no %q line from devhook within 20s; stderr: %s", event, p.stderr)
		}
	}
}

// waitUntil polls cond for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling processes, not synchronising
	}
}

// bodies is a receiver that counts the bodies it got.
type bodies struct {
	mu   sync.Mutex
	seen map[string]int
}

func (b *bodies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	if b.seen == nil {
		b.seen = map[string]int{}
	}
	b.seen[string(body)]++
	b.mu.Unlock()
	w.Write([]byte("ok"))
}

func (b *bodies) count(body string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[body]
}

func (b *bodies) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.seen {
		n += c
	}
	return n
}
