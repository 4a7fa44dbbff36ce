package agent

import (
	"fmt"
	"testing"
	"time"
)

// fillOwed makes n deliveries owed, in runs of perRun, all due at t0: what
// the agent resumes after a receiver was down for a while.
func fillOwed(r *retrier, n, perRun int, t0 time.Time) {
	for i := range n {
		id := fmt.Sprintf("d%08d", i)
		r.add(id, fmt.Sprintf("run r%d", i%(n/perRun)), nil, t0, t0, false)
	}
}

// BenchmarkDue drains 20,000 owed deliveries of 2,000 runs as retryLoop
// does: up to retryConcurrency retries under way, and due called again
// each time one finishes (the receiver took it). One op is one drain.
// Idle is one call of due while all of them wait for their next try.
func BenchmarkDue(b *testing.B) {
	const owed, runs = 20000, 2000
	t0 := time.Unix(1_800_000_000, 0)
	b.Run("drain", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			var r retrier
			r.init()
			fillOwed(&r, owed, owed/runs, t0)
			b.StartTimer()
			running, _, _ := r.due(t0, retryConcurrency)
			for len(running) > 0 {
				e := running[0]
				running = running[1:]
				r.remove(e.id, false)
				more, _, _ := r.due(t0, retryConcurrency-len(running))
				running = append(running, more...)
			}
			if n, _ := r.counts(); n != 0 {
				b.Fatalf("%d still owed after the drain", n)
			}
		}
	})
	b.Run("idle", func(b *testing.B) {
		var r retrier
		r.init()
		fillOwed(&r, owed, owed/runs, t0.Add(time.Hour))
		b.ResetTimer()
		for b.Loop() {
			if due, wait, _ := r.due(t0, retryConcurrency); len(due) != 0 || wait != time.Hour {
				b.Fatalf("due %d, wait %v", len(due), wait)
			}
		}
	})
}
