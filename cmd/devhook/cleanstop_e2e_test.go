package main

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/storage"
)

// A long-running command whose standard output is closed (`devhook listen
// | head -1` once head exits) stops as on Ctrl-C rather than die of the
// SIGPIPE of its next write: listen.json removed, the journal applied to
// the store and removed, exit status 141 (a shell's for SIGPIPE) and the
// reason on standard error.
func TestListen_ClosedOutputStopsCleanly(t *testing.T) {
	bin := devhookBinary(t)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer recv.Close()
	for _, mode := range []string{"human", "json"} {
		t.Run(mode, func(t *testing.T) {
			data := t.TempDir()
			args := []string{"listen", "--forward", recv.URL, "--data", data, "--inspect", "off", "--relay-addr", "127.0.0.1:0"}
			if mode == "json" {
				args = append(args, "--json")
			}
			stdout, lines, stderr, exited := startPiped(t, bin, args...)
			var pub string
			waitUntil(t, "listen.json", func() bool {
				l, err := running.Read(data)
				pub = l.PublicURL
				return err == nil
			})
			if code, _, _ := post(t, pub+"/one", []byte(`{}`)); code != http.StatusOK {
				t.Fatalf("the first delivery: %d", code)
			}
			waitLine(t, lines, "/one", stderr) // everything before it is out
			stdout.Close()                     // the reader goes, as head does
			code := exitStatusOf(t, exited, stderr)
			if code != 141 {
				t.Errorf("exit status %d, want 141; stderr:\n%s", code, stderr.String())
			}
			if want := "devhook: stopped: standard output closed (broken pipe)\n"; !strings.HasSuffix(stderr.String(), want) {
				t.Errorf("standard error does not end with %q:\n%s", want, stderr.String())
			}
			if _, err := os.Stat(running.Path(data)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("listen.json left behind (%v)", err)
			}
			if j, _ := filepath.Glob(filepath.Join(data, "deliveries.db.journal*")); len(j) != 0 {
				t.Errorf("journal files left behind, not applied by a clean close: %v", j)
			}
			db, err := storage.Open(filepath.Join(data, "deliveries.db"), storage.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if n, err := db.Count(); err != nil || n != 1 {
				t.Errorf("%d deliveries recorded (%v), want 1", n, err)
			}
		})
	}
}

// A closed output stops listen as soon as its reader goes, not at its next
// line: `u=$(devhook listen --json | head -1)` returns once head has the
// ready line, where the shell waited for a delivery to come.
func TestListen_ClosedOutputStopsWithoutANextLine(t *testing.T) {
	bin := devhookBinary(t)
	for _, mode := range []string{"human", "json"} {
		t.Run(mode, func(t *testing.T) {
			data := t.TempDir()
			args := []string{"listen", "--forward", "127.0.0.1:9", "--data", data, "--inspect", "off", "--relay-addr", "127.0.0.1:0"}
			first := "recording"
			if mode == "json" {
				args, first = append(args, "--json"), `"event":"ready"`
			}
			stdout, lines, stderr, exited := startPiped(t, bin, args...)
			waitLine(t, lines, first, stderr)
			stdout.Close() // head -1 exits; nothing more is sent
			if code := exitStatusOf(t, exited, stderr); code != 141 {
				t.Errorf("exit status %d, want 141; stderr:\n%s", code, stderr.String())
			}
			if want := "devhook: stopped: standard output closed (broken pipe)\n"; !strings.HasSuffix(stderr.String(), want) {
				t.Errorf("standard error does not end with %q:\n%s", want, stderr.String())
			}
			if _, err := os.Stat(running.Path(data)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("listen.json left behind (%v)", err)
			}
		})
	}
}

// A closed terminal (SIGHUP) stops the long-running commands as Ctrl-C
// does, where it killed them: listen removes listen.json and applies its
// journal, emulate removes the temporary directories of its CA and
// packages, each exits 129 (a shell's status for SIGHUP).
func TestServers_HangUpStopsThemCleanly(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer recv.Close()
	t.Run("listen", func(t *testing.T) {
		data := t.TempDir()
		posted := false
		delivered := func(out string) bool {
			if !posted { // once connected: listen.json is written then
				l, err := running.Read(data)
				if err != nil {
					return false
				}
				post(t, l.PublicURL+"/hook", []byte(`{}`))
				posted = true
			}
			return strings.Contains(out, `"event":"delivery"`)
		}
		p := runAndSignal(t, []string{"HOME=" + t.TempDir()}, delivered, syscall.SIGHUP,
			"listen", "--json", "--forward", recv.URL, "--data", data, "--inspect", "off", "--relay-addr", "127.0.0.1:0")
		if p.code != 129 {
			t.Errorf("exit status %d, want 129\n%s\n%s", p.code, p.stdout, p.stderr)
		}
		if _, err := os.Stat(running.Path(data)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("listen.json left behind (%v)", err)
		}
		if j, _ := filepath.Glob(filepath.Join(data, "deliveries.db.journal*")); len(j) != 0 {
			t.Errorf("journal files left behind, not applied by a clean close: %v", j)
		}
	})
	t.Run("emulate", func(t *testing.T) {
		tmp := t.TempDir()
		p := runAndSignal(t, []string{"HOME=" + t.TempDir(), "TMPDIR=" + tmp}, says("service emulator on"), syscall.SIGHUP,
			"emulate", "--addr", "127.0.0.1:0", "--tls")
		if p.code != 129 {
			t.Errorf("exit status %d, want 129\n%s\n%s", p.code, p.stdout, p.stderr)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("temporary directories left behind: %v", left)
		}
	})
	for _, c := range []struct {
		ready string
		args  []string
	}{
		{"devhook relay on", []string{"relay", "serve", "--addr", "127.0.0.1:0", "--data", t.TempDir()}},
		{"reference receiver on", []string{"receive", "--addr", "127.0.0.1:0", "--secret", "s"}},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			p := runAndSignal(t, []string{"HOME=" + t.TempDir()}, says(c.ready), syscall.SIGHUP, c.args...)
			if p.code != 129 {
				t.Errorf("exit status %d, want 129\n%s\n%s", p.code, p.stdout, p.stderr)
			}
		})
	}
}

// Started with SIGHUP ignored (nohup), devhook leaves it ignored: catching
// it would undo nohup. The SIGHUP is not the first stop, so the SIGTERM
// after it is not the second, which quits at once and says so.
func TestServers_NohupIsKept(t *testing.T) {
	bin := devhookBinary(t)
	cmd := exec.Command("/bin/sh", "-c", `trap "" HUP; exec "$0" "$@"`, bin, "receive", "--addr", "127.0.0.1:0", "--secret", "s")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	exited := startWaited(t, cmd)
	waitUntil(t, "the receiver's start", func() bool { return strings.Contains(stdout.String()+stderr.String(), "reference receiver on") })
	_, addr, _ := strings.Cut(stdout.String(), "reference receiver on ")
	addr, _, _ = strings.Cut(addr, "\n")
	cmd.Process.Signal(syscall.SIGHUP)
	// Still serving after it: a SIGHUP caught would have stopped the
	// server by the time an answer comes back (the signal is handled
	// while the request travels).
	if res, err := (&http.Client{Timeout: 60 * time.Second}).Get(addr + "/healthz"); err != nil {
		t.Errorf("the receiver does not answer after SIGHUP: %v", err)
	} else {
		res.Body.Close()
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := exitStatusOf(t, exited, &stderr); code != 143 || strings.Contains(stderr.String(), "quitting now") {
		t.Errorf("exit status %d, want 143 of a first signal; stderr:\n%s", code, stderr.String())
	}
}

// A server whose standard output or error is a pipe nobody reads from
// the start stops at its first write there, with SIGPIPE's status, and
// says why on the other one; it died of the SIGPIPE before.
func TestReceive_ClosedOutputStopsIt(t *testing.T) {
	bin := devhookBinary(t)
	for _, closed := range []string{"standard output", "standard error"} {
		t.Run(closed, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			r.Close() // nobody reads
			defer w.Close()
			// No --secret: receive warns on standard error as it starts.
			cmd := exec.Command(bin, "receive", "--addr", "127.0.0.1:0")
			cmd.Env = append(os.Environ(), "DEVHOOK_SECRET=")
			var other syncBuffer
			cmd.Stdout, cmd.Stderr = w, &other
			if closed == "standard error" {
				cmd.Stdout, cmd.Stderr = &other, w
			}
			code := exitStatusOf(t, startWaited(t, cmd), &other)
			if code != 141 {
				t.Errorf("exit status %d, want 141; the other output:\n%s", code, other.String())
			}
			if want := "devhook: stopped: " + closed + " closed (broken pipe)\n"; closed == "standard output" && !strings.HasSuffix(other.String(), want) {
				t.Errorf("standard error does not end with %q:\n%s", want, other.String())
			}
		})
	}
}

// startPiped starts devhook with args, its HOME a directory of the test,
// its standard output a pipe whose lines come on lines (closed at its
// end) and its standard error in stderr; exited says how it ended.
func startPiped(t *testing.T, bin string, args ...string) (stdout io.ReadCloser, lines <-chan string, stderr *syncBuffer, exited <-chan error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &syncBuffer{}
	cmd.Stderr = stderr
	exited = startWaited(t, cmd)
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return stdout, ch, stderr, exited
}

// startWaited starts cmd; its exit status comes on the channel. The
// process is killed at the end of the test if it still runs.
func startWaited(t *testing.T, cmd *exec.Cmd) <-chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() { exited <- cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	})
	return exited
}

// exitStatusOf waits up to 60 s for the process to end, and returns its exit
// status (-1 when a signal ended it).
func exitStatusOf(t *testing.T, exited <-chan error, stderr *syncBuffer) int {
	t.Helper()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatalf("devhook did not stop within 60 s; stderr:\n%s", stderr.String())
	}
	return 0
}

// waitLine waits up to 60 s for a line that holds s.
func waitLine(t *testing.T, lines <-chan string, s string, stderr *syncBuffer) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the output ended before a line with %q; stderr:\n%s", s, stderr.String())
			}
			if strings.Contains(l, s) {
				return
			}
		case <-deadline:
			t.Fatalf("no line with %q within 60 s; stderr:\n%s", s, stderr.String())
		}
	}
}
