package agent

// Order: a run's deliveries one after the other, in the order they came;
// different runs in parallel.
//
// The service never sends a run's next status before the previous one's
// first attempt finished, and receivers rely on it. Deliveries that waited
// in the relay's queue come in a burst, in the order they were queued, up
// to the relay's window at once: handled each on its own worker, a run's
// succeeded could overtake its queued. So the deliveries of one run (the
// same run_id in the run.status body; without one, the same path) are
// handled one after the other, in the order they came from the relay,
// and different runs in parallel:
//
//   - A queued delivery takes its run's line (orderLines): while one of a
//     run's deliveries is under way, the next ones of the run wait in the
//     line, holding no worker, and the worker that finishes one goes on
//     with the next.
//   - A live delivery waits in the line only when its run has one; with
//     none, it goes at once, beside the other live ones, as its sender
//     sent it: a sender that waits for each answer keeps its own order.
//     A live delivery with no run_id is never held: its sender is
//     waiting, and the relay does not queue it behind a backlog either
//     (relay/drain.go); the path orders only queued ones.
//   - A delivery the agent owes the receiver (owe.go) holds its run's
//     place: a later delivery of the run is not forwarded before it, but
//     owed behind it (oweBehind, the stage of a delivery's path after its
//     record), and the retries of a run go in order, one at a time
//     (retry.go).

import (
	"sync"

	"github.com/devhook/devhook"
)

// oweBehind is the order stage of d's path (live.go): a delivery of a run
// that has one owed to the receiver is not forwarded before it, but owed
// behind it, recorded so (its retry state), and its sender, when it is a
// live one, gets 202 as from the relay's queue: devhook keeps it. It
// returns whether d was kept back, or its place could not be recorded: a
// live one is then answered 503, a queued one held (queued.go). It sets
// p.key, d's run, for the stages after it, when any delivery is owed (with
// none, owe.go takes it when it needs it).
func (a *Agent) oweBehind(h holder, p *processed) bool {
	d := p.Delivery
	if !d.Queued && d.Event.RunID == "" {
		return false // a live delivery of no run goes as its sender sent it
	}
	if a.owed.empty() {
		return false // nothing owed to wait behind: no key built
	}
	p.key = orderKey(d)
	now := a.cfg.Now()
	if !a.owed.reserve(d.ID, p.key, now) {
		return false
	}
	st := devhook.RetryState{State: devhook.RetryOwed, Since: now, Route: d.Route}
	// A bbolt commit, which may wait for the journal's flush: nobody
	// else would read the connection meanwhile.
	h.handOnce()
	if err := a.writeOrHold(h, p, func() error { return a.cfg.Store.PutRetry(d.ID, st) }); err != nil {
		a.owed.unreserve(d.ID)
		if !p.ended {
			p.failure = "devhook could not record the delivery's place behind an earlier one of its run: " + shortCause(err) + "; not forwarded"
			p.Error = "could not record that the delivery is owed behind an earlier one of its run: " + err.Error() + "; answered 503, not forwarded"
		}
		return true
	}
	p.Owed, p.Behind, p.behind = true, true, true
	a.owed.add(d.ID, p.key, st.Route, now, now, false)
	a.publishRetry(d, nil, &st)
	a.publishHealth()
	return true
}

// orderKey is what orders d among the deliveries of its channel: its run,
// or without one its path; and the target its route chose (d.Route), when
// that is not the --forward targets: each receiver gets a run's
// deliveries in order, and one that is down holds up no other.
func orderKey(d *devhook.Delivery) string {
	k := "path " + d.Path
	if d.Event.RunID != "" {
		k = "run " + d.Event.RunID
	}
	if t := targetKey(d.Route); t != "" {
		k += " to " + t
	}
	return k
}

// job is a delivery to handle, and whether it holds its run's line.
type job struct {
	d     *devhook.Delivery
	key   string
	holds bool // the next of the line starts once it is done
	// sender: how long the relay waits for a live delivery's answer
	// (late.go); zero when unknown.
	sender senderWait
}

// orderLines are the runs that have a delivery under way: for each, the
// deliveries waiting behind it, in the order they came.
type orderLines struct {
	// route, when set, chooses a delivery's route (Agent.routeOf) before
	// its key is taken.
	route  func(*devhook.Delivery) *devhook.Route
	mu     sync.Mutex
	lines  map[string]*orderLine
	closed bool // the connection ended: what waits is dropped
}

type orderLine struct {
	waiting []job
}

// admit takes j's delivery as it comes from the relay. It returns the job
// to start now, or false when it waits in its run's line.
func (o *orderLines) admit(j job) (job, bool) {
	d := j.d
	o.mu.Lock()
	defer o.mu.Unlock()
	if !d.Queued && len(o.lines) == 0 {
		return j, true // no line at all: a live delivery goes
	}
	d.Event = devhook.ParseEvent(d.Body)
	if !d.Queued && d.Event.RunID == "" {
		return j, true // a live delivery of no run goes as it was sent
	}
	if o.route != nil {
		o.route(d)
	}
	j.key = orderKey(d)
	if l := o.lines[j.key]; l != nil {
		l.waiting = append(l.waiting, j)
		return job{}, false
	}
	if !d.Queued {
		return j, true
	}
	if o.lines == nil {
		o.lines = make(map[string]*orderLine)
	}
	o.lines[j.key] = &orderLine{}
	j.holds = true
	return j, true
}

// next is called when j is done: it returns the next delivery of j's line,
// which now holds it, or false when the line is empty (and gone) or j
// held none.
func (o *orderLines) next(j job) (job, bool) {
	if !j.holds {
		return job{}, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.lines[j.key]
	if l == nil {
		return job{}, false
	}
	if len(l.waiting) == 0 || o.closed {
		delete(o.lines, j.key)
		return job{}, false
	}
	nj := l.waiting[0]
	l.waiting[0] = job{}
	l.waiting = l.waiting[1:]
	nj.key, nj.holds = j.key, true
	return nj, true
}

// close drops the deliveries waiting: the connection ended, and the relay
// sends the queued ones again on the next one (a live one's sender gets
// 202 from the relay, which queues it).
func (o *orderLines) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for _, l := range o.lines {
		clear(l.waiting)
		l.waiting = nil
	}
}
