package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/emulator"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/scenario"
)

// Commands that run for a while, stopped by SIGINT (Ctrl-C) or SIGTERM,
// stop what they started, report what they did so far and exit 130 or 143,
// as a shell reports a process a signal ended: a CI job cut short does
// not read as green.

// signalled is a devhook process stopped by a signal once its output says
// it is under way.
type signalled struct {
	code           int
	stdout, stderr string
}

// runAndSignal starts devhook with args (and env added to this process's),
// waits until ready holds of its standard output and error (polling,
// bounded by what a loaded machine needs to start a process), sends sig,
// and waits for it to end.
func runAndSignal(t *testing.T, env []string, ready func(output string) bool, sig syscall.Signal, args ...string) signalled {
	t.Helper()
	cmd := exec.Command(devhookBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var err error
	exited := make(chan struct{})
	go func() { err = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.After(60 * time.Second)
	for !ready(stdout.String() + stderr.String()) {
		select {
		case <-exited:
			t.Fatalf("devhook %s ended (%v) before it was under way:\n%s\n%s", args[0], err, stdout.String(), stderr.String())
		case <-deadline:
			t.Fatalf("devhook %s was not under way within 60 s:\n%s\n%s", args[0], stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond): // polling a process's output
		}
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("devhook %s did not stop within 60 s of %s:\n%s\n%s", args[0], sig, stdout.String(), stderr.String())
	}
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return signalled{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// says is a ready condition: the output holds s.
func says(s string) func(string) bool {
	return func(out string) bool { return strings.Contains(out, s) }
}

var signals = []struct {
	sig  syscall.Signal
	name string
	code int
}{
	{syscall.SIGINT, "SIGINT", 130},
	{syscall.SIGTERM, "SIGTERM", 143},
}

// spacedScenario writes a scenario whose three deliveries were recorded a
// minute apart: played at that spacing, it runs for two minutes.
func spacedScenario(t *testing.T) string {
	t.Helper()
	s := &scenario.Scenario{}
	for i, st := range []string{"queued", "running", "succeeded"} {
		body, err := json.Marshal(devhook.NewRunStatus("run-spaced", "app-1", st, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		s.Deliveries = append(s.Deliveries, scenario.Entry{OffsetMS: int64(i) * 60_000, Method: "POST", Path: "/hook",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Recorded: &scenario.Answer{Status: 200}})
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "spaced.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// scenario play stopped between deliveries: the first delivery's line is
// out before the second is due, the exit status is the signal's, the
// summary says where play stopped, and the JUnit file, as junitparser
// reads it, has the delivery played, an error for the one under way and
// the last skipped.
func TestScenarioPlay_InterruptedExitsWithTheSignalAndItsReport(t *testing.T) {
	file := spacedScenario(t)
	rec := &recording{}
	srv := httptest.NewServer(rec.reference(checkSecret))
	defer srv.Close()
	for _, s := range signals {
		t.Run(s.name, func(t *testing.T) {
			junit := filepath.Join(t.TempDir(), "report.xml")
			p := runAndSignal(t, nil, says("1 run.status queued run-spaced"), s.sig,
				"scenario", "play", file, "--to", srv.URL, "--secret", checkSecret, "--junit", junit)
			if p.code != s.code {
				t.Errorf("exit status %d, want %d\n%s\n%s", p.code, s.code, p.stdout, p.stderr)
			}
			for _, want := range []string{
				"STOPPED  interrupted by " + s.name + " before it was sent",
				"STOPPED: interrupted by " + s.name + " at delivery 2 of 3, before it was sent; 1 played (0 answered otherwise than expected), 2 not played.",
			} {
				if !strings.Contains(p.stdout, want) {
					t.Errorf("standard output does not say %q:\n%s", want, p.stdout)
				}
			}
			if want := "devhook: interrupted by " + s.name + " at delivery 2 of 3: 1 played, 0 answered otherwise than expected; the report above and " + junit + " have them"; !strings.Contains(p.stderr, want) {
				t.Errorf("standard error does not say %q:\n%s", want, p.stderr)
			}
			suites := readJUnit(t, junit)
			if len(suites) != 1 || suites[0].Tests != 3 || suites[0].Errors != 1 || suites[0].Skipped != 1 || suites[0].Failures != 0 {
				t.Fatalf("the JUnit file reads %+v", suites)
			}
			c := suites[0].Cases
			if len(c[0].Result) != 0 || len(c[1].Result) != 1 || c[1].Result[0].Kind != "Error" ||
				!strings.Contains(c[1].Result[0].Message, "interrupted by "+s.name) || c[2].Result[0].Kind != "Skipped" {
				t.Errorf("the JUnit cases read %+v", c)
			}
		})
	}
	if n := rec.count(); n != 2 {
		t.Errorf("the handler got %d deliveries, want 2 (the first of each play)", n)
	}
}

// junitRead is what junitparser (Debian's python3-junitparser, as a CI's
// JUnit consumer independent of devhook) reads of a file.
type junitRead struct {
	Tests, Failures, Errors, Skipped int
	Cases                            []struct {
		Name   string
		Result []struct{ Kind, Message string }
	}
}

func readJUnit(t *testing.T, file string) []junitRead {
	t.Helper()
	const script = `
import json, sys
from junitparser import JUnitXml, TestSuite
xml = JUnitXml.fromfile(sys.argv[1])
suites = [xml] if isinstance(xml, TestSuite) else list(xml)
print(json.dumps([{"Tests": s.tests, "Failures": s.failures, "Errors": s.errors, "Skipped": s.skipped,
  "Cases": [{"Name": c.name, "Result": [{"Kind": type(r).__name__, "Message": r.message} for r in c.result]} for c in s]} for s in suites]))
`
	if exec.Command("/usr/bin/python3", "-c", "import junitparser").Run() != nil {
		msg := "no /usr/bin/python3 with junitparser (apt-get install python3-junitparser): the JUnit file is not read by a real consumer"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	out, err := exec.Command("/usr/bin/python3", "-c", script, file).Output()
	if err != nil {
		b, _ := os.ReadFile(file)
		t.Fatalf("junitparser could not read %s: %v\n%s", file, err, b)
	}
	var suites []junitRead
	if err := json.Unmarshal(out, &suites); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return suites
}

// runs start --wait prints the run's id as soon as the run is started, so
// that an interrupt leaves it on screen; stopped, it says the run goes on
// and how to reach it, exits with the signal's status, and the run is not
// canceled.
func TestRunsStartWait_InterruptedLeavesTheRunsID(t *testing.T) {
	em := startEmulator(t, emulator.Config{APIKeys: []string{"key"}, QueueTime: time.Hour, RunTime: time.Hour})
	em.api("POST", "/v1/applications", `{"id":"app-1","name":"App"}`)
	input := filepath.Join(t.TempDir(), "input.json")
	os.WriteFile(input, []byte(`{"hello":"world"}`), 0o644)
	for _, s := range signals {
		t.Run(s.name, func(t *testing.T) {
			p := runAndSignal(t, []string{"SERVICE_PROFILE=", "HOME=" + t.TempDir()}, says("waiting for it to end"), s.sig,
				"runs", "start", "app-1", "--input", input, "--wait", "--endpoint", em.srv.URL, "--api-key", "key")
			if p.code != s.code {
				t.Errorf("exit status %d, want %d\n%s\n%s", p.code, s.code, p.stdout, p.stderr)
			}
			_, after, ok := strings.Cut(p.stderr, "started run ")
			id, _, _ := strings.Cut(after, " ")
			if !ok || id == "" {
				t.Fatalf("no run id on standard error:\n%s", p.stderr)
			}
			want := fmt.Sprintf("devhook: interrupted by %s: stopped waiting for run %s, which goes on: devhook runs get app-1 %s (devhook runs cancel app-1 %s cancels it)", s.name, id, id, id)
			if !strings.Contains(p.stderr, want) {
				t.Errorf("standard error does not say %q:\n%s", want, p.stderr)
			}
			run := em.api("GET", "/v1/applications/app-1/runs/"+id+"/metadata", "")
			if st := run["metadata"].(map[string]any)["status_v2"]; st != "queued" {
				t.Errorf("the run is %v after the interrupt, want it left queued", st)
			}
		})
	}
}

// The commands that run servers until stopped exit with the signal's
// status as the others do.
func TestServers_ExitWithTheSignalsStatus(t *testing.T) {
	for _, s := range signals {
		t.Run(s.name, func(t *testing.T) {
			for _, c := range []struct {
				ready string
				args  []string
			}{
				{"reference receiver on", []string{"receive", "--addr", "127.0.0.1:0", "--secret", "s"}},
				{"service emulator on", []string{"emulate", "--addr", "127.0.0.1:0", "--data", t.TempDir()}},
				{`"event":"ready"`, []string{"listen", "--forward", "127.0.0.1:9", "--data", t.TempDir(), "--inspect", "off", "--json", "--relay-addr", "127.0.0.1:0"}},
			} {
				p := runAndSignal(t, []string{"HOME=" + t.TempDir()}, says(c.ready), s.sig, c.args...)
				if p.code != s.code {
					t.Errorf("devhook %s: exit status %d, want %d\n%s\n%s", c.args[0], p.code, s.code, p.stdout, p.stderr)
				}
			}
		})
	}
}

// login's wait for the browser, interrupted, exits with the signal's
// status and saves nothing.
func TestLogin_InterruptedWaitingForTheBrowser(t *testing.T) {
	em := startEmulator(t, emulator.Config{APIKeys: []string{"key"}})
	home := t.TempDir()
	p := runAndSignal(t, []string{"HOME=" + home, "SERVICE_PROFILE="}, says("Waiting for the browser"), syscall.SIGINT,
		"login", "--no-browser", "--callback-addr", "127.0.0.1:0", "--oidc-discovery-url", em.srv.URL+"/.well-known/openid-configuration")
	if p.code != 130 {
		t.Errorf("exit status %d, want 130\n%s\n%s", p.code, p.stdout, p.stderr)
	}
	if _, err := os.Stat(filepath.Join(home, ".service", "auth")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(home, ".service", "auth"))
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(home, ".service", "auth", e.Name(), "tokens.json")); err == nil {
				t.Errorf("tokens saved for session %s after the interrupt", e.Name())
			}
		}
	}
}

// check interrupted while the handler holds the third case: the cases
// answered are reported, the one under way is the JUnit error, the rest
// skipped; no diagnosis is made of a part of the suite.
func TestCheck_InterruptedReportsTheCasesAnswered(t *testing.T) {
	var mu sync.Mutex
	n := 0
	held := make(chan struct{})
	ref := receiver.New(receiver.Config{Secret: checkSecret})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		third := n == 3
		mu.Unlock()
		if third {
			io.ReadAll(r.Body) // so that the server sees the connection close
			close(held)
			<-r.Context().Done()
			return
		}
		ref.ServeHTTP(w, r)
	}))
	defer srv.Close()
	junit := filepath.Join(t.TempDir(), "check.xml")
	isHeld := func(string) bool {
		select {
		case <-held:
			return true
		default:
			return false
		}
	}
	p := runAndSignal(t, nil, isHeld, syscall.SIGINT, "check", srv.URL, "--secret", checkSecret, "--junit", junit)
	cases := check.Cases()
	if p.code != 130 {
		t.Errorf("exit status %d, want 130\n%s\n%s", p.code, p.stdout, p.stderr)
	}
	if want := fmt.Sprintf("STOPPED: interrupted by SIGINT at case %s, 3 of %d, before its answer; 0 required case(s) answered differently so far. No diagnosis", cases[2], len(cases)); !strings.Contains(p.stdout, want) ||
		strings.Contains(p.stdout, "Diagnosis") {
		t.Errorf("standard output does not say %q (and no diagnosis):\n%s", want, p.stdout)
	}
	if want := "devhook: interrupted by SIGINT at case " + cases[2] + ": 2 case(s) answered, 0 of them differently"; !strings.Contains(p.stderr, want) {
		t.Errorf("standard error does not say %q:\n%s", want, p.stderr)
	}
	suites := readJUnit(t, junit)
	if len(suites) != 1 || suites[0].Tests != len(cases) || suites[0].Errors != 1 || suites[0].Failures != 0 || suites[0].Skipped < len(cases)-3 {
		t.Fatalf("the JUnit file reads %+v", suites)
	}
	c := suites[0].Cases
	if len(c[0].Result) != 0 || len(c[2].Result) != 1 || c[2].Result[0].Kind != "Error" || !strings.Contains(c[2].Result[0].Message, "interrupted by SIGINT") {
		t.Errorf("the JUnit cases read %+v", c)
	}
}

// send, interrupted while the receiver holds its delivery, exits with the
// signal's status without waiting for the answer.
func TestSend_InterruptedWaitingForTheAnswer(t *testing.T) {
	held := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // so that the server sees the connection close
		once.Do(func() { close(held) })
		<-r.Context().Done()
	}))
	defer srv.Close()
	isHeld := func(string) bool {
		select {
		case <-held:
			return true
		default:
			return false
		}
	}
	p := runAndSignal(t, nil, isHeld, syscall.SIGTERM, "send", srv.URL+"/hook", "--secret", "s", "--timeout", "1h")
	if p.code != 143 {
		t.Errorf("exit status %d, want 143\n%s\n%s", p.code, p.stdout, p.stderr)
	}
}

// $DEVHOOK_CPUPROFILE gets a whole profile from a command stopped by
// Ctrl-C, as the load harness stops relay and agent: the exit status of
// the signal did not skip the profile's end, which left an empty file.
func TestCPUProfile_WrittenWhenInterrupted(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "cpu")
	p := runAndSignal(t, []string{"HOME=" + t.TempDir(), "DEVHOOK_CPUPROFILE=" + prefix}, says("reference receiver on"), syscall.SIGINT,
		"receive", "--addr", "127.0.0.1:0", "--secret", "s")
	if p.code != 130 {
		t.Fatalf("exit status %d, want 130\n%s", p.code, p.stderr)
	}
	files, _ := filepath.Glob(prefix + ".receive.*")
	if len(files) != 1 {
		t.Fatalf("profiles %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // a profile is gzipped protobuf
		t.Fatalf("the profile is %d bytes, not a gzipped profile", len(b))
	}
}
