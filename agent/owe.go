package agent

// Owe: a queued delivery whose forward the receiver did not take is owed
// to it, the stage of its path before the answer (live.go). The owed
// deliveries are kept in a table (owed.go), which retry.go works through.
//
// A queued delivery waited in the relay while no agent was connected; its
// sender got 202 and will not send it again. When its forward gets no
// answer, or 408, 429 or 5xx, the agent owes it to the receiver: it
// records a devhook.RetryState (Store.PutRetry) before it acknowledges the
// relay (oweIfRetryable), then retries it (retry.go). A delivery of a run
// that has one owed holds its place behind it (order.go: oweBehind).

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/devhook/devhook"
)

// oweIfRetryable makes queued delivery p owed when its recorded forward
// p.Attempt asks for a retry: its retry state is recorded before the
// relay is acknowledged, held until it is (queued.go).
func (a *Agent) oweIfRetryable(h holder, p *processed) {
	d, at := p.Delivery, p.Attempt
	if !d.Queued || !retryable(at) {
		return
	}
	p.Owed = true
	st := a.owe(d, at)
	if a.writeOrHold(h, p, func() error { return a.cfg.Store.PutRetry(d.ID, st) }) != nil {
		return // held until the connection ended
	}
	if st.State == devhook.RetryFailed { // retries are off
		a.owed.remove(d.ID, true)
		a.gaveUp(d, at, st)
		return
	}
	if p.key == "" { // oweBehind found nothing owed and left it
		p.key = orderKey(d)
	}
	a.owed.add(d.ID, p.key, st.Route, st.Since, a.cfg.Now().Add(a.retryWait(0)), connRefused(at))
	a.publishRetry(d, at, &st)
	a.publishHealth()
}

// owe returns the retry state of queued delivery d whose forward at failed.
func (a *Agent) owe(d *devhook.Delivery, at *devhook.Attempt) devhook.RetryState {
	st := devhook.RetryState{State: devhook.RetryOwed, Since: at.StartedAt, Route: d.Route}
	if a.cfg.RetryFor < 0 {
		st.State = devhook.RetryFailed
		st.Reason = "gave up after 1 attempt (retries are off): " + howFailed(at)
	}
	return st
}

// retryWait is the wait before retry n+1 (n from 0).
func (a *Agent) retryWait(n int) time.Duration {
	d := a.cfg.RetryMinBackoff
	for range n {
		if d >= a.cfg.RetryMaxBackoff {
			break
		}
		d *= 2
	}
	return a.jitter(min(d, a.cfg.RetryMaxBackoff))
}

// hasRetryState reports whether delivery id is owed or was given up.
func (a *Agent) hasRetryState(id string) bool {
	if a.owed.state(id) != nil {
		return true
	}
	rs, err := a.cfg.Store.Retries([]string{id})
	_, ok := rs[id]
	return err == nil && ok
}

// receiverAnswered is called when target (targetKey) answered a forward:
// the deliveries waiting for it to listen again can go.
func (a *Agent) receiverAnswered(target string) {
	if a.owed.refused.Load() > 0 {
		a.owed.wakeRefused(a.cfg.Now(), target)
	}
}

// gaveUp says that the agent stopped retrying d.
func (a *Agent) gaveUp(d *devhook.Delivery, at *devhook.Attempt, st devhook.RetryState) {
	a.publishRetry(d, at, &st)
	a.publishHealth()
	if a.cfg.OnResult == nil {
		a.cfg.Logf("gave up on delivery %s: %s", d.ID, strings.TrimPrefix(st.Reason, "gave up "))
		return
	}
	r := Result{Delivery: d, Attempt: at, GaveUp: true, Error: st.Reason, Since: st.Since}
	if at != nil {
		r.Status = at.Status
	}
	a.cfg.OnResult(r)
}

// publishRetry tells live views that d's retry state is now st.
func (a *Agent) publishRetry(d *devhook.Delivery, at *devhook.Attempt, st *devhook.RetryState) {
	if a.cfg.OnChange == nil {
		return
	}
	s := d.Summarize()
	if at != nil && at.Seq > 0 {
		s.Attempts = at.Seq
		s.Status, s.Duration, s.Error = at.Status, at.Duration, at.Error
	}
	s.Retry = st
	a.cfg.OnChange(devhook.Change{Kind: devhook.ChangeRetry, Summary: s})
}

// retryable reports whether the receiver did not take a forward: no
// answer, or an answer that asks to try again later.
func retryable(at *devhook.Attempt) bool {
	if at == nil {
		return false
	}
	switch s := at.Status; {
	case at.Kind == devhook.AttemptDrop:
		return false // not forwarded: nothing to retry
	case s == 0, s == http.StatusRequestTimeout, s == http.StatusTooManyRequests, s >= 500:
		return true
	}
	return false
}

// connRefused reports whether a forward found nothing listening.
func connRefused(at *devhook.Attempt) bool {
	return at.Status == 0 && strings.HasPrefix(at.Error, "connection refused")
}

// howFailed says in words how a forward failed.
func howFailed(at *devhook.Attempt) string {
	if at.Status == 0 {
		return at.Error
	}
	if at.Error != "" {
		return fmt.Sprintf("the receiver answered %d (%s)", at.Status, at.Error)
	}
	return fmt.Sprintf("the receiver answered %d", at.Status)
}
