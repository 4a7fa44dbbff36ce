package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/devhook/devhook"
)

// Retries of the deliveries owed to the receiver (owe.go): the other way
// into forward.go beside a delivery's path from the relay, started by Run.
//
// Each retry is an attempt of kind devhook.AttemptRetry to the target the
// delivery's route chose at arrival, re-signed with a fresh t when the
// secret is known and the signature was valid. Between two retries of one
// delivery the wait doubles from Config.RetryMinBackoff to
// Config.RetryMaxBackoff, with jitter. The retries of a run go in order,
// one at a time. While the receiver refuses connections its port is
// probed every second, so that the deliveries waiting for it go as soon as
// it listens again rather than at their next retry. The state is removed
// when the receiver answers something else; after Config.RetryFor the
// agent gives up: the state becomes devhook.RetryFailed with the reason,
// and the result, a log line when there is no OnResult, and a
// devhook.ChangeRetry say so. Run resumes the owed deliveries of the store
// when it starts.

const (
	// retryConcurrency bounds the retries under way at once.
	retryConcurrency = 16
	// probeInterval is how often a receiver that refuses connections is
	// probed, at most.
	probeInterval = time.Second
)

// resume loads the retry states of the store: owed deliveries are tried
// at once, given up ones are counted.
func (a *Agent) resume() {
	ids, states, err := a.cfg.Store.AllRetries()
	if err != nil {
		a.cfg.Logf("reading the deliveries owed to the receiver: %v; they are retried once it can be read", err)
		return
	}
	now := a.cfg.Now()
	owed := 0
	for i, id := range ids {
		switch states[i].State {
		case devhook.RetryOwed:
			a.owed.add(id, a.storedKey(id, states[i].Route), states[i].Route, states[i].Since, now, false)
			owed++
		case devhook.RetryFailed:
			a.owed.mu.Lock()
			a.owed.failed++
			a.owed.mu.Unlock()
		}
	}
	if owed > 0 {
		a.cfg.Logf("%d deliveries are owed to the receiver since an earlier run; retrying them", owed)
	}
}

// Forget stops the retries of deliveries ids, which were deleted from the
// store with their retry states: a retry under way ends with its forward,
// neither recorded nor followed by another; the health's counts of owed
// and given-up deliveries follow.
func (a *Agent) Forget(ids []string) {
	failed := 0
	if _, states, err := a.cfg.Store.AllRetries(); err == nil {
		for _, st := range states {
			if st.State == devhook.RetryFailed {
				failed++
			}
		}
	} else {
		_, failed = a.owed.counts()
	}
	if a.owed.forget(ids, failed) {
		a.publishHealth()
	}
}

// storedKey is the run (orderKey) of recorded delivery id, which route
// rt took, or "" when its record cannot be read: then its retries wait
// for no other. One some parts of which cannot be read (its body, an
// attempt) keeps its place: its run and path are in its record, so the
// later deliveries of its run still wait for it, as before the restart.
func (a *Agent) storedKey(id string, rt *devhook.Route) string {
	d, _ := a.cfg.Store.Delivery(id) // partial: d and a *devhook.PartialError
	if d == nil {
		return ""
	}
	d.Route = rt
	if d.Event == (devhook.Event{}) {
		d.Event = devhook.ParseEvent(d.Body)
	}
	return orderKey(d)
}

// retryLoop retries owed deliveries until ctx ends, then waits for the
// retries under way, which get ShutdownGrace to finish.
func (a *Agent) retryLoop(ctx context.Context) {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(ShutdownGrace, cancelWork) })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()

	running := 0
	finished := make(chan struct{}, retryConcurrency)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var lastProbe time.Time
	probeEvery := min(probeInterval, a.cfg.RetryMaxBackoff)
	for {
		now := a.cfg.Now()
		due, wait, probe := a.owed.due(now, retryConcurrency-running)
		for _, e := range due {
			running++
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.retryOne(work, e)
				finished <- struct{}{}
			}()
		}
		if probe != nil {
			if now.Sub(lastProbe) >= probeEvery {
				lastProbe = now
				woke := false
				for target, rt := range probe {
					if a.probe(ctx, a.targetsOf(rt)[0]) {
						a.owed.wakeRefused(now, target)
						woke = true
					}
				}
				if woke {
					continue
				}
			}
			if w := probeEvery - now.Sub(lastProbe); wait == 0 || w < wait {
				wait = max(w, time.Nanosecond)
			}
		}
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.owed.kick:
		case <-finished:
			running--
		case <-timer.C:
		}
		timer.Stop()
	}
}

// probe reports whether target t accepts a connection.
func (a *Agent) probe(ctx context.Context, t *url.URL) bool {
	host := t.Host
	if t.Port() == "" {
		port := "80"
		if t.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(t.Hostname(), port)
	}
	d := net.Dialer{Timeout: min(probeInterval, a.cfg.RetryMaxBackoff)}
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// retryTarget is where owed delivery e goes: the target its route chose
// at arrival.
func (a *Agent) retryTarget(e *owedEntry) *url.URL {
	return a.targetsOf(e.route)[0]
}

// retryOne forwards owed delivery e again and decides what follows.
func (a *Agent) retryOne(ctx context.Context, e *owedEntry) {
	target := a.retryTarget(e)
	// Within its receiver's shares (shares.go), of the retries and of all
	// forwards: over one, it is neither read nor sent, and waits for its
	// next turn without counting as a try, each such wait twice as long as
	// the last (so that many owed to a receiver that hangs cost little).
	ok, _ := a.retryShares.take(target)
	if !ok || a.shares.full(target) {
		if ok {
			a.retryShares.give(target)
		}
		a.overShare(e)
		return
	}
	held := true
	giveBack := func() {
		if held {
			held = false
			a.retryShares.give(target)
		}
	}
	defer giveBack()
	d, err := a.cfg.Store.Delivery(e.id)
	// Attempts that cannot be read are its history: it goes all the same.
	err = devhook.SendError(d, err)
	if partial := (*devhook.PartialError)(nil); errors.As(err, &partial) && d != nil {
		giveBack() // nothing is sent
		a.unreadableOwed(ctx, e, d, partial)
		return
	}
	if err != nil {
		if devhook.ErrorCode(err) == devhook.ENOTFOUND {
			if a.owed.isForgotten(e) {
				return // deleted: Forget said so
			}
			a.cfg.Logf("delivery %s, owed to the receiver, is no longer recorded (deleted, or removed by retention); no more retries", e.id)
			_ = a.cfg.Store.DeleteRetry(e.id)
			a.owed.remove(e.id, false)
			a.publishHealth()
			return
		}
		// Reading fails too while the disk is full: try again later,
		// without counting a try.
		a.owed.reschedule(e, a.cfg.Now().Add(a.retryWait(0)), e.refused)
		return
	}
	d.Route = e.route // for live views
	// tries: the first forward and the retries before this one; none for
	// one owed behind another, whose first try this is. first: when the
	// first of them started.
	tries, first := priorTries(d, devhook.TargetURL(target, d.Path, d.RawQuery), e.since)
	kind := devhook.AttemptRetry
	if tries == 0 {
		// Owed behind an earlier delivery of its run: this is its first
		// try, recorded as the forward it is, not as a retry.
		kind = devhook.AttemptForward
		if d.Queued {
			kind = devhook.AttemptRedelivery
		}
	}
	at, sent := a.forwardWithin(ctx, d, target, kind, d.Verdict.OK() && a.getSecret() != "")
	giveBack() // what follows is this delivery's, not its receiver's
	if !sent {
		a.overShare(e)
		return
	}
	e.busy = 0
	at.Route = e.route
	rec := a.recordAttempt(d, at)
	if a.owed.isForgotten(e) {
		return // deleted while it was forwarded: nothing follows
	}
	tries++ // this one
	now := a.cfg.Now()
	if !retryable(rec) {
		if !a.settle(ctx, e.id, nil) {
			a.owed.reschedule(e, now, false) // stopping: the state stays, so does the entry
			return
		}
		a.owed.remove(e.id, false)
		a.receiverAnswered(e.target)
		a.publishRetry(d, rec, nil)
		a.publishHealth()
		if a.cfg.OnResult != nil {
			r := Result{Delivery: d, Attempt: rec, Status: rec.Status, Retry: tries - 1, Since: first}
			// Never tried before: it waited behind an earlier delivery of
			// its run since e.since, and this, its first try, delivered it.
			r.Followed = tries == 1
			a.cfg.OnResult(r)
		}
		return
	}
	if over := now.Sub(e.since); over >= a.cfg.RetryFor {
		st := devhook.RetryState{State: devhook.RetryFailed, Since: e.since,
			Reason: fmt.Sprintf("gave up after %d attempts over %s: %s", tries, FormatDuration(over), howFailed(rec))}
		if !a.settle(ctx, e.id, &st) {
			a.owed.reschedule(e, now, connRefused(rec))
			return
		}
		a.owed.remove(e.id, true)
		a.gaveUp(d, rec, st)
		return
	}
	a.owed.reschedule(e, now.Add(a.retryWait(tries-1)), connRefused(rec))
}

// overShare puts off owed delivery e, not sent because its receiver's
// share is full: after the retry backoff's next step each time it happens
// in a row, without counting a try.
func (a *Agent) overShare(e *owedEntry) {
	wait := a.retryWait(e.busy)
	e.busy++
	a.owed.reschedule(e, a.cfg.Now().Add(wait), e.refused)
}

// unreadableOwed is retryOne for owed delivery e, whose body cannot be
// read from the store (its body file damaged, cut short or missing; its
// value damaged): it is not sent, as devhook sends a delivery only with
// its body. Said once, it is read again with the retries'
// backoff (a read may fail for a while), and given up once --retry-for
// has passed, as for a receiver that never takes it, rather than owed for
// ever without a word.
func (a *Agent) unreadableOwed(ctx context.Context, e *owedEntry, d *devhook.Delivery, pe *devhook.PartialError) {
	now := a.cfg.Now()
	if over := now.Sub(e.since); over >= a.cfg.RetryFor {
		st := devhook.RetryState{State: devhook.RetryFailed, Since: e.since, Route: e.route,
			Reason: fmt.Sprintf("gave up after %s: %v", FormatDuration(over), pe.Unsendable("retry"))}
		if !a.settle(ctx, e.id, &st) {
			a.owed.reschedule(e, now, e.refused)
			return
		}
		a.owed.remove(e.id, true)
		a.gaveUp(d, nil, st)
		return
	}
	if e.unreadable == 0 {
		held := ""
		switch n := a.owed.behind(e); {
		case n == 1:
			held = "; the later delivery of its run waits behind it until then"
		case n > 1:
			held = fmt.Sprintf("; the %d later deliveries of its run wait behind it until then", n)
		}
		a.cfg.Logf("delivery %s, owed to the receiver, is not sent: %v; devhook reads it again with the retries' backoff, and gives up on it after --retry-for (%s)%s", e.id, pe, FormatDuration(a.cfg.RetryFor), held)
	}
	e.unreadable++
	a.owed.reschedule(e, now.Add(a.retryWait(e.unreadable-1)), e.refused)
}

// settle records the end of a delivery's retries: st, or no state when
// nil. A failed write is tried again until ctx ends, at the store's gate
// with the held deliveries' (queued.go: untilWritten), so that a restart
// does not send a delivered one again.
func (a *Agent) settle(ctx context.Context, id string, st *devhook.RetryState) bool {
	write := func() error {
		if st == nil {
			return a.cfg.Store.DeleteRetry(id)
		}
		return a.cfg.Store.PutRetry(id, *st)
	}
	if err := write(); err != nil {
		a.health.failed(err)
		if !a.untilWritten(ctx.Done(), write) {
			return false
		}
	}
	a.health.ok()
	return true
}

// priorTries counts the times d was sent to target, replays aside (an
// attempt that cannot be read is taken for one), and returns when the
// first of them started, or since when there was none.
func priorTries(d *devhook.Delivery, target string, since time.Time) (n int, first time.Time) {
	first = since
	for i := range d.Attempts {
		if at := &d.Attempts[i]; at.ReadError != "" || at.Kind != devhook.AttemptReplay && at.Target == target {
			if n == 0 && at.ReadError == "" {
				first = at.StartedAt
			}
			n++
		}
	}
	return n, first
}
