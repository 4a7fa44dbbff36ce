package agent

// What a queued delivery does differently. It waited in the relay while no
// agent was connected, and its sender got 202: nobody is waiting for its
// answer, and the relay keeps it until it is acknowledged (acks.go).
//
//   - It is judged at the time the relay received it (verify), and
//     re-signed with a fresh t when the secret is known (forwardRecorded):
//     the receiver's 5-minute window may have closed on it.
//   - A write it needs that fails (its record, its attempt, its owed
//     state) does not cost it: it is held, its worker leaving the pool,
//     and the write retried until the disk takes it (hold); only then is
//     the relay acknowledged.
//   - A forward the receiver did not take is owed (oweIfRetryable): its
//     retry state is recorded before the ack, and retry.go retries it.

import (
	"context"
	"time"

	"github.com/devhook/devhook"
)

// Hold reasons of a queued delivery: a write that failed and must succeed
// before the relay is acknowledged.
const (
	holdRecord  = 1 + iota // PutDelivery
	holdAttempt            // AddAttempt of its forward, Result.Attempt
	holdOwed               // PutRetry of its owed state
)

// holdMaxBackoff caps the wait between two tries of a held write, so that
// the relay's queue moves again soon after room returns.
const holdMaxBackoff = 2 * time.Second

// oweIfRetryable makes queued delivery d owed when its recorded forward
// p.Attempt asks for a retry.
func (a *Agent) oweIfRetryable(d *devhook.Delivery, p processed) processed {
	primary := p.Attempt
	if d.Queued && retryable(primary) {
		p.Owed = true
		st := a.owe(d, primary)
		if err := a.cfg.Store.PutRetry(d.ID, st); err != nil {
			a.storeFailed(err)
			p.hold, p.owe = holdOwed, &st
			return p
		}
		a.storeOK()
		a.owedRecorded(d, primary, st)
	}
	return p
}

// oweBehind makes d, recorded, owed behind the earlier deliveries of its
// run that the agent owes the receiver (its entry is reserved), without
// forwarding it: it must not overtake them. A live one's sender gets 202,
// as from the relay's queue: devhook keeps it.
func (a *Agent) oweBehind(d *devhook.Delivery, p processed) processed {
	now := a.cfg.Now()
	st := devhook.RetryState{State: devhook.RetryOwed, Since: now, Route: d.Route}
	p.Owed, p.Behind = true, true
	if err := a.cfg.Store.PutRetry(d.ID, st); err != nil {
		a.storeFailed(err)
		if d.Queued {
			p.hold, p.owe = holdOwed, &st
			return p
		}
		a.owed.unreserve(d.ID)
		p.Owed, p.Behind = false, false
		p.failure = "devhook could not record the delivery's place behind an earlier one of its run: " + shortCause(err) + "; not forwarded"
		p.Error = "could not record that the delivery is owed behind an earlier one of its run: " + err.Error() + "; answered 503, not forwarded"
		return p
	}
	a.storeOK()
	p.behind = true
	a.owed.add(d.ID, orderKey(d), st.Route, now, now, false)
	a.publishRetry(d, nil, &st)
	a.publishHealth()
	return p
}

// hold retries the write res waits for until it succeeds, then carries on
// with d. It returns false when held ends first: the connection ended (the
// relay sends d again on the next one) or the agent is stopping.
func (a *Agent) hold(work, held context.Context, d *devhook.Delivery, res *processed) bool {
	a.health.held.Add(1)
	holding := true
	release := func() {
		if holding {
			holding = false
			a.health.held.Add(-1)
		}
	}
	defer release()
	wait := a.cfg.MinBackoff
	for res.hold != 0 {
		t := time.NewTimer(a.jitter(wait))
		select {
		case <-held.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(wait*2, holdMaxBackoff, a.cfg.MaxBackoff)
		switch res.hold {
		case holdRecord:
			created, err := a.cfg.Store.PutDelivery(d)
			if err != nil {
				a.storeFailed(err)
				continue
			}
			release()
			a.storeOK()
			*res = a.forwardRecorded(work, d, created)
			if res.hold != 0 {
				a.health.held.Add(1)
				holding = true
			}
		case holdAttempt:
			rec, err := a.cfg.Store.AddAttempt(d.ID, *res.Attempt)
			if devhook.ErrorCode(err) == devhook.ENOTFOUND {
				// Deleted meanwhile: nothing to hold it for.
				release()
				res.hold = 0
				continue
			}
			if err != nil {
				a.storeFailed(err)
				continue
			}
			release()
			a.storeOK()
			a.published(d, &rec)
			res.Attempt, res.answer, res.hold = &rec, &rec, 0
			*res = a.oweIfRetryable(d, *res)
			if res.hold != 0 {
				a.health.held.Add(1)
				holding = true
			}
		case holdOwed:
			if err := a.cfg.Store.PutRetry(d.ID, *res.owe); err != nil {
				a.storeFailed(err)
				continue
			}
			release()
			a.storeOK()
			a.owedRecorded(d, res.Attempt, *res.owe)
			res.hold = 0
		}
	}
	return true
}
