package relay

import (
	"errors"
	"time"

	"github.com/devhook/devhook"
)

// Deliveries queued while a channel had no agent reach it through its
// connection's drain: a goroutine, running only while there is queue
// work, that sends what the Store holds beyond what is in flight, in the
// order the Store returns them (id order; a cluster's, the order they
// were queued), at most Window unacknowledged at once, and parks a
// delivery that can never be sent, so that the queue behind it goes on.
// The agent forwards a run's deliveries in the order they arrive
// (agent/order.go). So that a live delivery does not overtake an earlier
// one of its run still in the queue, live run.status deliveries (those
// with a run_id) are queued too (202) while the queue holds deliveries
// not yet sent (agentConn.behind: from connect, when the queue is not
// empty, and from each Kick, until a pass sends the queue to its end);
// then they go to the agent after the queued ones, on the same WebSocket.
// Other live deliveries go to the agent at once, as before.
//
// A read of the queue that fails is tried again after a backoff, from
// drainRetryMin doubling to drainRetryMax, with a log line and a count in
// /metrics: the queue moves again by itself once the store reads, without
// waiting for a new delivery, an ack or a reconnect.
//
// An ack removes its delivery from the store on a goroutine of its own
// (removeLoop), not on the connection's only reader: a removal waiting
// for an fsync or a NATS round trip holds up no live answer. The
// delivery stays in flight until its removal is done, so that a drain
// pass meanwhile does not send it again.

// Bounds of the wait before the drain reads a channel's queue again after
// a failed read.
const (
	drainRetryMin = 50 * time.Millisecond
	drainRetryMax = 5 * time.Second
)

// kickDrain makes sure a drain pass runs after this call. The drain
// goroutine exists only while there is queue work.
func (c *agentConn) kickDrain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drainAgain = true
	if c.draining || c.gone {
		return
	}
	c.draining = true
	c.s.wg.Add(1)
	go func() { defer c.s.wg.Done(); c.drainLoop() }()
}

// drainBatch bounds the queued deliveries (bodies included) read from the
// store at once.
const drainBatch = 8

// drainLoop sends queued deliveries, at most Window unacknowledged at once,
// for as long as it is kicked: at connect, after each ack of a queued
// delivery, after each enqueue. Whatever happens to one delivery, the
// drain state is reset when it returns.
func (c *agentConn) drainLoop() {
	for c.nextPass() {
		if !c.drainPass() {
			break // the connection failed
		}
	}
}

// nextPass reports whether the drain goroutine should make another pass,
// and clears draining, atomically, when it should not.
func (c *agentConn) nextPass() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.drainAgain || c.gone {
		c.draining = false
		return false
	}
	c.drainAgain = false
	c.passKicks = c.kicks
	clear(c.acked)
	return true
}

// caughtUp is called when a drain pass has sent the queue to its end:
// live deliveries go to the agent again, unless a delivery was queued
// since the pass began.
func (c *agentConn) caughtUp() {
	c.mu.Lock()
	if c.kicks == c.passKicks {
		c.behind = false
	}
	c.mu.Unlock()
}

// drainPass sends what the queue holds beyond what is in flight. It
// returns false when the connection failed.
func (c *agentConn) drainPass() bool {
	after := ""
	for {
		c.mu.Lock()
		room := c.s.cfg.Window - len(c.inflight)
		c.mu.Unlock()
		if room <= 0 {
			return true // an ack will kick again
		}
		limit := min(room, drainBatch)
		batch, err := c.s.cfg.Store.Queued(c.channel, after, limit)
		var bad *UnreadableError
		if err != nil && !errors.As(err, &bad) {
			c.readFailed(err)
			return true
		}
		c.readOK()
		for _, d := range batch {
			after = d.ID
			if !c.sendQueued(d) {
				return false
			}
		}
		if bad != nil {
			after = bad.ID
			c.park(bad.ID, bad.Error())
			continue
		}
		if len(batch) < limit {
			c.caughtUp()
			return true
		}
	}
}

// readFailed counts and logs a failed read of the queue, and kicks the
// drain again after the backoff.
func (c *agentConn) readFailed(err error) {
	c.s.metrics.readErrors.Inc()
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return
	}
	c.readWait = min(max(2*c.readWait, drainRetryMin), drainRetryMax)
	wait := c.readWait
	if c.readRetry == nil {
		c.readRetry = time.AfterFunc(wait, c.kickDrain)
	} else {
		c.readRetry.Reset(wait)
	}
	c.mu.Unlock()
	c.s.cfg.Logf("relay: channel %s: read queue: %v; reading it again in %s", c.channel, err, wait)
}

// readOK resets the backoff after a read of the queue that worked.
func (c *agentConn) readOK() {
	c.mu.Lock()
	c.readWait = 0
	c.mu.Unlock()
}

// remove has acknowledged delivery id removed from the store, in the order
// the acks came, by a goroutine that runs only while there are removals.
func (c *agentConn) remove(id string) {
	c.mu.Lock()
	if c.toRemove[id] {
		c.mu.Unlock()
		return
	}
	if c.toRemove == nil {
		c.toRemove = make(map[string]bool)
	}
	c.toRemove[id] = true
	c.removals = append(c.removals, id)
	if c.removing {
		c.mu.Unlock()
		return
	}
	c.removing = true
	c.s.wg.Add(1) // the reader holds the Server's wg: not at zero
	c.mu.Unlock()
	go func() { defer c.s.wg.Done(); c.removeLoop() }()
}

// removeLoop removes acknowledged deliveries until there are none left,
// kicking the drain after each: the window has room again. Removals go on
// after the connection ends: the agent has those deliveries.
func (c *agentConn) removeLoop() {
	for {
		c.mu.Lock()
		ids := c.removals
		c.removals = nil
		if len(ids) == 0 {
			c.removing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		for _, id := range ids {
			if err := c.s.cfg.Store.Dequeue(c.channel, id); err != nil {
				c.s.cfg.Logf("relay: channel %s: dequeue %s: %v", c.channel, id, err)
			}
			c.s.metrics.acked.Inc()
			c.mu.Lock()
			delete(c.inflight, id)
			delete(c.toRemove, id)
			c.acked[id] = true
			c.mu.Unlock()
			c.kickDrain()
		}
	}
}

// sendQueued sends queued delivery d unless it is in flight already. A
// delivery that cannot be framed is parked, never retried: the queue
// behind it goes on. It returns false when the connection failed.
func (c *agentConn) sendQueued(d *devhook.Delivery) bool {
	c.mu.Lock()
	skip := c.inflight[d.ID] || c.acked[d.ID] || c.stuck[d.ID]
	gone := c.gone
	if !skip && !gone {
		c.inflight[d.ID] = true
	}
	c.mu.Unlock()
	if gone {
		return false
	}
	if skip {
		return true
	}
	d.Queued = true
	hdr, err := AppendFrame(nil, deliverHeader(d), nil)
	if err != nil {
		c.mu.Lock()
		delete(c.inflight, d.ID)
		c.mu.Unlock()
		c.park(d.ID, "it cannot be sent to the agent: "+err.Error())
		return true
	}
	return c.write(hdr, d.Body) == nil
}

// park moves delivery id aside, saying why in the log.
func (c *agentConn) park(id, why string) {
	if err := c.s.cfg.Store.Park(c.channel, id, why); err != nil {
		c.s.cfg.Logf("relay: channel %s: delivery %s is skipped (%s) but could not be parked: %v", c.channel, id, why, err)
		c.mu.Lock()
		if c.stuck == nil {
			c.stuck = make(map[string]bool)
		}
		c.stuck[id] = true
		c.mu.Unlock()
		return
	}
	c.s.cfg.Logf("relay: channel %s: delivery %s parked, the rest of the queue goes on: %s", c.channel, id, why)
}
