package emulator_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// process is a process's identity: its pid and its start time, so that a
// pid reused by another process is not taken for it.
type process struct {
	name  string
	pid   int
	start string
}

// startTime is field 22 of /proc/<pid>/stat, "" when there is no such
// process.
func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// escaped reads the pid files the python app's escape mode writes, once
// it has written them all (the parent's last); ok is false before.
func escaped(t *testing.T, dir string) (procs []process, ok bool) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "parent")); err != nil {
		return nil, false
	}
	for _, n := range []string{"parent", "child", "daemon"} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil {
			t.Fatalf("pid file %s: %q", n, b)
		}
		procs = append(procs, process{name: n, pid: pid, start: startTime(pid)})
	}
	return procs, true
}

// waitDead waits until none of the processes exists any more: not even as
// a zombie, since the emulator reaps the orphans of its runs.
func waitDead(t *testing.T, procs []process) {
	t.Helper()
	eventually(t, func() bool {
		for _, p := range procs {
			if p.start != "" && startTime(p.pid) == p.start {
				return false
			}
		}
		return true
	}, "the run's processes %v to be gone", procs)
}

// TestPushedRunTreeStopped: a cancel and a timeout stop a run's whole
// process tree: a child that called setsid() (out of the run's process
// group and session, a process-group kill misses it) and a daemon made by
// a double fork (orphaned at once, reparented to the emulator) die with
// the run, and the emulator reaps them.
func TestPushedRunTreeStopped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a run's processes outside its process group are followed on Linux only")
	}
	t.Run("cancel", func(t *testing.T) {
		v := newEnv(t, testConfig())
		v.newApp("app")
		v.push("app", "python", pythonPackage(t))
		dir := t.TempDir()
		r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "escape", "dir": dir}})
		var procs []process
		eventually(t, func() bool {
			var ok bool
			procs, ok = escaped(t, dir)
			return ok
		}, "run %s to start its children", r.ID)
		v.do("PATCH", "/v1/applications/app/runs/"+r.ID+"/cancel", nil, 200, nil)
		if done, _ := v.waitFinal("app", r.ID); done.Metadata.StatusV2 != "canceled" {
			t.Fatalf("run %s", done.Metadata.StatusV2)
		}
		waitDead(t, procs)
	})
	t.Run("timeout", func(t *testing.T) {
		// The time limit must pass after the app has started its
		// children, and how long a Python start takes is the machine's
		// to decide: a limit it passed first proves nothing, and the
		// next try doubles it.
		for limit := 2 * time.Second; ; limit *= 2 {
			cfg := testConfig()
			cfg.RunTimeout = limit
			v := newEnv(t, cfg)
			v.newApp("app")
			v.push("app", "python", pythonPackage(t))
			dir := t.TempDir()
			r := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "escape", "dir": dir}})
			done, _ := v.waitFinal("app", r.ID)
			if m := done.Metadata; m.StatusV2 != "failed" || m.Error != "timeout" {
				t.Fatalf("run %s %q, want failed with timeout", m.StatusV2, m.Error)
			}
			procs, ok := escaped(t, dir)
			if !ok {
				if limit >= 16*time.Second {
					t.Fatalf("the app never started its children within a %s limit", limit)
				}
				t.Logf("the app had not started its children within %s; again with twice that", limit)
				continue
			}
			waitDead(t, procs)
			return
		}
	})
}
