package main

import (
	"runtime/debug"
	"testing"
)

// gcNow returns the collector's GOGC and memory limit.
func gcNow() (percent int, limit int64) {
	percent = debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1)
}

// listen runs its collector at listenGCPercent under memoryLimit, but the
// user's GOGC leaves both as the runtime read them, and the user's
// GOMEMLIMIT leaves the limit; the settings are put back once listen ends.
func TestListenGC_UsersEnvironmentWins(t *testing.T) {
	const userPercent, userLimit = 150, 1 << 30
	oldPercent := debug.SetGCPercent(userPercent)
	oldLimit := debug.SetMemoryLimit(userLimit)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	})
	for _, tc := range []struct {
		name        string
		env         map[string]string
		wantPercent int
		wantLimit   int64
	}{
		{"none set", nil, listenGCPercent, memoryLimit},
		{"GOGC set", map[string]string{"GOGC": "150"}, userPercent, userLimit},
		{"GOGC=off set", map[string]string{"GOGC": "off"}, userPercent, userLimit},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "1GiB"}, listenGCPercent, userLimit},
		{"both set", map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}, userPercent, userLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore := listenGC(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if p, l := gcNow(); p != tc.wantPercent || l != tc.wantLimit {
				t.Errorf("while listen runs: GOGC %d, limit %d; want %d, %d", p, l, tc.wantPercent, tc.wantLimit)
			}
			restore()
			if p, l := gcNow(); p != userPercent || l != userLimit {
				t.Errorf("after listen: GOGC %d, limit %d; want %d, %d back", p, l, userPercent, userLimit)
			}
		})
	}
}
