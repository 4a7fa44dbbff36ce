package relay

import (
	"context"

	"github.com/devhook/devhook"
)

// Which live deliveries wait behind a channel's queue.
//
// The agent forwards a run's deliveries in the order they come
// (agent/order.go), so the relay must not send a live run.status delivery
// ahead of an earlier one of its run still in the queue. While the queue
// holds deliveries not yet sent on a connection (agentConn.behind, see
// drain.go), a live run.status delivery is queued behind them (202,
// ErrQueueFirst) when its run has deliveries among them, and goes to the
// agent at once when it has none: a backlog holds up its own runs, not the
// channel. Every run.status delivery waits while the relay does not know
// the runs of what the queue holds (blind):
//
//   - from connect until the queue is counted, once the agent holds the
//     channel (agents.go: countQueue), and when it is not empty, until the
//     store has listed its runs (QueueRunCounter), or with a store that
//     cannot, until the queue is sent;
//   - after a Kick that does not say which run was queued (a Router that
//     is not a RunKicker tells the connection only that something was),
//     until the queue is sent.
//
// Once the drain has sent the queue to its end with no Kick meanwhile,
// nothing is behind and what was known starts again from nothing. The
// relay knows the queue's unsent run.status deliveries by id: those the
// store listed at connect, and each one this Server queues for the agent
// it holds through a RunKicker (KickRun), unless the drain has sent it already;
// one the drain sends is known no more (sent). So a delivery is never
// taken for another of its run. One known but no longer queued (parked,
// expired, removed after it was sent on this connection) makes its run's
// live deliveries wait until the queue is sent, never less.

// behindState is what the relay knows of the runs of a connection's
// queue, under agentConn.mu.
type behindState struct {
	blind  bool              // runs of unsent deliveries are unknown: every run.status waits
	blinds uint64            // Kicks that did not say the run
	ids    map[string]string // queued run.status delivery not yet sent → its run
	runs   map[string]int    // run → its deliveries in ids
	count  bool              // the store is yet to list the queue's runs (at connect)
	// listed is closed once the store has listed the queue's runs, or
	// cannot: a live run.status delivery waits for it rather than be
	// queued only because the list is not read yet. nil: nothing to wait
	// for.
	listed chan struct{}
}

// add knows delivery id, of run, as queued and not yet sent.
func (b *behindState) add(id, run string) {
	if _, ok := b.ids[id]; ok {
		return
	}
	if b.ids == nil {
		b.ids, b.runs = make(map[string]string), make(map[string]int)
	}
	b.ids[id] = run
	b.runs[run]++
}

// drop forgets delivery id: it was sent.
func (b *behindState) drop(id string) {
	run, ok := b.ids[id]
	if !ok {
		return
	}
	delete(b.ids, id)
	if n := b.runs[run]; n > 1 {
		b.runs[run] = n - 1
	} else {
		delete(b.runs, run)
	}
}

// RunKicker is a Router that can tell the agent holding a channel which
// delivery was queued, and of which run, wherever the agent is: its
// connection then holds behind the queue only that run's live run.status
// deliveries, not every run's (KickRun of a RunEndpoint). Hub implements
// it, and so does the cluster's router (across instances). Optional:
// through a Router without it, the connection learns only that something
// was queued (Kick), and every run.status delivery waits until the queue
// is sent.
type RunKicker interface {
	KickRun(channel, id, run string)
}

// RunEndpoint is an Endpoint that can be told which delivery was queued,
// of which run ("" for one that is not a run.status): the relay Server's
// connections are. A RunKicker calls it, or Kick for an Endpoint without
// it.
type RunEndpoint interface {
	KickRun(id, run string)
}

// kick tells the agent holding d's channel that d was queued, with its
// run when the Router can say it.
func (s *Server) kick(d *devhook.Delivery) {
	if rk, ok := s.router.(RunKicker); ok {
		rk.KickRun(d.Channel, d.ID, devhook.ParseEvent(d.Body).RunID)
		return
	}
	s.router.Kick(d.Channel)
}

// Kick implements Endpoint: something was queued for the channel, of a
// run it does not say: every run.status delivery waits until the queue
// is sent.
func (c *agentConn) Kick() {
	c.mu.Lock()
	c.bh.blinds++
	c.bh.blind = true
	c.queuedLocked()
	c.mu.Unlock()
	c.kickDrain()
}

// KickRun implements RunEndpoint: Kick for delivery id of run ("" for
// one that is not a run.status).
func (c *agentConn) KickRun(id, run string) {
	c.mu.Lock()
	// In flight: the drain read and sent it before this kick.
	if run != "" && !c.inflight[id] && !c.acked[id] {
		c.bh.add(id, run)
	}
	c.queuedLocked()
	c.mu.Unlock()
	c.kickDrain()
}

// queuedLocked notes that a delivery was queued: the queue is behind, and
// the drain reads it again from its start unless the store queues in
// arrival order (drain.go). Called under c.mu.
func (c *agentConn) queuedLocked() {
	c.behind = true
	c.kicks++
	if _, appends := c.s.cfg.Store.(ArrivalOrder); !appends {
		c.dr.rescan = true
	}
}

// holds reports whether a live delivery with body must be queued behind
// the channel's queue: a run.status delivery of a run with deliveries not
// yet sent, or of any run while their runs are unknown. Just after
// connect, it first waits for the store's list of the queue's runs (one
// read of the queue), unless ctx ends or the connection does first: then
// the delivery is queued.
func (c *agentConn) holds(ctx context.Context, body []byte) bool {
	c.mu.Lock()
	behind, listed := c.behind, c.bh.listed
	c.mu.Unlock()
	if !behind {
		return false
	}
	run := devhook.ParseEvent(body).RunID
	if run == "" {
		return false
	}
	if listed != nil {
		select {
		case <-listed:
		case <-ctx.Done():
			return true
		case <-c.done:
			return true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.behind && (c.bh.blind || c.bh.runs[run] > 0)
}

// countRuns has the store list the runs of the queue, once, at the
// drain's first pass after connect, before it sends anything. Without a
// store that can, or when it fails, every run.status delivery waits until
// the queue is sent.
func (c *agentConn) countRuns() {
	c.mu.Lock()
	todo := c.bh.count
	c.bh.count = false
	blinds := c.bh.blinds
	c.mu.Unlock()
	if !todo {
		return
	}
	defer close(c.bh.listed)
	rc, ok := c.s.cfg.Store.(QueueRunCounter)
	if !ok {
		return
	}
	runs, err := rc.QueuedRuns(c.channel)
	if err != nil {
		c.s.logStore("relay: channel %s: list the runs of the queue: %v; every run.status delivery waits behind the queue until it is sent", c.channel, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, run := range runs {
		c.bh.add(id, run)
	}
	if c.bh.blinds == blinds {
		c.bh.blind = false
	}
}

// sent forgets deliveries ds, written to the agent: a live delivery of
// their runs may follow them.
func (c *agentConn) sent(ds []*devhook.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bh.ids) == 0 {
		return
	}
	for _, d := range ds {
		c.bh.drop(d.ID)
	}
}

// caughtUpLocked is called when the queue has been sent to its end with
// no Kick meanwhile: nothing is behind. Called under c.mu.
func (c *agentConn) caughtUpLocked() {
	c.behind = false
	c.bh.blind = false
	clear(c.bh.ids)
	clear(c.bh.runs)
}
