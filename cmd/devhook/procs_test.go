package main

import (
	"os"
	"runtime"
	"testing"
)

// listen runs on listenProcessors, unless the user set GOMAXPROCS; the
// setting is put back once listen ends.
func TestListenProcs_UsersEnvironmentWins(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	if before == listenProcessors {
		runtime.GOMAXPROCS(listenProcessors + 1)
		t.Cleanup(func() { runtime.GOMAXPROCS(before) })
		before = listenProcessors + 1
	}
	restore := listenProcs(func(string) (string, bool) { return "", false })
	if got := runtime.GOMAXPROCS(0); got != listenProcessors {
		t.Errorf("while listen runs: GOMAXPROCS %d, want %d", got, listenProcessors)
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("after listen: GOMAXPROCS %d, want %d back", got, before)
	}

	restore = listenProcs(func(k string) (string, bool) { return "4", k == "GOMAXPROCS" })
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("with GOMAXPROCS set: %d, want the runtime's %d left", got, before)
	}
	restore()
}

// listen itself runs under its settings (one processor, its GOGC) and
// puts the process's back when it ends.
func TestListen_RunsUnderItsRuntimeSettings(t *testing.T) {
	for _, k := range []string{"GOMAXPROCS", "GOGC", "GOMEMLIMIT"} {
		if _, ok := os.LookupEnv(k); ok {
			t.Skipf("%s is set in the environment: listen leaves it to the runtime", k)
		}
	}
	before := runtime.GOMAXPROCS(0)
	if before == listenProcessors {
		runtime.GOMAXPROCS(listenProcessors + 1)
		before = listenProcessors + 1
	}
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	percent, _ := gcNow()

	lr := startListen(t, "--forward", "http://127.0.0.1:1", "--data", t.TempDir())
	lr.next(t, "ready")
	if got := runtime.GOMAXPROCS(0); got != listenProcessors {
		t.Errorf("while listen runs: GOMAXPROCS %d, want %d", got, listenProcessors)
	}
	if p, _ := gcNow(); p != listenGCPercent {
		t.Errorf("while listen runs: GOGC %d, want %d", p, listenGCPercent)
	}
	lr.stop(t)
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("after listen: GOMAXPROCS %d, want %d back", got, before)
	}
	if p, _ := gcNow(); p != percent {
		t.Errorf("after listen: GOGC %d, want %d back", p, percent)
	}
}
