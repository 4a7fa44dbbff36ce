package main

// The garbage collector's settings: the Go runtime's GOGC and GOMEMLIMIT
// when the user sets them, else devhook's, chosen from measurements
// (docs/PERFORMANCE.md, "Memory").

import (
	"os"
	"runtime/debug"
)

const (
	// gcPercent is every command's GOGC: the relay and the agent allocate
	// per delivery but keep little, so the default collector runs more
	// often than their small heaps need.
	gcPercent = 200
	// listenGCPercent is listen's: the agent's live heap is 2 to 7 MiB
	// under load, and collections are few. At 300 the agent's peak RSS
	// at concurrency 32 was 54-55 MiB against 61-64.5 at 400 (the bbolt
	// pages of 64 KiB and the journal's batches grew what is in flight),
	// its CPU per delivery the same within the noise; 200 cost 10-15 µs
	// of collections a delivery before the allocations were cut, 400
	// left no room under the 64 MiB target. Measured: docs/PERFORMANCE.md.
	listenGCPercent = 300
	// memoryLimit is the soft limit of the Go heap and runtime: it keeps
	// the heap of a larger GOGC from growing without bound, so that the
	// agent stays within 64 MiB of RSS with the store at its retention.
	memoryLimit = 48 << 20
)

// tuneGC sets every command's collector, unless GOGC is set (then the
// runtime's own reading of GOGC and GOMEMLIMIT stands); a GOMEMLIMIT that
// is set wins over memoryLimit.
func tuneGC() {
	setGC(os.LookupEnv, gcPercent)
}

// listenGC sets listen's collector, as tuneGC does but for its GOGC. It
// returns what puts the settings back (tests run listen in their own
// process).
func listenGC(lookupEnv func(string) (string, bool)) (restore func()) {
	return setGC(lookupEnv, listenGCPercent)
}

// setGC sets the collector to percent and memoryLimit, where the
// environment (lookupEnv) does not set them, and returns what puts back
// the settings it changed.
func setGC(lookupEnv func(string) (string, bool), percent int) (restore func()) {
	if _, ok := lookupEnv("GOGC"); ok {
		return func() {}
	}
	oldPercent := debug.SetGCPercent(percent)
	oldLimit := int64(-1)
	if _, ok := lookupEnv("GOMEMLIMIT"); !ok {
		oldLimit = debug.SetMemoryLimit(memoryLimit)
	}
	return func() {
		debug.SetGCPercent(oldPercent)
		if oldLimit >= 0 {
			debug.SetMemoryLimit(oldLimit)
		}
	}
}
