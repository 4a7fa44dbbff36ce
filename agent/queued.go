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
// A write that failed closes it. One of the writes waiting at it, the
// first to find nobody probing, is the gate's prober: it tries its own
// write again after a jittered wait that doubles from Config.MinBackoff
// up to holdMaxBackoff (and Config.MaxBackoff). That write is a real one,
// the store's own, not a look at the free space, which a tmpfs, a quota
// or the blocks reserved for root make lie. When it succeeds the gate
// opens, and every write waiting there is tried once; one that fails
// closes the gate again and waits, and one of those waiting probes, on
// the same backoff: it starts again from MinBackoff only once no write is
// held. A prober whose connection ends (done) hands the probe on to
// another. No goroutine of its own: the prober is a held delivery's.
type storeGate struct {
	mu      sync.Mutex
	shut    bool          // a write failed; no probe succeeded since
	changed chan struct{} // closed when the gate opens or its prober leaves
	probing bool          // one of the waiting writes probes
	waiting int           // the writes held at the gate
	wait    time.Duration // the prober's next wait; 0: an episode starts
}

// shutLocked closes the gate; g.mu is held.
func (g *storeGate) shutLocked() {
	if !g.shut {
		g.shut = true
		g.changed = make(chan struct{})
	}
}

// wake tells the writes waiting that the gate opened or needs a prober;
// g.mu is held.
func (g *storeGate) wakeLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// untilWritten makes write again, which just failed, until it succeeds
// (true) or done is closed (false), at the store's gate (storeGate): it
// waits for the gate to open, or probes it, then writes once, and waits
// again if that fails. Each failure is noted (health.failed).
func (a *Agent) untilWritten(done <-chan struct{}, write func() error) bool {
	g := &a.gate
	g.mu.Lock()
	g.waiting++
	g.shutLocked()
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
		switch {
		case !g.shut:
			g.mu.Unlock()
		case !g.probing:
			g.probing = true
			g.mu.Unlock()
			return a.probeGate(done, write)
		default:
			changed := g.changed
			g.mu.Unlock()
			select {
			case <-done:
				return false
			case <-changed:
			}
			continue
		}
		err := write()
		if err == nil {
			return true
		}
		a.health.failed(err)
		g.mu.Lock()
		g.shutLocked()
		g.mu.Unlock()
	}
}

// probeGate is untilWritten for the gate's prober: it makes write after
// the gate's backoff until it succeeds, and then opens the gate, or until
// done, and then hands the probe on.
func (a *Agent) probeGate(done <-chan struct{}, write func() error) bool {
	g := &a.gate
	for {
		g.mu.Lock()
		if g.wait == 0 {
			g.wait = a.cfg.MinBackoff
		}
		t := time.NewTimer(a.jitter(g.wait))
		g.mu.Unlock()
		select {
		case <-done:
			t.Stop()
			g.mu.Lock()
			g.probing = false
			g.wakeLocked() // another one probes
			g.mu.Unlock()
			return false
		case <-t.C:
		}
		err := write()
		g.mu.Lock()
		if err == nil {
			g.probing = false
			if g.shut {
				g.shut = false
				g.wakeLocked()
			}
			g.mu.Unlock()
			return true
		}
		g.wait = min(g.wait*2, holdMaxBackoff, a.cfg.MaxBackoff)
		g.mu.Unlock()
		a.health.failed(err)
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
