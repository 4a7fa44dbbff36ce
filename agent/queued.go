package agent

// What a queued delivery does differently. It waited in the relay while no
// agent was connected, and its sender got 202: nobody is waiting for its
// answer, and the relay keeps it until it is acknowledged (acks.go).
//
//   - It is judged at the time the relay received it (verify.go), and
//     re-signed with a fresh t when the secret is known (forward.go): the
//     receiver's 5-minute window may have closed on it.
//   - A write on its path that fails (its record, its attempt, its owed
//     state) does not cost it: the stage that made the write holds it
//     there (hold), its slot freed and its worker out of the pool, and
//     tries the write again once the disk takes writes; then the path
//     goes on, and only then is the relay acknowledged. A live delivery
//     is answered 503 instead: its sender sends it again.
//   - The held writes wait at one gate, the store's (storeGate), not each
//     on a backoff of its own: however many are held, the full disk gets
//     one failed write per backoff, not one per held delivery.
//   - A forward the receiver did not take is owed (owe.go): its retry
//     state is recorded before the ack, and retry.go retries it.

import (
	"slices"
	"sync"
	"time"
)

// holder is what a held delivery needs of the worker that runs it
// (workers.go).
type holder interface {
	// leave frees the delivery's slot and takes its worker out of the
	// pool, the first time it is called: waiting for the disk must not
	// take a slot from live deliveries, which are answered 503 meanwhile,
	// nor a worker, which the slot would wait for.
	leave()
	// connEnded is closed when the connection to the relay ends: the
	// relay sends a held delivery again on the next one, so it is dropped
	// here.
	connEnded() <-chan struct{}
	// handOnce hands on the worker's turn to read the connection, if it
	// still has it: the delivery is about to make a write that may wait
	// (a bbolt commit queues behind the journal's flush).
	handOnce()
}

// holdMaxBackoff caps the wait between two probes of the store's gate,
// so that the relay's queue moves again soon after room returns.
const holdMaxBackoff = 2 * time.Second

// hold tries write again, which just failed for a queued delivery, until
// it succeeds; meanwhile the delivery is counted as held (Health). It
// returns false when the connection ended first.
func (a *Agent) hold(h holder, write func() error) bool {
	h.leave()
	a.health.held.Add(1)
	ok := a.untilWritten(h.connEnded(), write)
	a.health.held.Add(-1)
	if ok {
		a.health.ok()
	}
	return ok
}

// storeGate is where the writes held for a full disk wait (untilWritten),
// so that the disk gets one write per backoff however many are held.
//
// A write that failed closes it, and joins the line of the writes waiting
// there. The first of the line probes: after a jittered wait that doubles
// from Config.MinBackoff up to holdMaxBackoff (and Config.MaxBackoff) it
// makes its own write again: a real write, the store's own, not a look at
// the free space, which a tmpfs, a quota or the blocks reserved for root
// make lie. When that succeeds the gate opens, and every write waiting
// there is made once; one that fails closes it again and joins the line.
// A probe that fails goes to the end of the line, and the next one probes
// after the next wait: each held write is tried in turn, so that a small
// one that fits is not kept waiting behind a large one that does not
// (the room a full disk gets back may be a little). The wait starts again
// from MinBackoff only once no write is held. A write whose connection
// ends leaves the line, handing on its turn. The probe runs on a held
// delivery's goroutine: the gate has none of its own.
type storeGate struct {
	mu      sync.Mutex
	shut    bool            // a write failed; no probe succeeded since
	opened  chan struct{}   // closed when the gate opens; a new one each time it shuts
	line    []chan struct{} // the writes waiting for their turn to probe, first first
	probing bool            // a write has the turn to probe
	waiting int             // the writes held at the gate
	wait    time.Duration   // the next probe's wait; 0: an episode starts
}

// joinLocked shuts the gate and puts turn, a waiting write's, at the end
// of the line; g.mu is held. It returns the channel closed when the gate
// opens.
func (g *storeGate) joinLocked(turn chan struct{}) <-chan struct{} {
	if !g.shut {
		g.shut = true
		g.opened = make(chan struct{})
	}
	g.line = append(g.line, turn)
	g.handLocked()
	return g.opened
}

// handLocked gives the turn to probe to the first of the line, when
// nobody has it; g.mu is held.
func (g *storeGate) handLocked() {
	if g.probing || len(g.line) == 0 {
		return
	}
	turn := g.line[0]
	g.line[0] = nil
	g.line = g.line[1:]
	g.probing = true
	turn <- struct{}{} // its own channel, empty: it has no turn but this one
}

// leaveLocked takes turn out of the line, handing on the turn to probe
// if it had it; g.mu is held.
func (g *storeGate) leaveLocked(turn chan struct{}) {
	if i := slices.Index(g.line, turn); i >= 0 {
		g.line = slices.Delete(g.line, i, i+1)
	}
	select {
	case <-turn:
		g.probing = false
		g.handLocked()
	default:
	}
}

// untilWritten makes write again, which just failed, until it succeeds
// (true) or done is closed (false), at the store's gate (storeGate): it
// waits in the gate's line until the gate opens, or its turn to probe
// comes, and then writes once; if that fails it joins the line again.
// Each failure is noted (health.failed).
func (a *Agent) untilWritten(done <-chan struct{}, write func() error) bool {
	g := &a.gate
	turn := make(chan struct{}, 1)
	g.mu.Lock()
	g.waiting++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		if g.waiting--; g.waiting == 0 {
			g.wait = 0 // the next episode probes from MinBackoff
		}
		g.mu.Unlock()
	}()
	for {
		g.mu.Lock()
		opened := g.joinLocked(turn)
		g.mu.Unlock()
		probe := false
		select {
		case <-done:
			g.mu.Lock()
			g.leaveLocked(turn)
			g.mu.Unlock()
			return false
		case <-opened: // the line was emptied; no turn was handed since
		case <-turn:
			probe = true
			if !a.gateWait(done) {
				g.mu.Lock()
				g.probing = false
				g.handLocked()
				g.mu.Unlock()
				return false
			}
		}
		err := write()
		if err == nil {
			if probe {
				g.mu.Lock()
				g.probing = false
				g.shut = false
				g.line = nil // each of them writes once
				close(g.opened)
				g.mu.Unlock()
			}
			return true
		}
		a.health.failed(err)
		if probe {
			g.mu.Lock()
			g.wait = min(g.wait*2, holdMaxBackoff, a.cfg.MaxBackoff)
			g.probing = false // joining again hands the turn on
			g.mu.Unlock()
		}
	}
}

// gateWait waits the gate's backoff before a probe; false when done is
// closed first.
func (a *Agent) gateWait(done <-chan struct{}) bool {
	g := &a.gate
	g.mu.Lock()
	if g.wait == 0 {
		g.wait = a.cfg.MinBackoff
	}
	wait := g.wait
	g.mu.Unlock()
	t := time.NewTimer(a.jitter(wait))
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}

// writeOrHold makes write, a write on p's path, noting whether recording
// works. When it fails for a queued delivery, the delivery is held until
// it succeeds (hold). It returns the error of a live delivery's write, or,
// with p.ended set, that of a queued one whose connection ended first.
func (a *Agent) writeOrHold(h holder, p *processed, write func() error) error {
	err := write()
	if err == nil {
		a.health.ok()
		return nil
	}
	a.health.failed(err)
	if p.Delivery.Queued {
		if a.hold(h, write) {
			return nil
		}
		p.ended = true
	}
	return err
}
