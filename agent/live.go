package agent

// A delivery from the relay, as a live one takes it:
//
//	process: verify → record → forwardRecorded: forward → record the attempts
//	answer: what the sender gets
//
// A queued delivery takes the same path and parts from it where queued.go
// says; acks.go sends the answer back through the relay.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
	"github.com/devhook/devhook/signature"
)

// processed is a Result plus what handle needs to answer.
type processed struct {
	Result
	recorded bool
	answer   *devhook.Attempt // what to send back; nil with failure
	failure  string           // d is not recorded: 503
	unframed string           // the receiver's answer cannot go back through the relay: 502
	rejected *devhook.Verdict
	behind   bool                // owed behind an earlier delivery of its run, not forwarded: 202
	hold     int                 // a queued delivery waits for a write: holdRecord, holdAttempt or holdOwed
	owe      *devhook.RetryState // with holdOwed: the state to write
}

// process verifies, records and forwards d. It does not talk to the relay.
func (a *Agent) process(ctx context.Context, d *devhook.Delivery) processed {
	if d.Event == (devhook.Event{}) { // admit may have read it
		d.Event = devhook.ParseEvent(d.Body)
	}
	d.Verdict = a.verify(d)
	// Record first: a delivery that cannot be recorded is not forwarded,
	// so that no sender sees the receiver's 200 for a delivery that is
	// not on disk. The journal makes this one write(2).
	created, err := a.cfg.Store.PutDelivery(d)
	if err != nil {
		a.storeFailed(err)
		p := processed{Result: Result{Delivery: d}}
		if d.Queued {
			p.hold = holdRecord
			return p
		}
		p.failure = "devhook could not record the delivery: " + shortCause(err) + "; not forwarded"
		p.Error = "could not record the delivery: " + err.Error() + "; answered 503, not forwarded"
		return p
	}
	a.storeOK()
	return a.forwardRecorded(ctx, d, created)
}

// forwardRecorded forwards d, which is recorded (created says whether by
// this call), and records the attempts.
func (a *Agent) forwardRecorded(ctx context.Context, d *devhook.Delivery, created bool) processed {
	p := processed{Result: Result{Delivery: d}, recorded: true}
	if !created {
		// Delivered again (its ack was lost): answer from the record if
		// the receiver has taken it, or if the agent owes it already,
		// rather than forward it twice.
		if stored, err := a.cfg.Store.Delivery(d.ID); err == nil {
			if at := answered(stored); at != nil && !retryable(at) || a.hasRetryState(d.ID) {
				p.Duplicate, p.Delivery = true, stored
				p.answer = cmp.Or(at, stored.LastAttempt())
				p.Attempt = p.answer
				return p
			}
		}
	} else {
		a.publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: d.Summarize()})
	}
	if a.cfg.Verify == VerifyEnforce && !d.Verdict.OK() {
		v := d.Verdict
		p.rejected = &v
		return p
	}

	rt := a.routeOf(d)
	if rt.Drop() {
		return a.drop(d, p)
	}
	if (d.Queued || d.Event.RunID != "") && a.owed.reserve(d.ID, orderKey(d), a.cfg.Now()) {
		return a.oweBehind(d, p)
	}

	kind := devhook.AttemptForward
	var resign bool
	if d.Queued {
		kind = devhook.AttemptRedelivery
		// It waited: the receiver's 5-minute window may have closed on it.
		resign = d.Verdict.OK() && a.getSecret() != ""
	}
	// The first target answers the sender; the others get a copy at the
	// same time. A route has one target.
	targets := a.targetsOf(rt)
	ats := make([]devhook.Attempt, len(targets))
	var wg sync.WaitGroup
	for i := 1; i < len(targets); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ats[i] = a.forward(ctx, d, targets[i], kind, resign, nil, "")
		}()
	}
	ats[0] = a.forward(ctx, d, targets[0], kind, resign, nil, "")
	if !d.Queued && ats[0].Status != 0 {
		if reason := unframable(d.ID, ats[0].Status, ats[0].Header); reason != "" {
			ats[0].Error = reason + "; the sender got 502"
			p.unframed = reason
		}
	}
	if ats[0].Status != 0 {
		a.receiverAnswered(targetKey(rt))
	}
	wg.Wait()

	var primary *devhook.Attempt
	for i := range ats {
		ats[i].Route = rt
		rec := a.record(d, ats[i])
		if i == 0 {
			primary = rec
		} else {
			p.Copies = append(p.Copies, rec)
		}
	}
	p.Attempt, p.answer = primary, primary
	if d.Queued && primary.Seq == 0 {
		// Not recorded: the relay is acknowledged once it is.
		p.hold = holdAttempt
		return p
	}
	return a.oweIfRetryable(d, p)
}

// drop records that d's route dropped it: an attempt of kind drop, not
// forwarded; the sender gets 202 (answer).
func (a *Agent) drop(d *devhook.Delivery, p processed) processed {
	at := devhook.Attempt{Kind: devhook.AttemptDrop, Target: devhook.RouteDrop, StartedAt: a.cfg.Now().UTC(), Route: d.Route}
	rec := a.record(d, at)
	p.Attempt, p.answer = rec, rec
	if d.Queued && rec.Seq == 0 {
		// Not recorded: the relay is acknowledged once it is.
		p.hold = holdAttempt
	}
	return p
}

// answered returns the last forward of d that the receiver answered, or
// the drop that its route made of it, or nil.
func answered(d *devhook.Delivery) *devhook.Attempt {
	for i := len(d.Attempts) - 1; i >= 0; i-- {
		if at := &d.Attempts[i]; (at.Status != 0 || at.Kind == devhook.AttemptDrop) && at.Kind != devhook.AttemptReplay {
			return at
		}
	}
	return nil
}

func (a *Agent) verify(d *devhook.Delivery) devhook.Verdict {
	if a.cfg.Verify == VerifyOff {
		return devhook.Verdict{Result: devhook.VerdictUnchecked, Reason: "verification is off"}
	}
	now := a.cfg.Now
	if d.Queued && !d.ReceivedAt.IsZero() {
		// Judge a queued delivery at the time the relay received it.
		at := d.ReceivedAt
		now = func() time.Time { return at }
	}
	v := signature.Verifier{Skew: a.cfg.Skew, Now: now}
	return v.Verify(a.getSecret(), d.Header.Get(devhook.SignatureHeader), d.Body)
}

// answer is what goes back to the sender for p.
func answer(p processed) (int, http.Header, []byte) {
	switch {
	case p.rejected != nil:
		return text(p.rejected.Status, p.rejected.Text)
	case p.behind:
		return http.StatusAccepted, http.Header{"Content-Type": {"application/json"}},
			fmt.Appendf(nil, "{\"queued\":true,\"id\":%q,\"reason\":%q}\n", p.Delivery.ID,
				"an earlier delivery of this run is owed to the receiver; devhook keeps this one and forwards it after that one")
	case p.failure != "":
		st, h, b := text(http.StatusServiceUnavailable, p.failure)
		h["Retry-After"] = []string{strconv.Itoa(RetryAfter)}
		return st, h, b
	case p.unframed != "":
		return text(http.StatusBadGateway, "devhook: "+p.unframed)
	case p.answer == nil:
		return text(http.StatusBadGateway, "devhook: nothing to forward to")
	case p.answer.Kind == devhook.AttemptDrop:
		return dropAnswer(p.Delivery.ID, p.answer.Route)
	case p.answer.Status == 0:
		return text(http.StatusBadGateway, "devhook: the local receiver did not answer: "+p.answer.Error)
	}
	return p.answer.Status, p.answer.Header, p.answer.Body
}

// dropAnswer is what the sender of a delivery that route rt dropped gets:
// 202, so that the service does not send it again, and a JSON body that
// says devhook dropped it.
func dropAnswer(id string, rt *devhook.Route) (int, http.Header, []byte) {
	index, route := 0, devhook.RouteDefault
	if rt != nil {
		index, route = rt.Index, rt.Text
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the route's "->" as written
	enc.Encode(struct {
		Dropped bool   `json:"dropped"`
		ID      string `json:"id"`
		Route   int    `json:"route"`
		Text    string `json:"route_text"`
		Reason  string `json:"reason"`
	}{true, id, index, route, "devhook dropped this delivery by route " + strconv.Itoa(index) + " (" + route + "): recorded, not forwarded"})
	return http.StatusAccepted, http.Header{"Content-Type": {"application/json"}, devhook.AnswerHeader: {"agent"}}, b.Bytes()
}

func text(code int, msg string) (int, http.Header, []byte) {
	return code, http.Header{"Content-Type": {"text/plain; charset=utf-8"}, devhook.AnswerHeader: {"agent"}}, []byte(msg + "\n")
}

// unframable says why an answer with this status and header cannot be
// sent back through the relay, or returns "" when it can. Only a header
// near wire.MaxHeaderSize is encoded to find out.
func unframable(id string, status int, h http.Header) string {
	n := 64 + len(id)
	for k, vs := range h {
		n += len(k) + 10
		for _, v := range vs {
			n += len(v) + 10
		}
	}
	if n < wire.MaxHeaderSize {
		return ""
	}
	if _, err := wire.AppendFrame(nil, &wire.Header{Type: wire.TypeResponse, ID: id, Status: status, Header: h}, nil); err == nil {
		return ""
	}
	size := 0
	for k, vs := range h {
		size += len(k)
		for _, v := range vs {
			size += len(v)
		}
	}
	return fmt.Sprintf("the receiver answered %d with %d bytes of headers, over the %d devhook can pass back to the sender", status, size, wire.MaxHeaderSize)
}

// shortCause names the kind of a storage error for a sender, without the
// local paths the full error carries.
func shortCause(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return "disk full"
	case errors.Is(err, syscall.EDQUOT):
		return "disk quota exceeded"
	case errors.Is(err, syscall.EROFS):
		return "read-only file system"
	case errors.Is(err, syscall.EIO):
		return "I/O error"
	}
	return "storage error"
}
