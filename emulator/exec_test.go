package emulator_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

// waitFinal polls the metadata until the run is final and returns the
// full record, checked.
func (v *env) waitFinal(app, id string) (runRecord, []byte) {
	v.t.Helper()
	eventually(v.t, func() bool {
		s := v.metadata(app, id).Metadata.StatusV2
		return s == "succeeded" || s == "failed" || s == "canceled"
	}, "run %s to end", id)
	var r runRecord
	raw := v.do("GET", "/v1/applications/"+app+"/runs/"+id, nil, 200, &r)
	return r, raw
}

func (v *env) logs(app, id string) string {
	v.t.Helper()
	var l map[string]string
	v.do("GET", "/v1/applications/"+app+"/runs/"+id+"/logs", nil, 200, &l)
	return l["log"]
}

// solution decodes an executed run's output.solution.
type appSolution struct {
	Input any      `json:"input"`
	Args  []string `json:"args"`
	Cwd   string   `json:"cwd"`
	PID   int      `json:"pid"`
	PGID  int      `json:"pgid"`
}

func solutionOf(t *testing.T, raw []byte) appSolution {
	t.Helper()
	var r struct {
		Output struct {
			Solution appSolution `json:"solution"`
		} `json:"output"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("run record %s: %v", raw, err)
	}
	return r.Output.Solution
}

// TestPushedRunsExecute: a pushed python, go and java application runs
// for real on latest: input on stdin, options as -name value, output from
// stdout, logs from stderr, in a working copy of its own that is removed
// after, in a process group of its own; its three deliveries carry the
// real output size. Runs started before the push still copy the input;
// devint runs the pushed package too.
func TestPushedRunsExecute(t *testing.T) {
	kinds := []struct {
		typ  string
		pkg  func(*testing.T) []byte
		logs string
	}{
		{"python", pythonPackage, "python app: read"},
		{"go", goPackage, "go app: read"},
		{"java", javaPackage, "java app: read"},
	}
	for _, k := range kinds {
		t.Run(k.typ, func(t *testing.T) {
			pkg := k.pkg(t)
			v := newEnv(t, testConfig())
			rc := newReceiver(t)
			v.createWebhook("hook", rc.srv.URL)
			v.newApp("app")
			before := v.startRun("app", "latest", map[string]any{"input": map[string]int{"n": 0}})
			v.pollSucceeded("app", before.ID)
			for range 3 {
				rc.next(t)
			}
			v.push("app", k.typ, pkg)

			in := map[string]any{"input": map[string]any{"n": 1, "s": "é"}, "options": map[string]string{"b": "two words", "a": "1"}}
			r := v.startRun("app", "latest", in)
			done, raw := v.waitFinal("app", r.ID)
			m := done.Metadata
			if m.StatusV2 != "succeeded" || m.Status != "succeeded" || m.Error != "" {
				t.Fatalf("run ended %s %q; logs %q", m.StatusV2, m.Error, v.logs("app", r.ID))
			}
			checkRunRecord(t, raw, shapeFull)
			sol := solutionOf(t, raw)
			if got := strings.Join(sol.Args, "|"); got != "-a|1|-b|two words" {
				t.Errorf("arguments %q, want -a 1 -b \"two words\"", got)
			}
			if b, _ := json.Marshal(sol.Input); string(b) != `{"n":1,"s":"é"}` {
				t.Errorf("the app read input %s", b)
			}
			var out struct {
				Output json.RawMessage `json:"output"`
			}
			json.Unmarshal(raw, &out)
			if m.OutputSize != float64(len(out.Output)) || m.OutputSize == 0 {
				t.Errorf("output_size %v, output %d bytes", m.OutputSize, len(out.Output))
			}
			if m.Runtime != k.typ+":test" {
				t.Errorf("runtime %q", m.Runtime)
			}
			if l := v.logs("app", r.ID); !strings.Contains(l, k.logs) {
				t.Errorf("logs %q, want the app's standard error", l)
			}
			if k.typ == "python" {
				if sol.PGID != sol.PID {
					t.Errorf("pid %d in process group %d: want a group of its own", sol.PID, sol.PGID)
				}
				if _, err := os.Stat(sol.Cwd); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the run's working copy %s is still there (%v)", sol.Cwd, err)
				}
			}
			var evs []event
			for range 3 {
				var ev event
				json.Unmarshal(rc.next(t).body, &ev)
				evs = append(evs, ev)
			}
			if evs[0].Data.StatusV2 != "queued" || evs[1].Data.StatusV2 != "running" || evs[2].Data.StatusV2 != "succeeded" {
				t.Fatalf("deliveries %s, %s, %s", evs[0].Data.StatusV2, evs[1].Data.StatusV2, evs[2].Data.StatusV2)
			}
			if d := evs[2].Data; d.OutputSize != m.OutputSize || d.Error != nil || d.Duration != m.Duration {
				t.Errorf("succeeded delivery %+v, record %+v", d, m)
			}

			// devint, where the service's own clients start runs by
			// default, runs what was pushed too.
			dv := v.startRun("app", "devint", map[string]any{"input": map[string]int{"n": 2}})
			got, raw := v.waitFinal("app", dv.ID)
			if got.Metadata.StatusV2 != "succeeded" || got.Metadata.Runtime != k.typ+":test" || got.Metadata.ApplicationInstanceID != "devint" {
				t.Errorf("devint run %s, runtime %q, instance %q", got.Metadata.StatusV2, got.Metadata.Runtime, got.Metadata.ApplicationInstanceID)
			}
			if b, _ := json.Marshal(solutionOf(t, raw).Input); string(b) != `{"n":2}` {
				t.Errorf("the app read input %s on devint", b)
			}
		})
	}
}

// TestPushedRunFailures: exit status, time limit, cancel, output beyond
// the limit and no output each end the run as docs/INTERFACE.md says, and
// the process group dies with it.
func TestPushedRunFailures(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOutputBytes = 1 << 20
	cfg.RunTimeout = time.Minute
	v := newEnv(t, cfg)
	rc := newReceiver(t)
	v.createWebhook("hook", rc.srv.URL)
	v.newApp("app")
	v.push("app", "python", pythonPackage(t))
	lastDelivery := func(runID string) event {
		t.Helper()
		for {
			var ev event
			json.Unmarshal(rc.next(t).body, &ev)
			if ev.Data.RunID == runID && ev.Data.StatusV2 != "queued" && ev.Data.StatusV2 != "running" {
				return ev
			}
		}
	}

	t.Run("exit status", func(t *testing.T) {
		r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "fail"}})
		done, raw := v.waitFinal("app", r.ID)
		checkRunRecord(t, raw, shapeFull)
		m := done.Metadata
		if m.StatusV2 != "failed" || m.Status != "failed" || m.OutputSize != 0 {
			t.Fatalf("run %s/%s output_size %v", m.StatusV2, m.Status, m.OutputSize)
		}
		if !strings.HasSuffix(m.Error, "line 19\nboom: the solver gave up") || strings.Contains(m.Error, "line 9\n") {
			t.Errorf("error %q, want the last lines of standard error", m.Error)
		}
		if l := v.logs("app", r.ID); !strings.HasPrefix(l, "line 0\n") {
			t.Errorf("logs %q, want all of standard error", l)
		}
		ev := lastDelivery(r.ID)
		if ev.Data.StatusV2 != "failed" || ev.Data.Status != "failed" || ev.Data.Error == nil || *ev.Data.Error != m.Error {
			t.Errorf("failed delivery %+v", ev.Data)
		}
	})

	t.Run("no output", func(t *testing.T) {
		r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "silent"}})
		done, _ := v.waitFinal("app", r.ID)
		if m := done.Metadata; m.StatusV2 != "failed" || !strings.Contains(m.Error, "printed nothing on standard output") {
			t.Errorf("run %s %q", m.StatusV2, m.Error)
		}
		lastDelivery(r.ID)
	})

	t.Run("output too large", func(t *testing.T) {
		r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "flood"}})
		done, _ := v.waitFinal("app", r.ID)
		if m := done.Metadata; m.StatusV2 != "failed" || !strings.Contains(m.Error, "more than 1048576 bytes on standard output") {
			t.Errorf("run %s %q", m.StatusV2, m.Error)
		}
		lastDelivery(r.ID)
	})

	t.Run("not an executable of this machine", func(t *testing.T) {
		v.newApp("bad")
		v.push("bad", "go", makePackage(t, pkgFile{name: "main", body: []byte("\x7fELF but not really"), mode: 0o755}))
		r := v.startRun("bad", "latest", map[string]any{"input": 1})
		done, _ := v.waitFinal("bad", r.ID)
		if m := done.Metadata; m.StatusV2 != "failed" || !strings.Contains(m.Error, "build main for this machine") {
			t.Errorf("run %s %q", m.StatusV2, m.Error)
		}
		lastDelivery(r.ID)
	})

	t.Run("cancel", func(t *testing.T) {
		r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "sleep"}})
		pids := waitPIDs(t, v, r.ID)
		var canceled runRecord
		v.do("PATCH", "/v1/applications/app/runs/"+r.ID+"/cancel", nil, 200, &canceled)
		if canceled.Metadata.StatusV2 != "canceled" {
			t.Fatalf("cancel answer %s", canceled.Metadata.StatusV2)
		}
		ev := lastDelivery(r.ID)
		if ev.Data.StatusV2 != "canceled" {
			t.Errorf("delivery after the cancel: %s", ev.Data.StatusV2)
		}
		waitGone(t, pids...)
		if l := v.logs("app", r.ID); !strings.Contains(l, "started pid=") {
			t.Errorf("logs of the canceled run %q", l)
		}
	})
}

// TestPushedRunTimeout: a run that sleeps far beyond its time limit is
// killed and fails with error "timeout". How soon the machine starts
// Python is not the test's to bet on: the limit may pass before the app
// has even printed its pids; when it had, they are gone with the run.
func TestPushedRunTimeout(t *testing.T) {
	cfg := testConfig()
	cfg.RunTimeout = time.Second
	v := newEnv(t, cfg)
	v.newApp("app")
	v.push("app", "python", pythonPackage(t))
	r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "sleep"}})
	done, _ := v.waitFinal("app", r.ID)
	if m := done.Metadata; m.StatusV2 != "failed" || m.Error != "timeout" || m.ExecutionDuration < 1000 {
		t.Errorf("run %s %q after %v ms, want failed with timeout after at least the limit", m.StatusV2, m.Error, m.ExecutionDuration)
	}
	if m := pidsLine.FindStringSubmatch(v.logs("app", r.ID)); m != nil {
		var pids []int
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(s)
			pids = append(pids, n)
		}
		waitGone(t, pids...)
	}
}

// TestCloseKillsRuns: closing the emulator kills the process group of a
// run that is executing.
func TestCloseKillsRuns(t *testing.T) {
	e, err := emulator.New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	v := &env{t: t, e: e, srv: httptestServer(t, e)}
	v.newApp("app")
	v.push("app", "python", pythonPackage(t))
	r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "sleep"}})
	pids := waitPIDs(t, v, r.ID)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pids...)
}

var pidsLine = regexp.MustCompile(`started pid=(\d+) child=(\d+)`)

// waitPIDs waits until the sleeping app has logged its pid and its
// child's, and returns them.
func waitPIDs(t *testing.T, v *env, runID string) []int {
	t.Helper()
	var pids []int
	eventually(t, func() bool {
		m := pidsLine.FindStringSubmatch(v.logs("app", runID))
		if m == nil {
			return false
		}
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(s)
			pids = append(pids, n)
		}
		return true
	}, "run %s to log its pids", runID)
	return pids
}

// waitGone waits until none of the processes is alive: gone, or a zombie
// waiting for whoever inherited it to reap it.
func waitGone(t *testing.T, pids ...int) {
	t.Helper()
	eventually(t, func() bool {
		for _, p := range pids {
			err := syscall.Kill(p, 0)
			if errors.Is(err, syscall.ESRCH) {
				continue
			}
			stat, rerr := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
			if rerr != nil {
				continue // gone between the two looks
			}
			if _, rest, ok := strings.Cut(string(stat), ") "); ok && strings.HasPrefix(rest, "Z") {
				continue
			}
			return false
		}
		return true
	}, "processes %v to be killed", pids)
}

// TestParallelRunsBound: past MaxParallelRuns, runs of a pushed
// application stay queued until one ends.
func TestParallelRunsBound(t *testing.T) {
	cfg := testConfig()
	cfg.MaxParallelRuns = 1
	v := newEnv(t, cfg)
	v.newApp("app")
	v.push("app", "python", pythonPackage(t))
	first := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "sleep"}})
	waitPIDs(t, v, first.ID)
	second := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "ok"}})
	// A run of an application with nothing pushed, started after the
	// second one, executes nothing and is not bound: once it has
	// succeeded, the second run's queue time has passed too, and it must
	// still be queued.
	v.newApp("plain")
	control := v.startRun("plain", "latest", map[string]any{"input": 1})
	v.pollSucceeded("plain", control.ID)
	if s := v.metadata("app", second.ID).Metadata.StatusV2; s != "queued" {
		t.Fatalf("second run is %s while the first holds the only slot", s)
	}
	v.do("PATCH", "/v1/applications/app/runs/"+first.ID+"/cancel", nil, 200, nil)
	if done, _ := v.waitFinal("app", second.ID); done.Metadata.StatusV2 != "succeeded" {
		t.Errorf("second run after the first was canceled: %s %q", done.Metadata.StatusV2, done.Metadata.Error)
	}
}

// TestRunResumesAfterRestart: a run executing when the emulator closes is
// killed, stays running in the data directory, and executes again when an
// emulator starts with it; then it ends as usual.
func TestRunResumesAfterRestart(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{t: t, e: e, srv: httptestServer(t, e)}
	v.newApp("app")
	v.push("app", "python", pythonPackage(t))
	marker := filepath.Join(t.TempDir(), "ran-once")
	r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "once", "marker": marker}})
	pids := waitPIDs(t, v, r.ID)
	v.srv.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pids...)

	e, err = emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	v = &env{t: t, e: e, srv: httptestServer(t, e)}
	done, raw := v.waitFinal("app", r.ID)
	if done.Metadata.StatusV2 != "succeeded" {
		t.Fatalf("resumed run %s %q", done.Metadata.StatusV2, done.Metadata.Error)
	}
	checkRunRecord(t, raw, shapeFull)
}
