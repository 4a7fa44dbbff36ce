package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A run of an instance with a pushed executable executes it on this
// machine (docs/INTERFACE.md, "Pushing an application"):
//
//   - in a fresh copy of the unpacked package (packages.go), removed after;
//   - python: python3 main.py; go: ./main; java: java -jar main.jar; each
//     run option as the arguments -name value, in the order of the names;
//   - the run's input as JSON on standard input (a text input as its text);
//     the package's hidden .<client>/python/deps directories on PYTHONPATH;
//   - standard output, JSON, becomes the run's output (compacted: its
//     size is output_size); more than
//     MaxOutputBytes of it kills the run, which fails saying so;
//   - standard error is the run's log (its last MaxLogBytes are kept);
//   - exit status 0 is succeeded; anything else failed, with the last
//     lines of standard error as the error (or the exit status when it
//     wrote none);
//   - past RunTimeout the run is killed and fails with error "timeout"; a
//     cancel kills it and it is canceled; Close kills it and the run stays
//     running, to execute again when an emulator with the same data
//     directory starts.
//
// The process gets a process group of its own, and its whole tree (on
// Linux, children that left the group too: proc_linux.go) is killed when
// the run ends in any of these ways, and when the executable exits (so
// that nothing it started outlives the run).

// Run outcomes' errors.
const (
	errTimeout       = "timeout"
	errorLines       = 10      // the last lines of standard error a failed run's error keeps
	errorBytes       = 4 << 10 // and at most this many bytes of them
	pipeDrainTimeout = 2 * time.Second
)

// outcome is how an execution ended.
type outcome struct {
	status string // succeeded or failed; "" when stopped by a cancel or Close
	output json.RawMessage
	errMsg string
	logs   string
}

// execute runs rn's executable and returns how it ended. It returns when
// the process has exited or been killed and its pipes are closed.
func (e *Emulator) execute(ctx context.Context, key string, rn *run, wake <-chan struct{}) outcome {
	fail := func(msg string) outcome { return outcome{status: statusFailed, errMsg: msg, logs: msg + "\n"} }
	dir, removeCopy, err := e.pkgs.workingCopy(rn.Binary.Digest, rn.ID)
	if err != nil {
		return fail(err.Error())
	}
	defer removeCopy()

	args := commandLine(rn.Binary.Type, e.cfg.Python, e.cfg.Java, dir, rn.Options)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = runEnv(dir)
	token, err := e.random("", 16)
	if err != nil {
		return fail(err.Error())
	}
	prepareCmd(cmd, token)
	if rn.Binary.Type == "go" {
		os.Chmod(filepath.Join(dir, "main"), 0o755)
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		return fail("starting the application: " + err.Error())
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return fail("starting the application: " + err.Error())
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return fail("starting the application: " + err.Error())
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	startErr := cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if startErr != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		hint := ""
		switch {
		case errors.Is(startErr, syscall.ENOEXEC) || errors.Is(startErr, exec.ErrNotFound) && rn.Binary.Type == "go":
			hint = fmt.Sprintf("; build main for this machine (GOOS=%s GOARCH=%s) and push again", runtime.GOOS, runtime.GOARCH)
		case errors.Is(startErr, exec.ErrNotFound):
			hint = "; install it, or point devhook emulate at it"
		}
		return fail(fmt.Sprintf("cannot start the %s application (%s): %v%s", rn.Binary.Type, strings.Join(args, " "), startErr, hint))
	}

	tree := startTree(cmd, token, e.cfg.Logf)
	defer tree.close()

	// GET …/logs reads it while the run executes, until finish (or
	// forgetLogs) keeps its text in the run.
	logs := &tailBuffer{max: int(e.cfg.MaxLogBytes)}
	e.mu.Lock()
	e.logs[key] = logs
	e.mu.Unlock()

	// The pipes' goroutines: this function waits for each of them.
	var pipes sync.WaitGroup
	overflow := make(chan struct{})
	var stdout bytes.Buffer
	pipes.Go(func() {
		defer inW.Close()
		inW.Write(stdinOf(rn))
	})
	pipes.Go(func() {
		_, err := io.Copy(&stdout, io.LimitReader(outR, e.cfg.MaxOutputBytes+1))
		if err == nil && int64(stdout.Len()) > e.cfg.MaxOutputBytes {
			close(overflow)
		}
	})
	pipes.Go(func() { io.Copy(logs, errR) })
	exited := make(chan error, 1)
	pipes.Go(func() { exited <- cmd.Wait() })

	timer := time.NewTimer(e.cfg.RunTimeout)
	defer timer.Stop()
	var waitErr error
	var res outcome
	stopped := false
	select {
	case waitErr = <-exited:
	case <-overflow:
		res = outcome{status: statusFailed, errMsg: fmt.Sprintf(
			"the application printed more than %d bytes on standard output, the most a run may print (devhook emulate --max-output); it was stopped", e.cfg.MaxOutputBytes)}
	case <-timer.C:
		res = outcome{status: statusFailed, errMsg: errTimeout}
	case <-wake:
		stopped = true
	case <-ctx.Done():
		stopped = true
	}
	// The whole tree dies: the executable, when it has not exited, and
	// whatever it started; then its pipes close.
	tree.kill()
	if res.status != "" || stopped {
		waitErr = <-exited
	}
	drained := make(chan struct{})
	go func() { pipes.Wait(); close(drained) }()
	grace := time.NewTimer(pipeDrainTimeout)
	select {
	case <-drained:
	case <-grace.C:
		// Something outside the group holds a pipe open: stop reading.
		outR.Close()
		errR.Close()
		inW.Close()
		<-drained
	}
	grace.Stop()
	outR.Close()
	errR.Close()

	res.logs = logs.String()
	if stopped {
		return res
	}
	if res.status == "" && int64(stdout.Len()) > e.cfg.MaxOutputBytes {
		// It printed too much and exited before the overflow was seen.
		res = outcome{status: statusFailed, errMsg: fmt.Sprintf(
			"the application printed more than %d bytes on standard output, the most a run may print (devhook emulate --max-output)", e.cfg.MaxOutputBytes),
			logs: res.logs}
	}
	if res.status != "" {
		res.logs += res.errMsg + "\n"
		return res
	}
	if waitErr != nil {
		msg := lastLines(logs.String(), errorLines, errorBytes)
		if msg == "" {
			msg = "the application " + exitText(waitErr)
		}
		return outcome{status: statusFailed, errMsg: msg, logs: res.logs}
	}
	out := bytes.TrimSpace(stdout.Bytes())
	if !json.Valid(out) {
		msg := "the application exited 0 but its standard output is not JSON"
		if len(out) == 0 {
			msg = "the application exited 0 but printed nothing on standard output; a run's output is the JSON it prints there"
		} else {
			msg += ": " + clip(string(out), 200)
		}
		return outcome{status: statusFailed, errMsg: msg, logs: res.logs + msg + "\n"}
	}
	var compact bytes.Buffer
	json.Compact(&compact, out) // valid, so it compacts
	return outcome{status: statusSucceeded, output: json.RawMessage(compact.Bytes()), logs: res.logs}
}

// forgetLogs drops the live log of the run at key.
func (e *Emulator) forgetLogs(key string) {
	e.mu.Lock()
	delete(e.logs, key)
	e.mu.Unlock()
}

// commandLine is the executable and its arguments for an application of
// type typ unpacked in dir.
func commandLine(typ, python, java, dir string, options map[string]string) []string {
	var args []string
	switch typ {
	case "python":
		args = []string{python, "main.py"}
	case "java":
		args = []string{java, "-jar", "main.jar"}
	default: // go
		args = []string{filepath.Join(dir, "main")}
	}
	names := make([]string, 0, len(options))
	for n := range options {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		args = append(args, "-"+n, options[n])
	}
	return args
}

// runEnv is the emulator's environment with the package's bundled python
// dependencies (.<client>/python/deps) first on PYTHONPATH.
func runEnv(dir string) []string {
	deps, _ := filepath.Glob(filepath.Join(dir, ".*", "python", "deps"))
	env := os.Environ()
	if len(deps) == 0 {
		return env
	}
	pp := strings.Join(deps, string(os.PathListSeparator))
	out := env[:0:0]
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok {
			if v != "" {
				pp += string(os.PathListSeparator) + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PYTHONPATH="+pp)
}

// stdinOf is the run's input as the application reads it: the JSON as
// sent, or an uploaded text input's text.
func stdinOf(rn *run) []byte {
	if rn.Text {
		var s string
		if json.Unmarshal(rn.Input, &s) == nil {
			return []byte(s)
		}
	}
	return rn.Input
}

func exitText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ee.Exited() {
			return fmt.Sprintf("exited with status %d and wrote nothing on standard error", ee.ExitCode())
		}
		return "was ended by a signal (" + ee.String() + ")"
	}
	return "failed: " + err.Error()
}

// lastLines is the last n non-empty lines of s, at most max bytes.
func lastLines(s string, n, max int) string {
	lines := strings.Split(strings.TrimRight(s, "\r\n\t "), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.TrimSpace(strings.Join(lines, "\n"))
	if len(out) > max {
		out = "…" + out[len(out)-max:]
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// tailBuffer keeps the last max bytes written to it, and says how many
// came before them. It is safe for one writer and many readers.
type tailBuffer struct {
	max     int
	mu      sync.Mutex
	buf     []byte
	dropped int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) > t.max {
		t.dropped += int64(len(p) - t.max)
		p = p[len(p)-t.max:]
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.dropped += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped > 0 {
		return fmt.Sprintf("[… %d earlier bytes of the log left out]\n", t.dropped) + string(t.buf)
	}
	return string(t.buf)
}
