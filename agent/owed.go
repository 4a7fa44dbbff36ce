package agent

// The table of the deliveries owed to the receiver (owe.go), which retry.go
// works through: each one's run, target and next try, by id.

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
)

type owedEntry struct {
	id  string
	key string // its run (orderKey); "" when unknown: then it waits for none
	// route chose its target at arrival (nil: the first --forward
	// target); target is that target's key (targetKey).
	route   *devhook.Route
	target  string
	since   time.Time
	next    time.Time
	refused bool // the last try found nothing listening: a probe may wake it
	running bool
	// reserved: owed behind an earlier delivery of its run, its state not
	// yet recorded (oweBehind); not tried until it is.
	reserved bool
	// forgotten: the delivery was deleted (Forget); a retry under way
	// when it was ends there.
	forgotten bool
}

// retrier holds the owed deliveries. Its lock is never taken on the path
// of a delivery while nothing is owed: n and refused are read first.
type retrier struct {
	n       atomic.Int32 // len(byID)
	refused atomic.Int32 // entries whose last try was refused
	kick    chan struct{}

	mu     sync.Mutex
	byID   map[string]*owedEntry
	byKey  map[string]int // entries of each run
	failed int
}

func (r *retrier) init() {
	r.kick = make(chan struct{}, 1)
	r.byID = make(map[string]*owedEntry)
	r.byKey = make(map[string]int)
}

func (r *retrier) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *retrier) counts() (owed, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID), r.failed
}

// add makes id, of run key, owed to the target of route rt, to be tried
// at next (once it is the first of its run). A reserved entry of id is
// released.
func (r *retrier) add(id, key string, rt *devhook.Route, since, next time.Time, refused bool) {
	r.mu.Lock()
	if old := r.byID[id]; old != nil {
		if old.reserved {
			old.reserved, old.since, old.next = false, since, next
			old.route, old.target = rt, targetKey(rt)
		}
		r.mu.Unlock()
		r.poke()
		return
	}
	r.insert(&owedEntry{id: id, key: key, route: rt, target: targetKey(rt), since: since, next: next, refused: refused})
	r.mu.Unlock()
	r.poke()
}

// insert adds e; r.mu is held.
func (r *retrier) insert(e *owedEntry) {
	r.byID[e.id] = e
	if e.key != "" {
		r.byKey[e.key]++
	}
	r.n.Store(int32(len(r.byID)))
	if e.refused {
		r.refused.Add(1)
	}
}

// empty reports whether nothing is owed: reserve would return false.
func (r *retrier) empty() bool { return r.n.Load() == 0 }

// reserve makes id owed behind the deliveries of run key that are owed
// already, and reports whether there are any. A reserved entry is not
// tried until add releases it, once its state is recorded, or unreserve
// drops it.
func (r *retrier) reserve(id, key string, now time.Time) bool {
	if r.empty() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey[key] == 0 || r.byID[id] != nil {
		return false
	}
	r.insert(&owedEntry{id: id, key: key, since: now, next: now, reserved: true})
	return true
}

// unreserve drops id's entry if it is still reserved.
func (r *retrier) unreserve(id string) {
	if r.n.Load() == 0 {
		return
	}
	r.mu.Lock()
	e := r.byID[id]
	r.mu.Unlock()
	if e != nil && e.reserved {
		r.remove(id, false)
	}
}

func (r *retrier) remove(id string, failed bool) {
	r.mu.Lock()
	r.removeLocked(id, failed)
	r.mu.Unlock()
	r.poke()
}

// removeLocked is remove with r.mu held.
func (r *retrier) removeLocked(id string, failed bool) {
	if e := r.byID[id]; e != nil {
		if e.refused {
			r.refused.Add(-1)
		}
		if e.key != "" {
			if r.byKey[e.key]--; r.byKey[e.key] <= 0 {
				delete(r.byKey, e.key)
			}
		}
		delete(r.byID, id)
		r.n.Store(int32(len(r.byID)))
	}
	if failed {
		r.failed++
	}
}

// forget drops the entries of ids, deleted, and makes failed the count of
// deliveries given up that the store still has. It reports whether an
// entry was dropped.
func (r *retrier) forget(ids []string, failed int) bool {
	r.mu.Lock()
	dropped := false
	for _, id := range ids {
		if e := r.byID[id]; e != nil {
			e.forgotten = true
			r.removeLocked(id, false)
			dropped = true
		}
	}
	changed := dropped || r.failed != failed
	r.failed = failed
	r.mu.Unlock()
	r.poke()
	return changed
}

// isForgotten reports whether e's delivery was deleted.
func (r *retrier) isForgotten(e *owedEntry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return e.forgotten
}

// reschedule sets the next try of e after one that failed.
func (r *retrier) reschedule(e *owedEntry, next time.Time, refused bool) {
	r.mu.Lock()
	if e.forgotten {
		r.mu.Unlock()
		return
	}
	if e.refused != refused {
		if refused {
			r.refused.Add(1)
		} else {
			r.refused.Add(-1)
		}
	}
	e.next, e.refused, e.running = next, refused, false
	r.mu.Unlock()
	r.poke()
}

// wakeRefused makes every entry owed to target (targetKey) whose last
// try was refused due at now.
func (r *retrier) wakeRefused(now time.Time, target string) {
	r.mu.Lock()
	for _, e := range r.byID {
		if e.refused && e.target == target && e.next.After(now) {
			e.next = now
		}
	}
	r.mu.Unlock()
	r.poke()
}

func (r *retrier) state(id string) *devhook.RetryState {
	if r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.byID[id]; e != nil {
		return &devhook.RetryState{State: devhook.RetryOwed, Since: e.since}
	}
	return nil
}

// due marks up to n entries due at now as running and returns them, oldest
// delivery first. Of a run's entries only the first (the lowest id) is
// tried: the others wait for it to be delivered or given up. wait is how
// long until the next entry is due (0: none is); probe has the route of
// each target (targetKey) that a refused entry waits for.
func (r *retrier) due(now time.Time, n int) (due []*owedEntry, wait time.Duration, probe map[string]*devhook.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := make(map[string]string, len(r.byKey)) // run → its lowest id
	for _, e := range r.byID {
		if e.key != "" {
			if f, ok := first[e.key]; !ok || e.id < f {
				first[e.key] = e.id
			}
		}
	}
	var next time.Time
	for _, e := range r.byID {
		switch {
		case e.running, e.reserved, e.key != "" && first[e.key] != e.id:
		case !e.next.After(now):
			due = append(due, e)
		default:
			if next.IsZero() || e.next.Before(next) {
				next = e.next
			}
			if _, ok := probe[e.target]; e.refused && !ok {
				if probe == nil {
					probe = make(map[string]*devhook.Route)
				}
				probe[e.target] = e.route
			}
		}
	}
	slices.SortFunc(due, func(a, b *owedEntry) int { return strings.Compare(a.id, b.id) })
	// The rest of those due wait for a retry to finish, which wakes the
	// loop.
	due = due[:min(len(due), max(n, 0))]
	for _, e := range due {
		e.running = true
	}
	if !next.IsZero() {
		wait = max(next.Sub(now), time.Nanosecond)
	}
	return due, wait, probe
}
