package agent

// What goes back to the relay for each delivery: the answer, which the
// relay passes to a live delivery's sender, and, for a queued delivery
// once it is recorded, the acknowledgement that lets the relay drop it.
// A live delivery needs no ack: its sender is waiting for the answer, and
// gets 202 with the delivery queued if the answer does not come.

import (
	"net/http"

	"github.com/devhook/devhook"
)

// responder is the part of a relay connection handle needs.
type responder interface {
	Respond(id string, status int, header http.Header, body []byte) error
	Ack(id string) error
}

// finish answers the relay for d and reports the result.
func (a *Agent) finish(conn responder, d *devhook.Delivery, res *processed) {
	st, h, body := answer(*res)
	res.Status, res.Rejected = st, res.rejected != nil
	if err := conn.Respond(d.ID, st, h, body); err != nil {
		if reason := unframable(d.ID, st, h); reason != "" {
			// The answer itself cannot be framed: say so at once rather
			// than leave the sender waiting for the relay's timeout.
			a.cfg.Logf("delivery %s: %s", d.ID, reason)
			st, h, body = text(http.StatusBadGateway, "devhook: "+reason)
			res.Status, res.Error = st, reason
			err = conn.Respond(d.ID, st, h, body)
		}
		if err != nil && !d.Queued {
			// The relay queues it (its sender gets 202) and sends it
			// again: the printed line says so.
			res.Cut = true
		}
	}
	if res.recorded && d.Queued {
		if err := conn.Ack(d.ID); err != nil {
			res.Cut = true // not acknowledged: the relay keeps it
		}
	}
	if a.cfg.OnResult != nil {
		a.cfg.OnResult(res.Result)
	}
}
