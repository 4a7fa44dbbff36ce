package main

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr syncBuffer
			cmd.Stderr = &stderr
			exited := startWaited(t, cmd)
			lines := make(chan string, 64)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			var pub string
			waitUntil(t, "listen.json", func() bool {
				l, err := running.Read(data)
				pub = l.PublicURL
				return err == nil
			})
			if code, _, _ := post(t, pub+"/one", []byte(`{}`)); code != http.StatusOK {
				t.Fatalf("the first delivery: %d", code)
			}
			waitLine(t, lines, "/one", &stderr) // everything before it is out
			stdout.Close()                      // the reader goes, as head does
			post(t, pub+"/two", []byte(`{}`))   // its line meets the closed pipe
			code := exitStatusOf(t, exited, &stderr)
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
			if n, err := db.Count(); err != nil || n != 2 {
				t.Errorf("%d deliveries recorded (%v), want 2", n, err)
			}
		})
	}
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
