package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/emulator"
)

// devhookRun is a devhook process started by startDevhook.
type devhookRun struct {
	stdout, stderr syncBuffer
	exited         chan struct{}
	err            error
}

// startDevhook starts the devhook binary with args, in this process's
// environment; it is killed at the end of the test if still running.
func startDevhook(t *testing.T, args ...string) *devhookRun {
	t.Helper()
	p := &devhookRun{exited: make(chan struct{})}
	cmd := exec.Command(devhookBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// until waits for cond of the process's standard output, bounded by what
// a loaded machine needs to start Python and devhook.
func (p *devhookRun) until(t *testing.T, what string, cond func(stdout string) bool) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for !cond(p.stdout.String()) {
		select {
		case <-p.exited:
			t.Fatalf("devhook ended (%v) before %s:\n%s\n%s", p.err, what, p.stdout.String(), p.stderr.String())
		case <-deadline:
			t.Fatalf("not %s within 3 minutes:\n%s\n%s", what, p.stdout.String(), p.stderr.String())
		case <-time.After(10 * time.Millisecond): // polling a process's output
		}
	}
}

// exit waits for the process to end and returns its exit status.
func (p *devhookRun) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(3 * time.Minute):
		t.Fatalf("devhook did not end within 3 minutes:\n%s\n%s", p.stdout.String(), p.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

// runs logs --follow prints a pushed application's standard error as it
// writes it, before the run ends, each line once, and ends with the run:
// exit 0 when it succeeded, 1 with its error when it failed. runs wait,
// through the binary, exits 0, 1 and 3 for a run that succeeded, failed
// and was canceled.
func TestRunsLogsFollow_LinesArriveBeforeTheRunEnds(t *testing.T) {
	c := pushGateApp(t)
	gate := filepath.Join(t.TempDir(), "gate")
	id := startGateRun(t, c, map[string]any{"lines": []string{"first line", "second line"}, "gate": gate, "after": []string{"third line"}})
	p := startDevhook(t, "runs", "logs", "app", devhook.ShortRunID(id), "--follow")
	p.until(t, "the first lines are out", func(out string) bool { return strings.Contains(out, "second line\n") })
	if r, err := c.RunMetadata(t.Context(), "app", id); err != nil || r.Status() != "running" {
		t.Fatalf("the run is %s (%v) when its first lines are out, want running", r.Status(), err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.exit(t); code != 0 || p.stdout.String() != "first line\nsecond line\nthird line\n" {
		t.Errorf("runs logs --follow: exit %d, printed %q\n%s", code, p.stdout.String(), p.stderr.String())
	}

	failed := startGateRun(t, c, map[string]any{"lines": []string{"step 1"}, "fail": "infeasible"})
	p = startDevhook(t, "runs", "logs", "app", failed, "-f")
	if code := p.exit(t); code != 1 || p.stdout.String() != "step 1\ninfeasible\n" ||
		!strings.Contains(p.stderr.String(), "devhook: run "+failed+" ended failed: step 1\ninfeasible") {
		t.Errorf("runs logs --follow of a run that fails: exit %d, printed %q\n%s", code, p.stdout.String(), p.stderr.String())
	}

	canceled := startGateRun(t, c, map[string]any{"gate": filepath.Join(t.TempDir(), "never")})
	if _, err := c.CancelRun(t.Context(), "app", canceled); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		id   string
		code int
	}{{id, 0}, {failed, 1}, {canceled, 3}} {
		p := startDevhook(t, "runs", "wait", "app", w.id[:8])
		if code := p.exit(t); code != w.code {
			t.Errorf("runs wait of a run that ended %d: exit %d\n%s\n%s", w.code, code, p.stdout.String(), p.stderr.String())
		}
	}
}

// runs wait and runs logs --follow stopped by SIGINT or SIGTERM exit 130
// or 143, say that the run goes on and how to take it up again, and leave
// the run as it was.
func TestRunsWaitAndFollow_Interrupted(t *testing.T) {
	em := startEmulator(t, emulator.Config{APIKeys: []string{"key"}, QueueTime: time.Hour, RunTime: time.Hour})
	em.api("POST", "/v1/applications", `{"id":"app-1","name":"App"}`)
	id := em.api("POST", "/v1/applications/app-1/runs?instance_id=latest", `{"input":{}}`)["id"].(string)
	env := []string{"SERVICE_PROFILE=", "HOME=" + t.TempDir(), "SERVICE_ENDPOINT=" + em.srv.URL, "SERVICE_API_KEY=key"}
	for _, c := range []struct {
		args  []string
		ready string
		says  string
	}{
		{[]string{"runs", "wait", "app-1", id[:8]}, "waiting for run " + id,
			fmt.Sprintf("stopped waiting for run %s, which goes on: devhook runs get app-1 %s (devhook runs cancel app-1 %s cancels it)", id, id, id)},
		{[]string{"runs", "logs", "app-1", id, "--follow"}, "queued on instance latest",
			fmt.Sprintf("stopped following the log of run %s, which goes on: devhook runs logs app-1 %s --follow (devhook runs cancel app-1 %s cancels it)", id, id, id)},
	} {
		for _, s := range signals {
			t.Run(c.args[1]+"/"+s.name, func(t *testing.T) {
				p := runAndSignal(t, env, says(c.ready), s.sig, c.args...)
				if want := "devhook: interrupted by " + s.name + ": " + c.says; p.code != s.code || !strings.Contains(p.stderr, want) {
					t.Errorf("exit status %d, want %d; standard error does not say %q:\n%s\n%s", p.code, s.code, want, p.stdout, p.stderr)
				}
			})
		}
	}
	run := em.api("GET", "/v1/applications/app-1/runs/"+id+"/metadata", "")
	if st := run["metadata"].(map[string]any)["status_v2"]; st != "queued" {
		t.Errorf("the run is %v after the interrupts, want it left queued", st)
	}
}
