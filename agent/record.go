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
	"errors"

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
//
// A record some parts of which cannot be read (its body, an attempt) is
// judged by the attempts that can: one of them answered, or a retry
// state, is as good a proof as in a whole record, and what cannot be read
// is not needed to answer. When no record can be read, or its readable
// attempts do not show it answered (an unreadable one may have been, but
// nothing says so), it is forwarded again from the relay's copy, which is
// whole: a receiver may get it twice, as for any answer lost on its way,
// rather than never.
func (a *Agent) answeredFromRecord(p *processed) bool {
	stored, err := a.cfg.Store.Delivery(p.Delivery.ID)
	if pe := (*devhook.PartialError)(nil); stored == nil || err != nil && !errors.As(err, &pe) {
		return false
	}
	at := lastAnswered(stored)
	if (at == nil || retryable(at)) && !a.hasRetryState(stored.ID) {
		return false
	}
	p.Duplicate, p.Delivery = true, stored
	p.answer = cmp.Or(at, lastReadable(stored))
	p.Attempt = p.answer
	return true
}

// lastReadable returns the last attempt of d that the store could read,
// or nil.
func lastReadable(d *devhook.Delivery) *devhook.Attempt {
	for i := len(d.Attempts) - 1; i >= 0; i-- {
		if d.Attempts[i].ReadError == "" {
			return &d.Attempts[i]
		}
	}
	return nil
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
