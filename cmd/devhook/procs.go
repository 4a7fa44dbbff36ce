package main

import "runtime"

// listenProcessors is how many processors (GOMAXPROCS) listen runs Go
// code on, unless the user sets GOMAXPROCS. The agent's work on a
// delivery is a chain of short steps between waits (read, verify, record,
// forward, answer), each goroutine handing on to the next; with a
// processor idle beside the busy one, each hand-on wakes a thread for it,
// which spins looking for work and sleeps again. On one processor the
// goroutine handed to runs when the current one waits. Measured with
// go run ./bench on 2 cores, GOMAXPROCS=1 for listen alone against the
// default, interleaved: at concurrency 1 the agent's p50 417 against 446
// µs and the tunnel's CPU 315 against 352 µs a delivery (six runs each);
// at concurrency 32 the tunnel's CPU 86-103 against 99-127 µs, with the
// throughput no lower (two -rounds 3 runs each). One processor runs
// about 15,000 deliveries a second of the agent's work, far beyond what
// a developer's webhooks send; system calls (disk writes included) hand
// the processor on and do not hold it. Measured: docs/PERFORMANCE.md.
const listenProcessors = 1

// listenProcs sets listen's GOMAXPROCS, unless the environment
// (lookupEnv) sets it, and returns what puts the setting back (tests run
// listen in their own process).
func listenProcs(lookupEnv func(string) (string, bool)) (restore func()) {
	if _, ok := lookupEnv("GOMAXPROCS"); ok {
		return func() {}
	}
	old := runtime.GOMAXPROCS(listenProcessors)
	return func() { runtime.GOMAXPROCS(old) }
}
