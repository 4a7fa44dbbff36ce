package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/emulator"
)

// gateApp is a python application for the runs tests, driven by its
// input: it writes each of "lines" on standard error; with "gate" it then
// waits until that file exists and writes each of "after"; with "fail" it
// writes that and exits 1; else it prints "solution" as its output. A
// test opens the gate when it has seen what it waits for: nothing bets on
// how soon a Python interpreter starts.
var gateApp = map[string]string{
	"app.yaml": "type: python\nruntime: python:3.11\nfiles:\n  - main.py\n",
	"main.py": `import json, os, sys, time
data = json.load(sys.stdin)
for line in data.get("lines", []):
    print(line, file=sys.stderr, flush=True)
if "gate" in data:
    while not os.path.exists(data["gate"]):
        time.sleep(0.02)
    for line in data.get("after", []):
        print(line, file=sys.stderr, flush=True)
if "fail" in data:
    print(data["fail"], file=sys.stderr)
    sys.exit(1)
print(json.dumps({"options": {}, "solution": data.get("solution", {}), "metrics": {}}))
`,
}

// pushGateApp runs an emulator (pushService: SERVICE_ENDPOINT and
// SERVICE_API_KEY point at it) with gateApp pushed as application app,
// and returns a client of it.
func pushGateApp(t *testing.T) *cloud.Client {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	srv, _ := pushService(t, emulator.Config{QueueTime: 10 * time.Millisecond, RetryDelays: []time.Duration{}, RunTimeout: 10 * time.Minute,
		MaxParallelRuns: 8}) // the runs waiting at a gate hold no others up
	if _, stderr, err := runCmd(t, "", "apps", "create", "app"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if _, stderr, err := runCmd(t, "", "apps", "push", writeTree(t, gateApp), "--app", "app"); err != nil {
		t.Fatalf("apps push: %v\n%s", err, stderr)
	}
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(svcKey), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startGateRun starts a run of app with input and returns its id.
func startGateRun(t *testing.T, c *cloud.Client, input map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(input)
	r, err := c.StartRun(t.Context(), "app", "", cloud.RunInput{Input: b})
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// waitStatus polls the run until its status is want (a Python
// interpreter starts in its own time: the bound is generous).
func waitStatus(t *testing.T, c *cloud.Client, id, want string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r, err := c.RunMetadata(t.Context(), "app", id)
		if err == nil && r.Status() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is not %s within 3 minutes: %s %v", id, want, r.Status(), err)
		}
		time.Sleep(20 * time.Millisecond) // polling a run another process executes
	}
}

// runLong runs a command in this process as runCmd does, with a bound
// that a run executing Python on a loaded machine stays within.
func runLong(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd(&out, &errb)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// runs list shows an application's runs newest first with their short
// ids, status, duration and instance; --status selects, --limit cuts and
// says so, --json is the service's list; runs wait's exit status says how
// the run ended (0, 1, 3), 124 when --timeout passes first, 2 when the
// run cannot be read; every runs command takes the start of an id or the
// short one.
func TestRunsListAndWait(t *testing.T) {
	c := pushGateApp(t)
	gate := filepath.Join(t.TempDir(), "gate")
	ok := startGateRun(t, c, map[string]any{"solution": map[string]any{"x": 1}})
	failed := startGateRun(t, c, map[string]any{"lines": []string{"trying"}, "fail": "no solution"})
	running := startGateRun(t, c, map[string]any{"lines": []string{"started"}, "gate": gate})
	canceled := startGateRun(t, c, map[string]any{"gate": gate})
	short := devhook.ShortRunID

	for _, w := range []struct {
		ref      string
		code     int
		out, err string
	}{
		{short(ok), 0, "status       succeeded", ""},
		{failed[:6], 1, "status       failed", "run " + failed + " ended failed: trying\nno solution"},
		{"nope", 2, "", `no run with id "nope"`},
	} {
		out, stderr, err := runLong(t, "runs", "wait", "app", w.ref)
		if code := exitCode(err); code != w.code || !strings.Contains(out, w.out) || (w.err != "" && !strings.Contains(err.Error(), w.err)) {
			t.Errorf("runs wait app %s: exit %d (%v), want %d saying %q\n%s%s", w.ref, code, err, w.code, w.err, out, stderr)
		}
	}
	if _, _, err := runLong(t, "runs", "cancel", "app", short(canceled)); err != nil {
		t.Fatal(err)
	}
	out, _, err := runLong(t, "runs", "wait", "app", canceled, "--json")
	var rec map[string]any
	if exitCode(err) != 3 || !strings.Contains(err.Error(), "run "+canceled+" was canceled") || json.Unmarshal([]byte(out), &rec) != nil || rec["id"] != canceled {
		t.Errorf("runs wait of a canceled run: exit %d (%v)\n%s", exitCode(err), err, out)
	}
	waitStatus(t, c, running, "running")
	_, stderr, err := runLong(t, "runs", "wait", "app", running, "--timeout", "50ms")
	if exitCode(err) != 124 || !strings.Contains(err.Error(), "did not end within 50ms") ||
		!strings.Contains(err.Error(), "; it goes on: devhook runs get app "+running) {
		t.Errorf("runs wait --timeout: exit %d (%v)\n%s", exitCode(err), err, stderr)
	}

	out, _, err = runLong(t, "runs", "list", "app")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{{"RUN", "STATUS", "CREATED", "DURATION", "INSTANCE"},
		{short(canceled), "canceled"}, {short(running), "running"}, {short(failed), "failed"}, {short(ok), "succeeded"}}
	if len(lines) != len(want) {
		t.Fatalf("runs list printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		f := strings.Fields(lines[i])
		if len(f) < 5 || f[0] != w[0] || f[1] != w[1] || (i > 0 && f[len(f)-1] != "latest") {
			t.Errorf("runs list line %d is %q, want it to start %q and end with the instance", i, lines[i], w)
		}
	}
	if f := strings.Fields(lines[2]); f[4] != "-" { // a run that has not ended has no duration yet
		t.Errorf("the running run's duration is %q", f[4])
	}

	for _, l := range []struct {
		args   []string
		want   []string
		stderr string
	}{
		{[]string{"--status", "failed,CANCELED"}, []string{canceled, failed}, ""},
		{[]string{"--status", "running", "--status", "succeeded"}, []string{running, ok}, ""},
		{[]string{"--limit", "2"}, []string{canceled, running}, "(the 2 newest; --limit shows more)"},
	} {
		args := append([]string{"runs", "list", "app", "--json"}, l.args...)
		out, stderr, err := runLong(t, args...)
		var list struct {
			Items []map[string]any `json:"items"`
		}
		if err != nil || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		var got []string
		for _, it := range list.Items {
			got = append(got, it["id"].(string))
			if _, has := it["output"]; has || it["metadata"] == nil {
				t.Errorf("%s: an item is not a run record without output: %v", strings.Join(args, " "), it)
			}
		}
		if strings.Join(got, " ") != strings.Join(l.want, " ") || !strings.Contains(stderr, l.stderr) {
			t.Errorf("%s: %v (stderr %q), want %v", strings.Join(args, " "), got, stderr, l.want)
		}
	}
	runSteps(t, []step{
		{args: []string{"runs", "list", "app", "--status", "done"}, wantErr: []string{`--status "done"`, "queued, running, succeeded, failed, canceled"}},
		{args: []string{"runs", "list", "app", "--status", "queued"}, want: []string{"no run of app is queued"}},
		{args: []string{"runs", "list", "nope"}, wantErr: []string{"404", "nope"}},
		{args: []string{"runs", "get", "app", ok[:5]}, want: []string{"run          " + ok, `"x": 1`}},
		{args: []string{"runs", "logs", "app", short(failed)}, want: []string{"trying\nno solution\n"}},
	})
	// runs start --wait waits as runs wait does.
	in, _ := json.Marshal(map[string]any{"gate": gate})
	_, _, err = runCmd(t, string(in), "runs", "start", "app", "--input", "-", "--wait", "--wait-timeout", "50ms")
	if exitCode(err) != 124 || !strings.Contains(err.Error(), "did not end within 50ms") {
		t.Errorf("runs start --wait --wait-timeout: exit %d (%v)", exitCode(err), err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := runLong(t, "runs", "wait", "app", running); err != nil || !strings.Contains(stderr, "succeeded") {
		t.Errorf("runs wait of the run let through: %v\n%s%s", err, out, stderr)
	}
}

// runs wait and runs logs --follow exit 2 when they cannot wait (a bad
// command line, no service), so that 1 says only that the run failed.
func TestRunsWait_CannotWaitIsTwo(t *testing.T) {
	base, _ := newTestService(t)
	for _, args := range [][]string{
		{"runs", "wait", "app"},
		{"runs", "wait", "app", "r", "--timout", "1s"},
		{"runs", "wait", "app", "r", "--endpoint", "http://127.0.0.1:1", "--api-key", svcKey},
		{"runs", "logs", "app", "r", "--follow", "--endpoint", base},
		{"runs", "logs", "app", "r", "--follow", "--endpoint", base, "--api-key", svcKey},
	} {
		if _, _, err := runCmd(t, "", args...); exitCode(err) != 2 {
			t.Errorf("%s: exit %d (%v), want 2", strings.Join(args, " "), exitCode(err), err)
		}
	}
	if _, _, err := runCmd(t, "", "runs", "logs", "app", "r", "--endpoint", base, "--api-key", svcKey); exitCode(err) != 1 {
		t.Errorf("runs logs without --follow: exit %d (%v), want 1 as any command's", exitCode(err), err)
	}
	if _, _, err := runCmd(t, "", "runs", "logs", "app", "r", "--timeout", "1s", "--endpoint", base, "--api-key", svcKey); err == nil || !strings.Contains(err.Error(), "--timeout goes with --follow") {
		t.Errorf("runs logs --timeout without --follow: %v", err)
	}
}
