package main

import (
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
