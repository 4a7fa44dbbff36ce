package relay

import (
	"errors"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
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
// A read of the queue that fails is tried again after a backoff (RetryMin
// doubling to RetryMax, with jitter: retry.go), counted in /metrics and
// logged once with a count: the queue moves again by itself once the
// store reads, without waiting for a new delivery, an ack or a reconnect.
// Kicks meanwhile (acks, deliveries queued) do not read it sooner.
//
// An ack removes its delivery from the store on a goroutine of its own
// (removeLoop), not on the connection's only reader: a removal waiting
// for an fsync or a NATS round trip holds up no live answer. The
// delivery stays in flight until its removal is done, so that a drain
// pass meanwhile does not send it again. A removal that fails leaves the
// delivery as it was, in the queue and in flight: it is neither sent
// again on this connection nor forgotten; the removal is tried again
// after a backoff (as a read), counted and logged once with a count, and
// devhook_relay_queue_acked_total counts only what was removed. While
// removals fail, the window fills with deliveries the agent has, so the
// drain sends no more. When the connection ends, each removal still to
// do is tried once more; those that fail stay queued and go to the
// channel's next connection again (at least once, once per connection).
//
// A delivery that can never be sent is parked; when the store cannot
// park it, it is skipped on this connection (the queue behind it goes on)
// and parking it is tried again after a backoff.

// drainState is what a connection's drain and removals keep, under
// agentConn.mu.
type drainState struct {
	read      retry     // reads of the queue
	readAfter time.Time // no read before: a failed read's wait
	park      retry     // parks of deliveries that can never be sent
	parkAfter time.Time // stuck deliveries are not parked again before
	timer     *time.Timer
	timerAt   time.Time // when timer kicks the drain; zero when not armed

	removals []string        // acknowledged queued deliveries to remove, in the order of their acks
	toRemove map[string]bool // ids in removals or being removed (true: a removal failed)
	removing bool            // a removal goroutine runs
	remove   retry           // removals
}

// stop stops the drain's timer: the connection ended. Called under
// agentConn.mu.
func (d *drainState) stop() {
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timerAt = time.Time{}
}

// wakeAt has the drain kicked at t, or sooner if it is to be already.
// Called under c.mu.
func (c *agentConn) wakeAt(t time.Time) {
	d := &c.dr
	if c.gone || (!d.timerAt.IsZero() && !d.timerAt.After(t)) {
		return
	}
	d.timerAt = t
	wait := time.Until(t)
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, c.timerKick)
	} else {
		d.timer.Reset(wait)
	}
}

// timerKick is the drain's timer: the end of a wait.
func (c *agentConn) timerKick() {
	c.mu.Lock()
	c.dr.timerAt = time.Time{}
	c.mu.Unlock()
	c.kickDrain()
}

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
	if len(c.stuck) > 0 {
		if time.Now().Before(c.dr.parkAfter) {
			c.wakeAt(c.dr.parkAfter)
		} else {
			clear(c.stuck) // parked again as this pass meets them
		}
	}
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
		wait := time.Now().Before(c.dr.readAfter)
		if wait {
			c.wakeAt(c.dr.readAfter)
		}
		c.mu.Unlock()
		if room <= 0 {
			return true // an ack's removal will kick again
		}
		if wait {
			return true // a failed read: the timer kicks again
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
			if !c.isStuck(bad.ID) {
				c.park(bad.ID, bad.Error())
			}
			continue
		}
		if len(batch) < limit {
			c.caughtUp()
			return true
		}
	}
}

// readFailed counts a failed read of the queue, logs it (once with a
// count while it goes on), and has the drain read again after the
// backoff.
func (c *agentConn) readFailed(err error) {
	c.s.metrics.readErrors.Inc()
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	wait, log := c.dr.read.fail(now)
	fails, since := c.dr.read.fails, c.dr.read.since
	c.dr.readAfter = now.Add(wait)
	c.wakeAt(c.dr.readAfter)
	c.mu.Unlock()
	if !log {
		return
	}
	if fails == 1 {
		c.s.cfg.Logf("relay: channel %s: read queue: %v; reading it again in %s, then less and less often (at most every %s) until it works", c.channel, err, wait.Round(time.Millisecond), RetryMax)
		return
	}
	c.s.cfg.Logf("relay: channel %s: read queue: still failing: %d failures in %s: %v", c.channel, fails, now.Sub(since).Round(time.Second), err)
}

// readOK resets the backoff after a read of the queue that worked.
func (c *agentConn) readOK() {
	c.mu.Lock()
	fails, since := c.dr.read.ok()
	c.mu.Unlock()
	if fails > 0 {
		c.s.cfg.Logf("relay: channel %s: read queue: works again after %d failures in %s", c.channel, fails, time.Since(since).Round(time.Millisecond))
	}
}

// remove has acknowledged delivery id removed from the store, in the order
// the acks came, by a goroutine that runs only while there are removals.
func (c *agentConn) remove(id string) {
	c.mu.Lock()
	d := &c.dr
	if _, ok := d.toRemove[id]; ok {
		c.mu.Unlock()
		return
	}
	if d.toRemove == nil {
		d.toRemove = make(map[string]bool)
	}
	d.toRemove[id] = false
	d.removals = append(d.removals, id)
	if d.removing {
		c.mu.Unlock()
		return
	}
	d.removing = true
	c.s.wg.Add(1) // the reader holds the Server's wg: not at zero
	c.mu.Unlock()
	go func() { defer c.s.wg.Done(); c.removeLoop() }()
}

// removeLoop removes acknowledged deliveries until there are none left,
// kicking the drain after each: the window has room again. A removal
// that fails is tried again after the backoff, before those behind it.
// Removals go on after the connection ends: the agent has those
// deliveries; but one that fails then is tried once more, not again.
func (c *agentConn) removeLoop() {
	for {
		c.mu.Lock()
		if len(c.dr.removals) == 0 {
			c.dr.removing = false
			c.mu.Unlock()
			return
		}
		id := c.dr.removals[0]
		c.mu.Unlock()
		err := c.s.cfg.Store.Dequeue(c.channel, id)
		if err == nil {
			c.removed(id)
			continue
		}
		wait, gone := c.removeFailed(id, err)
		if !gone {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-c.done:
				t.Stop()
			}
		}
		c.giveUpRemovals(id, err)
		return
	}
}

// removed counts delivery id, the first of the removals, removed: it
// leaves the in-flight set, and the drain may send more.
func (c *agentConn) removed(id string) {
	c.s.metrics.acked.Inc()
	c.mu.Lock()
	d := &c.dr
	if d.toRemove[id] {
		c.s.metrics.removalsWaiting.Dec()
	}
	d.removals = d.removals[1:]
	delete(d.toRemove, id)
	delete(c.inflight, id)
	c.acked[id] = true
	fails, since := d.remove.ok()
	c.mu.Unlock()
	if fails > 0 {
		c.s.cfg.Logf("relay: channel %s: removing acknowledged deliveries from the queue works again after %d failures in %s", c.channel, fails, time.Since(since).Round(time.Millisecond))
	}
	c.kickDrain()
}

// removeFailed counts a failed removal of delivery id, which stays queued
// and in flight, and logs it (once with a count while it goes on). It
// returns the wait before it is tried again, or gone when the connection
// has ended.
func (c *agentConn) removeFailed(id string, err error) (wait time.Duration, gone bool) {
	c.s.metrics.removeErrors.Inc()
	c.mu.Lock()
	d := &c.dr
	if !d.toRemove[id] {
		d.toRemove[id] = true
		c.s.metrics.removalsWaiting.Inc()
	}
	now := time.Now()
	wait, log := d.remove.fail(now)
	fails, since := d.remove.fails, d.remove.since
	gone = c.gone
	c.mu.Unlock()
	switch {
	case !log || gone:
	case fails == 1:
		c.s.cfg.Logf("relay: channel %s: remove acknowledged delivery %s from the queue: %v; it is not sent again meanwhile; trying again in %s, then less and less often (at most every %s) until it works",
			c.channel, id, err, wait.Round(time.Millisecond), RetryMax)
	default:
		c.s.cfg.Logf("relay: channel %s: remove acknowledged deliveries from the queue: still failing: %d failures in %s: %v", c.channel, fails, now.Sub(since).Round(time.Second), err)
	}
	return wait, gone
}

// giveUpRemovals is called when the connection has ended and the removal
// of delivery id, the first of the removals, failed with err: each other
// removal still to do is tried once more, and the deliveries that could
// not be removed stay queued, for the channel's next connection.
func (c *agentConn) giveUpRemovals(id string, err error) {
	c.mu.Lock()
	d := &c.dr
	ids := d.removals
	d.removals = nil
	c.mu.Unlock()
	left := 0
	for _, rid := range ids {
		removed := false
		if rid != id {
			if err2 := c.s.cfg.Store.Dequeue(c.channel, rid); err2 == nil {
				removed = true
				c.s.metrics.acked.Inc()
			} else {
				err = err2
				c.s.metrics.removeErrors.Inc()
			}
		}
		if !removed {
			left++
		}
		c.mu.Lock()
		if d.toRemove[rid] {
			c.s.metrics.removalsWaiting.Dec()
		}
		delete(d.toRemove, rid)
		c.mu.Unlock()
	}
	c.mu.Lock()
	fails, _ := d.remove.ok()
	if len(d.removals) > 0 {
		// Acks read as the connection ended.
		c.s.wg.Add(1) // this goroutine holds the Server's wg: not at zero
		go func() { defer c.s.wg.Done(); c.removeLoop() }()
	} else {
		d.removing = false
	}
	c.mu.Unlock()
	c.s.cfg.Logf("relay: channel %s: the agent's connection ended while removing acknowledged deliveries from the queue failed (%d failures; %v): %d stay queued and go to the channel's next agent again",
		c.channel, fails, err, left)
}

// isStuck reports whether delivery id could be neither sent nor parked
// on this connection, and waits for its park to be tried again.
func (c *agentConn) isStuck(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stuck[id]
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
	hdr, err := wire.AppendFrame(nil, wire.DeliverHeader(d), nil)
	if err != nil {
		c.mu.Lock()
		delete(c.inflight, d.ID)
		c.mu.Unlock()
		c.park(d.ID, "it cannot be sent to the agent: "+err.Error())
		return true
	}
	return c.write(hdr, d.Body) == nil
}

// park moves delivery id aside, saying why in the log. When the store
// cannot park it, it is skipped on this connection until parking it is
// tried again, after the backoff.
func (c *agentConn) park(id, why string) {
	err := c.s.cfg.Store.Park(c.channel, id, why)
	c.mu.Lock()
	if err == nil {
		fails, since := c.dr.park.ok()
		c.mu.Unlock()
		if fails > 0 {
			c.s.cfg.Logf("relay: channel %s: parking deliveries works again after %d failures in %s", c.channel, fails, time.Since(since).Round(time.Millisecond))
		}
		c.s.cfg.Logf("relay: channel %s: delivery %s parked, the rest of the queue goes on: %s", c.channel, id, why)
		return
	}
	if c.stuck == nil {
		c.stuck = make(map[string]bool)
	}
	c.stuck[id] = true
	now := time.Now()
	wait, log := c.dr.park.fail(now)
	fails, since := c.dr.park.fails, c.dr.park.since
	c.dr.parkAfter = now.Add(wait)
	c.wakeAt(c.dr.parkAfter)
	c.mu.Unlock()
	c.s.metrics.parkErrors.Inc()
	switch {
	case !log:
	case fails == 1:
		c.s.cfg.Logf("relay: channel %s: delivery %s is skipped (%s) but could not be parked: %v; parking it again in %s, then less and less often (at most every %s) until it works",
			c.channel, id, why, err, wait.Round(time.Millisecond), RetryMax)
	default:
		c.s.cfg.Logf("relay: channel %s: park deliveries that can never be sent: still failing: %d failures in %s: %v", c.channel, fails, now.Sub(since).Round(time.Second), err)
	}
}
