package main

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/emulator"
)

// goApp is a go application for the push tests: it prints its input and
// arguments; {"sleep": true} makes it sleep a minute, {"fail": "why"}
// makes it write why on standard error and exit 2.
var goApp = map[string]string{
	"go.mod": "module pushtest\n\ngo 1.22\n",
	"main.go": `package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	raw, _ := io.ReadAll(os.Stdin)
	var in map[string]any
	json.Unmarshal(raw, &in)
	fmt.Fprintln(os.Stderr, "go app started with", os.Args[1:])
	if in["sleep"] == true {
		time.Sleep(time.Minute)
	}
	if why, ok := in["fail"].(string); ok {
		fmt.Fprintln(os.Stderr, why)
		os.Exit(2)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"options": map[string]any{}, "metrics": map[string]any{},
		"solution": map[string]any{"input": json.RawMessage(raw), "args": os.Args[1:]}})
}
`,
	"app.yaml": "type: go\nruntime: go:test\nbuild:\n  command: go build -o main .\n  environment:\n    CGO_ENABLED: \"0\"\nfiles:\n  - main\n",
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// copyTree copies src into a temporary directory.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// pushService is an emulator whose push calls are counted, for the
// commands through SERVICE_ENDPOINT and SERVICE_API_KEY.
func pushService(t *testing.T, cfg emulator.Config) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	// The build commands keep go's caches where they are, not in the
	// new HOME, which would make them build the standard library again.
	if out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE").Output(); err == nil {
		if v := strings.Fields(string(out)); len(v) == 2 {
			t.Setenv("GOCACHE", v[0])
			t.Setenv("GOMODCACHE", v[1])
		}
	}
	t.Setenv("HOME", t.TempDir())
	for _, k := range []string{cloud.EnvProfile, cloud.EnvSystemCerts} {
		t.Setenv(k, "")
	}
	cfg.APIKeys = []string{svcKey}
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pushes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/binary") || strings.HasPrefix(r.URL.Path, "/packages/") {
			pushes.Add(1)
		}
		e.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Setenv(cloud.EnvEndpoint, srv.URL)
	t.Setenv(cloud.EnvAPIKey, svcKey)
	return srv, &pushes
}

// TestAppsPush: devhook apps push packages and pushes a python application
// (with a pip dependency from a local directory) and a go one (built by
// its build command); devhook runs then reads their real runs: output,
// logs, failure, timeout and cancel. Bad manifests and missing files stop
// before any push call. No step bets on how fast the machine starts a
// Python interpreter: the runs that must finish have a limit of minutes,
// and the one that must time out sleeps far beyond its short limit.
func TestAppsPush(t *testing.T) {
	for _, tool := range []string{"python3", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	t.Setenv("PIP_NO_INDEX", "1") // the index is not reachable here, and not needed
	srv, pushes := pushService(t, emulator.Config{QueueTime: 10 * time.Millisecond, RetryDelays: []time.Duration{}, RunTimeout: 5 * time.Minute})
	pyDir := copyTree(t, filepath.Join("..", "..", "cloud", "testdata", "apps", "python"))
	goDir := writeTree(t, goApp)
	badDir := writeTree(t, map[string]string{"app.yaml": "type: cobol\nruntime: r\nfiles: [main]\n"})
	missingDir := writeTree(t, map[string]string{"app.yaml": "type: python\nruntime: r\nfiles: [main.py, data/*.json]\n", "main.py": ""})

	runSteps(t, []step{
		{args: []string{"apps", "create", "py"}},
		{args: []string{"apps", "create", "go"}},
		{args: []string{"apps", "push", badDir, "--app", "py"}, wantErr: []string{filepath.Join(badDir, "app.yaml"), `type "cobol"`}},
		{args: []string{"apps", "push", missingDir, "--app", "py"}, wantErr: []string{filepath.Join(missingDir, "app.yaml"), "data/*.json"}},
		{args: []string{"apps", "push", filepath.Join(badDir, "nope"), "--app", "py"}, wantErr: []string{"not a directory"}},
		{args: []string{"apps", "push", goDir}, wantErr: []string{`"app" not set`}},
	})
	if n := pushes.Load(); n != 0 {
		t.Fatalf("%d push calls for pushes that should have stopped first", n)
	}
	runSteps(t, []step{
		{args: []string{"apps", "push", pyDir, "--app", "nope"}, wantErr: []string{"404", "devhook apps create"}},
	})

	out, stderr, err := runCmd(t, "", "apps", "push", pyDir, "--app", "py", "--json")
	if err != nil {
		t.Fatalf("apps push: %v\n%s", err, stderr)
	}
	var obj map[string]string
	if err := json.Unmarshal([]byte(out), &obj); err != nil || len(obj) != 3 {
		t.Fatalf("apps push --json printed %q (%v)", out, err)
	}
	if obj["app_id"] != "py" || obj["endpoint"] != strings.TrimPrefix(srv.URL, "http://") ||
		obj["instance_url"] != srv.URL+"/v1/applications/py/runs?instance_id=latest" {
		t.Errorf("push object %v", obj)
	}
	if !strings.Contains(stderr, "python dependencies") {
		t.Errorf("apps push said %q", stderr)
	}
	out, stderr, err = runCmd(t, "", "apps", "push", goDir, "--app", "go")
	if err != nil {
		t.Fatalf("apps push: %v\n%s", err, stderr)
	}
	for _, w := range []string{"app_id", "go", "instance_url", srv.URL + "/v1/applications/go/runs?instance_id=latest"} {
		if !strings.Contains(out, w) {
			t.Errorf("apps push printed %q, want %q in it", out, w)
		}
	}

	runSteps(t, []step{
		{args: []string{"runs", "start", "py", "--input", "-", "--option", "limit=3", "--wait", "--poll", "10ms"}, stdin: `{"k":"v"}`,
			want: []string{"status       succeeded", "runtime      python:3.11", `"dep": "from-dep"`, `"-limit"`}},
		{args: []string{"runs", "start", "go", "--input", "-", "--option", "x=y", "--wait", "--poll", "10ms", "--json"}, stdin: `{"n":1}`,
			want: []string{`"status_v2": "succeeded"`, `"runtime": "go:test"`, `"args": [`, `"n": 1`}},
		{args: []string{"runs", "start", "py", "--input", "-", "--wait", "--poll", "10ms"}, stdin: `{"fail":"infeasible"}`,
			wantErr: []string{"ended failed", "about to fail\ninfeasible"}},
		{args: []string{"runs", "start", "go", "--input", "-", "--wait", "--poll", "10ms"}, stdin: `{"fail":"bad input"}`,
			wantErr: []string{"ended failed", "bad input"}},
	})

	// Logs and cancel of a run that sleeps.
	out, _, err = runCmd(t, `{"sleep":true}`, "runs", "start", "go", "--input", "-", "--option", "a=b")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	waitUntil(t, "the run to log its start", func() bool {
		out, _, err := runCmd(t, "", "runs", "logs", "go", id)
		return err == nil && strings.Contains(out, "go app started with [-a b]")
	})
	runSteps(t, []step{
		{args: []string{"runs", "cancel", "go", id}, want: []string{"status       canceled", "run was canceled"}},
		{args: []string{"runs", "cancel", "go", id}, wantErr: []string{"already finished (canceled)"}},
		{args: []string{"runs", "get", "go", id}, want: []string{"canceled"}},
		{args: []string{"runs", "logs", "go", id, "--json"}, want: []string{`"log": "go app started with [-a b]\n"`}},
		{args: []string{"runs", "logs", "go", "nope"}, wantErr: []string{"404"}},
	})

	// The time limit: an emulator of its own with a short one, and a run
	// that sleeps a minute. What is checked is how the run ends, not how
	// soon.
	pushService(t, emulator.Config{QueueTime: 10 * time.Millisecond, RetryDelays: []time.Duration{}, RunTimeout: time.Second})
	runSteps(t, []step{
		{args: []string{"apps", "create", "go"}},
		{args: []string{"apps", "push", goDir, "--app", "go"}},
		{args: []string{"runs", "start", "go", "--input", "-", "--wait", "--poll", "20ms"}, stdin: `{"sleep":true}`,
			wantErr: []string{"ended failed: timeout"}},
	})
}

// TestPushedRunThroughListen: a pushed application's real runs reach a
// receiver through devhook listen: queued, running and succeeded for a
// run that succeeds, with its real output_size; queued, running and
// failed, with the error, for one that fails. Each is verified.
func TestPushedRunThroughListen(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	t.Setenv("PIP_NO_INDEX", "1")
	pushService(t, emulator.Config{QueueTime: 20 * time.Millisecond, RetryDelays: []time.Duration{}})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer recv.Close()

	data := t.TempDir()
	relayAddr := closedAddr(t)
	lr := startListen(t, "--forward", recv.URL, "--data", data, "--relay-addr", relayAddr)
	pub := lr.next(t, "ready")["public_url"].(string)
	lr.stop(t)
	runSteps(t, []step{
		{args: []string{"webhooks", "create", "hook", "--url", pub + "/hook"}},
		{args: []string{"apps", "create", "py"}},
	})
	secret, _, err := runCmd(t, "", "webhooks", "secret", "hook")
	if err != nil {
		t.Fatal(err)
	}
	secret = strings.TrimSpace(secret)
	lr = startListen(t, "--forward", recv.URL, "--data", data, "--relay-addr", relayAddr, "--secret", secret, "--verify", "enforce")
	lr.next(t, "ready")
	if _, stderr, err := runCmd(t, "", "apps", "push", copyTree(t, filepath.Join("..", "..", "cloud", "testdata", "apps", "python")), "--app", "py"); err != nil {
		t.Fatalf("apps push: %v\n%s", err, stderr)
	}

	for _, tt := range []struct {
		input, last string
	}{
		{`{"k":"v"}`, "succeeded"},
		{`{"fail":"no solution"}`, "failed"},
	} {
		out, _, err := runCmd(t, tt.input, "runs", "start", "py", "--input", "-", "--wait", "--poll", "10ms", "--json")
		if (err == nil) != (tt.last == "succeeded") {
			t.Fatalf("runs start %s: %v", tt.input, err)
		}
		var rec cloud.Run
		if err := json.Unmarshal([]byte(out), &rec); err != nil {
			t.Fatalf("runs start --json printed %q: %v", out, err)
		}
		for _, want := range []string{"queued", "running", tt.last} {
			d := lr.next(t, "delivery")
			if d["verdict"] != "ok" || d["status"] != float64(200) || d["run_id"] != rec.RecordID || d["status_v2"] != want {
				t.Fatalf("delivery %v, want run %s %s verified and answered 200", d, rec.RecordID, want)
			}
		}
	}
}
