package agent

// Record: a delivery is on disk before anything else is done with it, the
// stage of its path after verify (live.go). A delivery that cannot be
// recorded is not forwarded, so that no sender sees the receiver's 200 for
// a delivery that is not on disk: a live one is answered 503, a queued one
// held until it is recorded (queued.go). The journal makes a record one
// write(2). A delivery that arrives again (same id) and has been answered
// is answered from the record here, not forwarded twice.

import (
	"cmp"

	"github.com/devhook/devhook"
)

// recordDelivery records p's delivery and tells live views of a new one.
// It returns whether the record created it, and false in ok when the path
// ends here: a live one answered 503, a queued one held until the
// connection ended.
func (a *Agent) recordDelivery(h holder, p *processed) (created, ok bool) {
	d := p.Delivery
	err := a.writeOrHold(h, p, func() (err error) {
		created, err = a.cfg.Store.PutDelivery(d)
		return err
	})
	if err != nil {
		if !p.ended {
			p.failure = "devhook could not record the delivery: " + shortCause(err) + "; not forwarded"
			p.Error = "could not record the delivery: " + err.Error() + "; answered 503, not forwarded"
		}
		return false, false
	}
	p.recorded = true
	if created {
		a.publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: d.Summarize()})
	}
	return created, true
}

// answeredFromRecord answers p's delivery, recorded before (its ack was
// lost, and the relay sent it again), from the record when the receiver
// has taken it, or when the agent owes it already, rather than forward it
// twice; it reports whether it did.
func (a *Agent) answeredFromRecord(p *processed) bool {
	stored, err := a.cfg.Store.Delivery(p.Delivery.ID)
	if err != nil {
		return false
	}
	at := lastAnswered(stored)
	if (at == nil || retryable(at)) && !a.hasRetryState(stored.ID) {
		return false
	}
	p.Duplicate, p.Delivery = true, stored
	p.answer = cmp.Or(at, stored.LastAttempt())
	p.Attempt = p.answer
	return true
}

// lastAnswered returns the last forward of d that the receiver answered,
// or the drop that its route made of it, or nil.
func lastAnswered(d *devhook.Delivery) *devhook.Attempt {
	for i := len(d.Attempts) - 1; i >= 0; i-- {
		if at := &d.Attempts[i]; (at.Status != 0 || at.Kind == devhook.AttemptDrop) && at.Kind != devhook.AttemptReplay {
			return at
		}
	}
	return nil
}
