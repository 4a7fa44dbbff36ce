//go:build !race

package agent

import (
	"testing"
	"time"
)

// TestDueDoesNotWalkTheTable: due takes what it returns without building
// anything of the size of the table (the table once built a map of every
// run on each call, and scanned every entry twice): nothing when nothing
// is due, the slice it returns while a backlog drains.
func TestDueDoesNotWalkTheTable(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var r retrier
	r.init()
	fillOwed(&r, 20000, 10, t0.Add(time.Hour))
	if n := testing.AllocsPerRun(100, func() { r.due(t0, retryConcurrency) }); n != 0 {
		t.Errorf("due with 20000 owed, none due: %v allocations, want 0", n)
	}
	now := t0.Add(2 * time.Hour)
	last := ""
	if n := testing.AllocsPerRun(100, func() {
		due, _, _ := r.due(now, 1)
		if len(due) != 1 || due[0].id <= last {
			t.Fatalf("due %v after %s", due, last)
		}
		last = due[0].id
		r.remove(due[0].id, false)
	}); n > 1 {
		t.Errorf("one due of 20000 owed: %v allocations, want 1", n)
	}
}
