package relay

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// Deliveries queued while a channel had no agent reach it through its
// connection's drain: a goroutine, running only while there is queue
// work, that sends what the Store holds beyond what is in flight, in the
// order the Store returns them (id order; a cluster's, the order they
// were queued), at most Window unacknowledged at once (and at most Window
// more acknowledged whose removal is still being made), and parks a
// delivery that can never be sent, so that the queue behind it goes on.
// It reads on from the last delivery it read (its cursor), a few at a
// time, and sends each batch read in one write. The queue is read again
// from its start only when a delivery may have been queued before the
// cursor: after a Kick, unless the Store queues in arrival order
// (ArrivalOrder), and when a delivery that could not be parked is tried
// again.
//
// The agent forwards a run's deliveries in the order they arrive
// (agent/order.go), different runs in parallel: the drain sends the queue
// in its order, whatever the runs, and the window keeps as many runs in
// flight as it holds. So that a live delivery does not overtake an
// earlier one of its run still in the queue, live run.status deliveries
// (those with a run_id) of the runs the queue holds are queued too (202)
// while the queue holds deliveries not yet sent (agentConn.behind: from
// connect, when the queue is not empty, and from each Kick, until a read
// reaches the queue's end with no Kick while it read; which runs wait:
// behind.go); then they go to the agent after the queued ones, on the
// same WebSocket. Other live deliveries go to the agent at once.
//
// A read of the queue that fails is tried again after a backoff (RetryMin
// doubling to RetryMax, with jitter: retry.go), counted in /metrics and
// logged once with a count: the queue moves again by itself once the
// store reads, without waiting for a new delivery, an ack or a reconnect.
// Kicks meanwhile (acks, deliveries queued) do not read it sooner.
//
// Acks remove their deliveries from the store on a goroutine of their
// own (removeLoop), not on the connection's only reader: a removal
// waiting for an fsync or a NATS round trip holds up no live answer. The
// acks that arrive while a removal is being made are removed together by
// the next one (Store.Dequeue of many ids: one transaction, one fsync),
// so that removals keep up with the agent however slow one is. A
// delivery stays in flight until its removal is done, so that a drain
// pass meanwhile does not send it again. A removal that fails leaves its
// deliveries as they were, in the queue and in flight: they are neither
// sent again on this connection nor forgotten; the removal is tried again
// after a backoff (as a read), with the acks that came meanwhile, counted
// and logged once with a count, and devhook_relay_queue_acked_total counts
// only what was removed. While removals fail, the window fills with
// deliveries the agent has acknowledged, so the drain sends no more.
// When the connection ends, the removals not yet tried are tried once;
// those that fail stay queued and go to the channel's next connection
// again (at least once, once per connection).
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

	// cursor is the last delivery the drain read, in the store's order;
	// "" before the first read. rescan: the next read starts from the
	// queue's start, a delivery may have been queued before the cursor.
	cursor string
	rescan bool

	removals []string        // acknowledged queued deliveries to remove, in the order of their acks
	toRemove map[string]bool // ids in removals or being removed (true: a removal failed)
	removing bool            // a removal goroutine runs
	remove   retry           // removals
}

// removeBatch bounds the deliveries one removal takes from the store.
const removeBatch = 512

// ArrivalOrder is a Store whose Queued returns deliveries in the order
// they were queued (a stream, as the cluster's): a delivery queued after
// a read comes after every delivery that read returned. Its drain reads
// on from its cursor after a Kick instead of reading the queue again from
// its start. Optional: a Store without it is read in id order, where a
// delivery queued late (its id made when it arrived, before the wait for
// an agent) can sort before the cursor.
type ArrivalOrder interface {
	QueuedInArrivalOrder()
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
// for as long as it is kicked: at connect, after each removal of
// acknowledged deliveries, after each enqueue. Whatever happens to one
// delivery, the drain state is reset when it returns.
func (c *agentConn) drainLoop() {
	c.countRuns()
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
	if len(c.stuck) > 0 {
		if time.Now().Before(c.dr.parkAfter) {
			c.wakeAt(c.dr.parkAfter)
		} else {
			// Parked again as this pass meets them, before the cursor.
			clear(c.stuck)
			c.dr.rescan = true
		}
	}
	return true
}

// drainPass sends what the queue holds beyond what is in flight, reading
// on from the cursor. It returns false when the connection failed.
func (c *agentConn) drainPass() bool {
	for {
		c.mu.Lock()
		room := c.room()
		wait := time.Now().Before(c.dr.readAfter)
		if wait {
			c.wakeAt(c.dr.readAfter)
		}
		if room > 0 && !wait && c.dr.rescan {
			c.dr.rescan, c.dr.cursor = false, ""
		}
		after, kicks := c.dr.cursor, c.kicks
		// Removals done before this read are in what it reads: only
		// those done while its batch is sent are to be skipped.
		clear(c.acked)
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
		if !c.sendQueued(batch) {
			return false
		}
		if bad != nil {
			c.setCursor(bad.ID)
			if !c.isStuck(bad.ID) {
				c.park(bad.ID, bad.Error())
			}
			continue
		}
		if len(batch) < limit && c.caughtUp(kicks) {
			return true
		}
	}
}

// room is how many more queued deliveries the drain may send now: at most
// Window unacknowledged, and at most Window more acknowledged whose
// removal is still to be made, so that the agent works on as many while
// removals commit, and while they fail the drain stops. Called under
// c.mu.
func (c *agentConn) room() int {
	w := c.s.cfg.Window
	unacked := len(c.inflight) - len(c.dr.toRemove)
	return min(w-unacked, 2*w-len(c.inflight))
}

// setCursor moves the drain's cursor to id, unless the queue is to be read
// again from its start. Called by the drain goroutine.
func (c *agentConn) setCursor(id string) {
	c.mu.Lock()
	if !c.dr.rescan {
		c.dr.cursor = id
	}
	c.mu.Unlock()
}

// caughtUp is called when a read reached the end of the queue; kicks were
// the Kicks before it began. It reports whether the queue has been sent
// to its end: then live deliveries go to the agent again. Not when a Kick
// came during the read (what it queued may not be in it), nor when the
// queue is to be read again from its start: the drain reads on.
func (c *agentConn) caughtUp(kicks uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kicks != kicks || c.dr.rescan {
		return false
	}
	c.caughtUpLocked()
	return true
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

// remove has acknowledged delivery id removed from the store, by a
// goroutine that runs only while there are removals, with the other acks
// that come meanwhile.
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
	start := !d.removing
	if start {
		d.removing = true
		c.s.wg.Add(1) // the reader holds the Server's wg: not at zero
	}
	c.mu.Unlock()
	if start {
		go func() { defer c.s.wg.Done(); c.removeLoop() }()
	}
	c.kickDrain() // one unacknowledged less: room in the window
}

// removeLoop removes acknowledged deliveries until there are none left,
// those acknowledged so far in one call of the store, kicking the drain
// after each: the window has room again. A removal that fails is tried
// again after the backoff, with the acks that came meanwhile. Removals go
// on after the connection ends: the agent has those deliveries; but one
// that fails then is not tried again.
func (c *agentConn) removeLoop() {
	for {
		c.mu.Lock()
		if len(c.dr.removals) == 0 {
			c.dr.removing = false
			c.mu.Unlock()
			return
		}
		ids := slices.Clone(c.dr.removals[:min(len(c.dr.removals), removeBatch)])
		c.mu.Unlock()
		err := c.s.cfg.Store.Dequeue(c.channel, ids...)
		if err == nil {
			c.removed(ids)
			continue
		}
		wait, gone := c.removeFailed(ids, err)
		if !gone {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-c.done:
				t.Stop()
			}
		}
		c.giveUpRemovals(len(ids), err)
		return
	}
}

// removed counts deliveries ids, the first of the removals, removed: they
// leave the in-flight set, and the drain may send more.
func (c *agentConn) removed(ids []string) {
	c.s.metrics.acked.Add(float64(len(ids)))
	c.mu.Lock()
	d := &c.dr
	for _, id := range ids {
		if d.toRemove[id] {
			c.s.metrics.removalsWaiting.Dec()
		}
		delete(d.toRemove, id)
		delete(c.inflight, id)
		c.acked[id] = true
	}
	d.removals = d.removals[len(ids):]
	fails, since := d.remove.ok()
	c.mu.Unlock()
	if fails > 0 {
		c.s.cfg.Logf("relay: channel %s: removing acknowledged deliveries from the queue works again after %d failures in %s", c.channel, fails, time.Since(since).Round(time.Millisecond))
	}
	c.kickDrain()
}

// removeFailed counts a failed removal of deliveries ids, which stay
// queued and in flight, and logs it (once with a count while it goes
// on). It returns the wait before it is tried again, or gone when the
// connection has ended.
func (c *agentConn) removeFailed(ids []string, err error) (wait time.Duration, gone bool) {
	c.s.metrics.removeErrors.Inc()
	c.mu.Lock()
	d := &c.dr
	for _, id := range ids {
		if !d.toRemove[id] {
			d.toRemove[id] = true
			c.s.metrics.removalsWaiting.Inc()
		}
	}
	now := time.Now()
	wait, log := d.remove.fail(now)
	fails, since := d.remove.fails, d.remove.since
	gone = c.gone
	c.mu.Unlock()
	switch {
	case !log || gone:
	case fails == 1:
		c.s.cfg.Logf("relay: channel %s: remove acknowledged %s from the queue: %v; not sent again meanwhile; trying again in %s, then less and less often (at most every %s) until it works",
			c.channel, deliveries(ids), err, wait.Round(time.Millisecond), RetryMax)
	default:
		c.s.cfg.Logf("relay: channel %s: remove acknowledged deliveries from the queue: still failing: %d failures in %s: %v", c.channel, fails, now.Sub(since).Round(time.Second), err)
	}
	return wait, gone
}

// deliveries names ids in a log line: the delivery, or how many and the
// first.
func deliveries(ids []string) string {
	if len(ids) == 1 {
		return "delivery " + ids[0]
	}
	return fmt.Sprintf("%d deliveries (%s first)", len(ids), ids[0])
}

// giveUpRemovals is called when the connection has ended and the removal
// of the first failed of the removals failed with err: the removals not
// yet tried are tried once, together, and the deliveries that could not
// be removed stay queued, for the channel's next connection.
func (c *agentConn) giveUpRemovals(failed int, err error) {
	c.mu.Lock()
	d := &c.dr
	ids := d.removals
	d.removals = nil
	c.mu.Unlock()
	left := failed
	if rest := ids[failed:]; len(rest) > 0 {
		if err2 := c.s.cfg.Store.Dequeue(c.channel, rest...); err2 == nil {
			c.s.metrics.acked.Add(float64(len(rest)))
		} else {
			err = err2
			c.s.metrics.removeErrors.Inc()
			left += len(rest)
		}
	}
	c.mu.Lock()
	for _, id := range ids {
		if d.toRemove[id] {
			c.s.metrics.removalsWaiting.Dec()
		}
		delete(d.toRemove, id)
	}
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

// sendQueued sends the queued deliveries of batch not in flight, in one
// write, and moves the cursor past them. A delivery that cannot be framed
// is parked, never retried: the queue behind it goes on. It returns
// false when the connection failed.
func (c *agentConn) sendQueued(batch []*devhook.Delivery) bool {
	if len(batch) == 0 {
		return true
	}
	send := make([]*devhook.Delivery, 0, len(batch))
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return false
	}
	for _, d := range batch {
		if !c.inflight[d.ID] && !c.acked[d.ID] && !c.stuck[d.ID] {
			c.inflight[d.ID] = true
			send = append(send, d)
		}
	}
	if !c.dr.rescan {
		c.dr.cursor = batch[len(batch)-1].ID
	}
	c.mu.Unlock()
	msgs := make([]wire.Msg, 0, len(send))
	framed := send[:0]
	for _, d := range send {
		d.Queued = true
		hdr, err := wire.AppendFrame(nil, wire.DeliverHeader(d), nil)
		if err != nil {
			c.mu.Lock()
			delete(c.inflight, d.ID)
			c.mu.Unlock()
			c.park(d.ID, "it cannot be sent to the agent: "+err.Error())
			continue
		}
		msgs = append(msgs, wire.Msg{A: hdr, B: d.Body})
		framed = append(framed, d)
	}
	if len(msgs) == 0 {
		return true
	}
	if c.out.WriteAll(msgs) != nil {
		return false
	}
	c.sent(framed) // written: a live delivery of their runs comes after them
	return true
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
