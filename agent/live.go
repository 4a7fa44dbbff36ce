package agent

// A delivery's path through the agent, top to bottom: process runs its
// stages in turn, each a function of its own file, on the worker that read
// the delivery from the relay (workers.go):
//
//	verify.go   verify: the signature, judged once
//	record.go   record: on disk before anything else; a duplicate answered from the record
//	order.go    order: kept back behind an earlier delivery of its run that is owed
//	forward.go  forward: to the receivers its route chose, each within its share
//	            of the workers (shares.go), each attempt recorded
//	owe.go      owe: a queued one the receiver did not take (or not sent, over its
//	            share), retried later by retry.go
//	acks.go     answer: what goes back to the sender, and the ack (finish)
//
// A queued delivery takes the same path; where its way differs (a write
// that fails is held at the store's gate, not answered 503) queued.go
// says.

import (
	"context"

	"github.com/devhook/devhook"
)

// process takes d along its path up to its answer, which finish sends.
// It does not talk to the relay. sw, when not zero, is how long the relay
// waits for a live d's answer (late.go). A stage that ends the path early says
// why in p: a rejection, a 503, a duplicate, a drop, a place behind its
// run, or the connection that ended while d was held.
func (a *Agent) process(ctx context.Context, h holder, d *devhook.Delivery, sw senderWait) (p processed) {
	p.Delivery, p.sender = d, sw
	if d.Event == (devhook.Event{}) { // admit may have read it
		d.Event = devhook.ParseEvent(d.Body)
	}
	d.Verdict = a.verify(d)
	created, ok := a.recordDelivery(h, &p)
	if !ok || !created && a.answeredFromRecord(&p) {
		return p
	}
	if p.rejected = a.rejects(d); p.rejected != nil {
		return p
	}
	rt := a.routeOf(d)
	if rt.Drop() {
		a.drop(h, &p)
		return p
	}
	if a.oweBehind(h, &p) || !a.forwardTo(ctx, h, &p, rt) {
		return p
	}
	a.oweIfRetryable(h, &p)
	return p
}
