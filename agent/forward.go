package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
	"github.com/devhook/devhook/signature"
)

// Forward: the stage of a delivery's path (live.go) that sends it to the
// receivers its route chose and records each attempt; the first target's
// answer goes back to the sender (acks.go), the others get a copy at the
// same time. A route that drops the delivery records that instead.
// retry.go and replay.go forward through here too. The HTTP request
// itself: send, below; for plain-http receivers, httpclient.go; what both
// share, request.go.

// forwardTo forwards p's delivery to the targets of its route rt and
// records the attempts. It returns false when the path ends here: a queued
// delivery's attempt could not be recorded, and was held until the
// connection ended, or the delivery was deleted meanwhile.
func (a *Agent) forwardTo(ctx context.Context, h holder, p *processed, rt *devhook.Route) bool {
	d := p.Delivery
	kind := devhook.AttemptForward
	var resign bool
	if d.Queued {
		kind = devhook.AttemptRedelivery
		// It waited: the receiver's 5-minute window may have closed on it.
		resign = d.Verdict.OK() && a.getSecret() != ""
	}
	targets := a.targetsOf(rt) // a route has one
	// The copies, sent at the same time as the first target's forward;
	// none, the common case, costs no goroutine and no allocation.
	var copies []devhook.Attempt
	var wg *sync.WaitGroup
	if len(targets) > 1 {
		copies, wg = a.forwardCopies(ctx, d, targets[1:], kind, resign)
	}
	at, sent := a.forwardWithin(ctx, d, targets[0], kind, resign)
	if !sent {
		p.busy = at.Error
	}
	if at.Status != 0 {
		a.receiverAnswered(targetKey(rt))
	}
	if wg != nil {
		wg.Wait()
	}
	late := false
	if !d.Queued {
		// The relay may no longer wait for it: the sender gets 504
		// (late.go). Judged once the copies are done too, as the answer
		// waits for them.
		p.late, late = a.tooLate(p.sender, &at)
	}
	if !late && !d.Queued && at.Status != 0 {
		if reason := unframable(d.ID, at.Status, at.Header); reason != "" {
			at.Error = reason + "; the sender got 502"
			p.unframed = reason
		} else if answerCut(&at) {
			at.Error += fmt.Sprintf("; the sender got its first %d bytes, marked %s", len(at.Body), devhook.AnswerCutHeader)
		}
	}
	at.Route = rt
	p.Attempt = a.recordAttempt(d, at)
	p.answer = p.Attempt
	for i := range copies {
		copies[i].Route = rt
		p.Copies = append(p.Copies, a.recordAttempt(d, copies[i]))
	}
	return a.attemptRecorded(h, p)
}

// forwardCopies starts the forwards of d to targets, each on its own
// goroutine; it returns the attempts they fill, filled once wg is done.
func (a *Agent) forwardCopies(ctx context.Context, d *devhook.Delivery, targets []*url.URL, kind string, resign bool) ([]devhook.Attempt, *sync.WaitGroup) {
	ats := make([]devhook.Attempt, len(targets))
	wg := new(sync.WaitGroup)
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ats[i], _ = a.forwardWithin(ctx, d, t, kind, resign)
		}()
	}
	return ats, wg
}

// drop records that p's route dropped it: an attempt of kind drop, not
// forwarded; the sender gets 202 (acks.go).
func (a *Agent) drop(h holder, p *processed) {
	d := p.Delivery
	at := devhook.Attempt{Kind: devhook.AttemptDrop, Target: devhook.RouteDrop, StartedAt: a.cfg.Now().UTC(), Route: d.Route}
	p.Attempt = a.recordAttempt(d, at)
	p.answer = p.Attempt
	a.attemptRecorded(h, p)
}

// attemptRecorded holds a queued delivery whose attempt p.Attempt could
// not be recorded until it is: the relay is acknowledged once it is
// (queued.go). It returns false when the connection ended first, or the
// delivery was deleted meanwhile.
func (a *Agent) attemptRecorded(h holder, p *processed) bool {
	d := p.Delivery
	if !d.Queued || p.Attempt.Seq != 0 {
		return true
	}
	deleted := false
	if !a.hold(h, func() error {
		rec, err := a.cfg.Store.AddAttempt(d.ID, *p.Attempt)
		switch {
		case devhook.ErrorCode(err) == devhook.ENOTFOUND:
			deleted = true // nothing to hold it for
		case err != nil:
			return err
		default:
			a.unrecorded.recorded()
			a.published(d, &rec)
			p.Attempt, p.answer = &rec, &rec
		}
		return nil
	}) {
		p.ended = true
		return false
	}
	return !deleted
}

// attempt forwards d (or edit, a replay's request in its place) to target
// and records the attempt, with the route rt that chose target. It returns
// the recorded attempt.
func (a *Agent) attempt(ctx context.Context, d *devhook.Delivery, target *url.URL, kind string, resign bool, edit *devhook.Request, to string, rt *devhook.Route) *devhook.Attempt {
	at := a.forward(ctx, d, target, kind, resign, edit, to)
	at.Route = rt
	return a.recordAttempt(d, at)
}

// forwardWithin is forward within the share of target's receiver
// (shares.go). Over it, nothing is sent: the attempt, not sent, says why,
// and sent is false.
func (a *Agent) forwardWithin(ctx context.Context, d *devhook.Delivery, target *url.URL, kind string, resign bool) (at devhook.Attempt, sent bool) {
	ok, why := a.shares.take(target)
	if !ok {
		return devhook.Attempt{Kind: kind, Target: devhook.TargetURL(target, d.Path, d.RawQuery), StartedAt: a.cfg.Now().UTC(),
			Made: devhook.MadeAsArrived, Error: why}, false
	}
	defer a.shares.give(target)
	return a.forward(ctx, d, target, kind, resign, nil, ""), true
}

// forward sends d to target, or to the URL to when it is not empty, and
// returns the attempt. edit, when not nil, is a replay's request in d's
// place; resign signs what is sent with a fresh t. The attempt says how
// its request was made from d (Made) and, when that request is not d's,
// records it as it was sent (Request).
func (a *Agent) forward(ctx context.Context, d *devhook.Delivery, target *url.URL, kind string, resign bool, edit *devhook.Request, to string) devhook.Attempt {
	method, path, query, header, body := d.Method, d.Path, d.RawQuery, d.Header, d.Body
	made := devhook.MadeAsArrived
	if edit != nil {
		method, path, query, header, body = edit.Method, edit.Path, edit.RawQuery, edit.Header, edit.Body
		if edited(d, edit, resign) {
			made = devhook.MadeEdited
		}
	}
	changed := made == devhook.MadeEdited || resign || len(a.cfg.Header) > 0
	if changed {
		// A copy, without hop-by-hop headers, which are not sent.
		header = wire.EndToEnd(header)
	}
	if resign {
		header[http.CanonicalHeaderKey(devhook.SignatureHeader)] = []string{signature.Sign(a.getSecret(), a.cfg.Now(), body)}
		if made == devhook.MadeAsArrived {
			made = devhook.MadeResigned
		}
	}
	for k, vs := range a.cfg.Header {
		header[k] = vs
	}
	var req *devhook.Request
	if changed {
		// Content-Length as sent: the length of the body sent, not the
		// delivery's, whose header an edit may have kept.
		if hasBody(method, body) {
			header["Content-Length"] = []string{strconv.Itoa(len(body))}
		} else {
			delete(header, "Content-Length")
		}
		req = &devhook.Request{Method: method, Path: path, RawQuery: query, Header: header, Body: body, Resigned: resign}
	}
	if to == "" {
		to = devhook.TargetURL(target, path, query)
	}
	at := devhook.Attempt{Kind: kind, Target: to, StartedAt: a.cfg.Now().UTC(), Made: made, Request: req}
	a.send(ctx, &at, method, header, body)
	return at
}

// edited reports whether edit, a replay's request, differs from d in what
// a receiver sees: method, path, query, body or an end-to-end header
// other than Content-Length (sent as the body's length whatever it says),
// and than the signature when it is signed again (resign). A body in the
// place of one that could not be read is an edit, an empty one too.
func edited(d *devhook.Delivery, edit *devhook.Request, resign bool) bool {
	if edit.Method != d.Method || edit.Path != d.Path || edit.RawQuery != d.RawQuery || d.BodyError != "" || !bytes.Equal(edit.Body, d.Body) {
		return true
	}
	norm := func(h http.Header) http.Header {
		out := http.Header{}
		for k, vs := range wire.EndToEnd(h) {
			out[http.CanonicalHeaderKey(k)] = append(out[http.CanonicalHeaderKey(k)], vs...)
		}
		delete(out, "Content-Length")
		if resign {
			delete(out, http.CanonicalHeaderKey(devhook.SignatureHeader))
		}
		return out
	}
	a, b := norm(d.Header), norm(edit.Header)
	if len(a) != len(b) {
		return true
	}
	for k, vs := range a {
		if !slices.Equal(vs, b[k]) {
			return true
		}
	}
	return false
}

// recordAttempt stores attempt at of d and tells live views. On failure it
// logs and returns the attempt unrecorded.
func (a *Agent) recordAttempt(d *devhook.Delivery, at devhook.Attempt) *devhook.Attempt {
	rec, err := a.cfg.Store.AddAttempt(d.ID, at)
	out := new(devhook.Attempt) // the one copy on the heap
	if err != nil {
		a.attemptNotRecorded(d, &at, err)
		*out = at
		return out
	}
	a.health.ok()
	a.unrecorded.recorded()
	*out = rec
	a.published(d, out)
	return out
}

// attemptNotRecorded says that attempt at of d was made but could not be
// recorded (err).
func (a *Agent) attemptNotRecorded(d *devhook.Delivery, at *devhook.Attempt, err error) {
	if devhook.ErrorCode(err) == devhook.ENOTFOUND {
		// Deleted while it was forwarded: the store is fine, and
		// there is nothing to record the attempt in.
		a.cfg.Logf("delivery %s: the receiver got it (%s) after it was deleted; the attempt is not recorded", d.ID, outcome(at))
		return
	}
	// The receiver has had it: say so, and carry on without the
	// record of this attempt.
	a.health.failed(err)
	a.unrecorded.failed(err, func() string {
		line := fmt.Sprintf("delivery %s: the receiver got it (%s) but devhook could not record the attempt: %v", d.ID, outcome(at), err)
		if d.Queued {
			line += "; it is recorded before the relay is acknowledged"
		}
		return line
	})
}

// published tells live views that attempt rec of d is recorded.
func (a *Agent) published(d *devhook.Delivery, rec *devhook.Attempt) {
	if a.cfg.OnChange == nil {
		return
	}
	s := d.Summarize()
	s.Attempts = rec.Seq
	s.Status, s.Duration, s.Error = rec.Status, rec.Duration, rec.Error
	s.Retry = a.owed.state(d.ID)
	a.publish(devhook.Change{Kind: devhook.ChangeAttempt, Summary: s, Attempt: rec})
}

// outcome says in a few words how attempt at ended.
func outcome(at *devhook.Attempt) string {
	if at.Status == 0 {
		return "no answer: " + at.Error
	}
	return "answered " + strconv.Itoa(at.Status)
}

// send performs one HTTP request and fills at's outcome.
//
// A plain http:// target, with Config.Client nil, goes through the agent's
// own client (sendDirect, httpclient.go): this goroutine writes the
// request and reads the answer itself, on a kept-alive connection. That
// client needs to be able to see that a receiver closed an idle
// connection (peekWorks): a request the receiver may have read is never
// sent again, only one it cannot have read (httpclient.go, resendable).
// Where it cannot, and for the rest, a.client sends it.
func (a *Agent) send(ctx context.Context, at *devhook.Attempt, method string, header http.Header, body []byte) {
	start := a.cfg.Now()
	defer func() { at.Duration = devhook.Duration(a.cfg.Now().Sub(start)) }()
	if peekWorks && a.cfg.Client == nil && strings.HasPrefix(at.Target, "http://") && a.sendDirect(ctx, at, method, header, body) {
		return
	}
	handTurnOn(ctx) // net/http's client may dial, and writes in its own time
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ForwardTimeout)
	defer cancel()
	var rd io.Reader
	if hasBody(method, body) {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequestWithContext(ctx, method, at.Target, rd)
	if err != nil {
		at.Error = "could not build the request: " + err.Error()
		return
	}
	r.Header = outHeader(header)
	r.ContentLength = int64(len(body))
	if rd == nil {
		r.Body = nil
	}
	resp, err := a.client.Do(r)
	if err != nil {
		at.Error = describe(err, at.Target)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Its body is the connection, handed over: ctx no longer ends a
		// read of it, so ForwardTimeout closes it.
		stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
		defer stop()
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, a.cfg.MaxResponse+1))
	a.setAnswer(at, resp, b, err)
}
