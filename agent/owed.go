package agent

// The table of the deliveries owed to the receiver (owe.go), which retry.go
// works through: each one's run, target and next try, by id.
//
// What retry.go asks of it costs in proportion to what it gets, not to
// what is owed, which is tens of thousands after a receiver was down an
// hour at a steady rate: each run's entries are kept sorted by id, so its
// first is at hand; the entries that may be tried (the heads: the first of
// their run, neither running nor reserved) wait in a min-heap by next try
// and, once due, in one by id (oldest delivery first); the refused heads
// waiting are counted by target (what is probed), and each target's
// refused entries whose next try a probe may bring forward are kept apart.

import (
	"container/heap"
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
	// busy: the times in a row it was not sent, its receiver's share
	// full (retry.go: overShare); read and written by its retry alone.
	busy int
	// unreadable counts the reads of its delivery that found it partly
	// unreadable (retry.go: unreadableOwed); only its retry touches it.
	unreadable int
	// reserved: owed behind an earlier delivery of its run, its state not
	// yet recorded (oweBehind); not tried until it is.
	reserved bool
	// forgotten: the delivery was deleted (Forget); a retry under way
	// when it was ends there.
	forgotten bool

	// in is the heap of the retrier that holds it (inWaiting, inDue or
	// none), idx its place there.
	in  uint8
	idx int
}

const (
	inNone    = iota
	inWaiting // retrier.waiting
	inDue     // retrier.ready
)

// retrier holds the owed deliveries. Its lock is never taken on the path
// of a delivery while nothing is owed: n and refused are read first.
type retrier struct {
	n       atomic.Int32 // len(byID)
	refused atomic.Int32 // entries whose last try was refused
	kick    chan struct{}

	mu   sync.Mutex
	byID map[string]*owedEntry
	runs map[string][]*owedEntry // the entries of each run (key), by id
	// waiting has the heads not due at dueAt, by next try; ready those
	// due, by id. A head is an entry in byID, first of its run (or of
	// none), neither running nor reserved.
	waiting, ready entryHeap
	dueAt          time.Time               // the now of the last due
	probes         map[string]*probeTarget // the refused heads in waiting, by target
	// sleeping has, for each target, the refused entries whose next try
	// may be after wokeAt: any other refused entry's is not.
	sleeping map[string]map[*owedEntry]struct{}
	wokeAt   time.Time // the latest now of wakeRefused
	failed   int
}

// probeTarget counts the refused heads waiting for a target, with the
// route of one of them.
type probeTarget struct {
	n     int
	route *devhook.Route
}

func (r *retrier) init() {
	r.kick = make(chan struct{}, 1)
	r.byID = make(map[string]*owedEntry)
	r.runs = make(map[string][]*owedEntry)
	r.waiting = entryHeap{in: inWaiting, less: func(a, b *owedEntry) bool {
		return a.next.Before(b.next) || a.next.Equal(b.next) && a.id < b.id
	}}
	r.ready = entryHeap{in: inDue, less: func(a, b *owedEntry) bool { return a.id < b.id }}
	r.probes = make(map[string]*probeTarget)
	r.sleeping = make(map[string]map[*owedEntry]struct{})
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
			r.unsleep(old)
			old.reserved, old.since, old.next = false, since, next
			old.route, old.target = rt, targetKey(rt)
			r.sleep(old)
			r.place(old)
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
		run := r.runs[e.key]
		i, _ := slices.BinarySearchFunc(run, e.id, compareID)
		if i == 0 && len(run) > 0 {
			r.unplace(run[0]) // no longer the first of its run
		}
		r.runs[e.key] = slices.Insert(run, i, e)
	}
	r.n.Store(int32(len(r.byID)))
	if e.refused {
		r.refused.Add(1)
		r.sleep(e)
	}
	r.place(e)
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
	if len(r.runs[key]) == 0 || r.byID[id] != nil {
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
	drop := e != nil && e.reserved // read under the lock: add releases it under it
	if drop {
		r.removeLocked(id, false)
	}
	r.mu.Unlock()
	if drop {
		r.poke()
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
		r.unplace(e)
		if e.refused {
			r.refused.Add(-1)
			r.unsleep(e)
		}
		delete(r.byID, id)
		if e.key != "" {
			run := r.runs[e.key]
			switch i, _ := slices.BinarySearchFunc(run, e.id, compareID); {
			case len(run) == 1:
				delete(r.runs, e.key)
			case i == 0: // the next of its run may be tried
				run[0] = nil
				r.runs[e.key] = run[1:]
				r.place(run[1])
			default:
				r.runs[e.key] = slices.Delete(run, i, i+1)
			}
		}
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
	r.unplace(e) // (a running entry is in no heap)
	r.unsleep(e)
	e.next, e.refused, e.running = next, refused, false
	if r.byID[e.id] == e {
		r.sleep(e)
		r.place(e)
	}
	r.mu.Unlock()
	r.poke()
}

// wakeRefused makes every entry owed to target (targetKey) whose last
// try was refused due at now.
func (r *retrier) wakeRefused(now time.Time, target string) {
	r.mu.Lock()
	if now.Before(r.wokeAt) {
		// The clock went back: those woken since may wake earlier still.
		for _, e := range r.byID {
			if e.refused && e.target == target {
				r.wake(e, now)
			}
		}
	} else {
		r.wokeAt = now
		for e := range r.sleeping[target] {
			r.wake(e, now)
		}
		delete(r.sleeping, target)
	}
	r.mu.Unlock()
	r.poke()
}

// wake makes e due at now if its next try is later; r.mu is held.
func (r *retrier) wake(e *owedEntry, now time.Time) {
	if e.next.After(now) {
		e.next = now
		if e.in == inWaiting {
			heap.Fix(&r.waiting, e.idx)
		}
	}
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
	if now.Before(r.dueAt) {
		// The clock went back: what was due may not be yet.
		for r.ready.Len() > 0 {
			e := heap.Pop(&r.ready).(*owedEntry)
			r.wait(e)
		}
	}
	r.dueAt = now
	for r.waiting.Len() > 0 && !r.waiting.es[0].next.After(now) {
		e := heap.Pop(&r.waiting).(*owedEntry)
		if e.refused {
			r.probeDrop(e)
		}
		heap.Push(&r.ready, e)
	}
	// The rest of those due wait for a retry to finish, which wakes the
	// loop.
	for len(due) < n && r.ready.Len() > 0 {
		e := heap.Pop(&r.ready).(*owedEntry)
		e.running = true
		due = append(due, e)
	}
	if r.waiting.Len() > 0 {
		wait = max(r.waiting.es[0].next.Sub(now), time.Nanosecond)
	}
	if len(r.probes) > 0 {
		probe = make(map[string]*devhook.Route, len(r.probes))
		for t, p := range r.probes {
			probe[t] = p.route
		}
	}
	return due, wait, probe
}

// behind returns how many entries of e's run come after it, waiting for
// it to be delivered or given up.
func (r *retrier) behind(e *owedEntry) int {
	if e.key == "" {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.runs[e.key]
	for i, o := range run {
		if o == e {
			return len(run) - 1 - i
		}
	}
	return 0
}

// isHead reports whether e is the first of its run, or has none; r.mu is
// held.
func (r *retrier) isHead(e *owedEntry) bool {
	if e.key == "" {
		return true
	}
	run := r.runs[e.key]
	return len(run) > 0 && run[0] == e
}

// place puts e among the entries that may be tried, if it is one: in the
// table, the first of its run, neither running nor reserved. r.mu is held.
func (r *retrier) place(e *owedEntry) {
	if e.in != inNone || e.running || e.reserved || r.byID[e.id] != e || !r.isHead(e) {
		return
	}
	r.wait(e)
}

// wait puts head e in r.waiting; r.mu is held.
func (r *retrier) wait(e *owedEntry) {
	heap.Push(&r.waiting, e)
	if e.refused {
		p := r.probes[e.target]
		if p == nil {
			p = &probeTarget{}
			r.probes[e.target] = p
		}
		p.n++
		p.route = e.route
	}
}

// unplace takes e out of the entries that may be tried; r.mu is held.
func (r *retrier) unplace(e *owedEntry) {
	switch e.in {
	case inWaiting:
		heap.Remove(&r.waiting, e.idx)
		if e.refused {
			r.probeDrop(e)
		}
	case inDue:
		heap.Remove(&r.ready, e.idx)
	}
}

// probeDrop uncounts refused head e, which left r.waiting.
func (r *retrier) probeDrop(e *owedEntry) {
	if p := r.probes[e.target]; p != nil {
		if p.n--; p.n <= 0 {
			delete(r.probes, e.target)
		}
	}
}

// sleep notes that refused entry e's next try was set: wakeRefused may
// bring it forward. r.mu is held.
func (r *retrier) sleep(e *owedEntry) {
	if !e.refused {
		return
	}
	s := r.sleeping[e.target]
	if s == nil {
		s = make(map[*owedEntry]struct{})
		r.sleeping[e.target] = s
	}
	s[e] = struct{}{}
}

// unsleep is the contrary of sleep; r.mu is held.
func (r *retrier) unsleep(e *owedEntry) {
	if s := r.sleeping[e.target]; s != nil {
		delete(s, e)
		if len(s) == 0 {
			delete(r.sleeping, e.target)
		}
	}
}

func compareID(e *owedEntry, id string) int { return strings.Compare(e.id, id) }

// entryHeap is a container/heap of entries that keeps each one's place
// (owedEntry.idx), for heap.Fix and heap.Remove.
type entryHeap struct {
	es   []*owedEntry
	in   uint8 // what its entries' in says
	less func(a, b *owedEntry) bool
}

func (h *entryHeap) Len() int           { return len(h.es) }
func (h *entryHeap) Less(i, j int) bool { return h.less(h.es[i], h.es[j]) }
func (h *entryHeap) Swap(i, j int) {
	h.es[i], h.es[j] = h.es[j], h.es[i]
	h.es[i].idx, h.es[j].idx = i, j
}

func (h *entryHeap) Push(x any) {
	e := x.(*owedEntry)
	e.in, e.idx = h.in, len(h.es)
	h.es = append(h.es, e)
}

func (h *entryHeap) Pop() any {
	e := h.es[len(h.es)-1]
	h.es[len(h.es)-1] = nil
	h.es = h.es[:len(h.es)-1]
	e.in, e.idx = inNone, -1
	return e
}
