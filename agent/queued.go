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
//     tries the write again until the disk takes it; then the path goes
//     on, and only then is the relay acknowledged. A live delivery is
//     answered 503 instead: its sender sends it again.
//   - A forward the receiver did not take is owed (owe.go): its retry
//     state is recorded before the ack, and retry.go retries it.

import (
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

// holdMaxBackoff caps the wait between two tries of a held write, so that
// the relay's queue moves again soon after room returns.
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

// untilWritten tries write again after a jittered wait that doubles from
// Config.MinBackoff up to holdMaxBackoff, until it succeeds (true) or done
// is closed (false). Each failure is noted (health.failed).
func (a *Agent) untilWritten(done <-chan struct{}, write func() error) bool {
	wait := a.cfg.MinBackoff
	for {
		t := time.NewTimer(a.jitter(wait))
		select {
		case <-done:
			t.Stop()
			return false
		case <-t.C:
		}
		err := write()
		if err == nil {
			return true
		}
		a.health.failed(err)
		wait = min(wait*2, holdMaxBackoff, a.cfg.MaxBackoff)
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
