package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
)

// Retries of owed deliveries.
//
// A queued delivery waited in the relay while no agent was connected; its
// sender got 202 and will not send it again. When its forward gets no
// answer, or 408, 429 or 5xx, the agent owes it to the receiver: it
// records a devhook.RetryState (Store.PutRetry) before it acknowledges the
// relay, then retries it from here, each retry an attempt of kind
// devhook.AttemptRetry, re-signed with a fresh t when the secret is known
// and the signature was valid. Between two retries of one delivery the
// wait doubles from Config.RetryMinBackoff to Config.RetryMaxBackoff, with
// jitter. While the receiver refuses connections its port is probed every
// second, so that the deliveries waiting for it go as soon as it listens
// again rather than at their next retry. The state is removed when the
// receiver answers something else; after Config.RetryFor the agent gives
// up: the state becomes devhook.RetryFailed with the reason, and the
// result, a log line when there is no OnResult, and a devhook.ChangeRetry
// say so. Run resumes the owed deliveries of the store when it starts.

const (
	// retryConcurrency bounds the retries under way at once.
	retryConcurrency = 16
	// probeInterval is how often a receiver that refuses connections is
	// probed, at most.
	probeInterval = time.Second
)

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

// refused reports whether a forward found nothing listening.
func refused(at *devhook.Attempt) bool {
	return at.Status == 0 && strings.HasPrefix(at.Error, "connection refused")
}

// failure says in words how a forward failed.
func failure(at *devhook.Attempt) string {
	if at.Status == 0 {
		return at.Error
	}
	if at.Error != "" {
		return fmt.Sprintf("the receiver answered %d (%s)", at.Status, at.Error)
	}
	return fmt.Sprintf("the receiver answered %d", at.Status)
}

type owedEntry struct {
	id  string
	key string // its run (orderKey); "" when unknown: then it waits for none
	// route chose its target at arrival (nil: the first --forward
	// target); target is that target's key (targetKey).
	route   *devhook.Route
	target  string
	since   time.Time
	next    time.Time
	refused bool // the last try found nothing listening: a probe may wake it
	running bool
	// reserved: owed behind an earlier delivery of its run, its state not
	// yet recorded (oweBehind); not tried until it is.
	reserved bool
	// forgotten: the delivery was deleted (Forget); a retry under way
	// when it was ends there.
	forgotten bool
}

// retrier holds the owed deliveries. Its lock is never taken on the path
// of a delivery while nothing is owed: n and refused are read first.
type retrier struct {
	n       atomic.Int32 // len(byID)
	refused atomic.Int32 // entries whose last try was refused
	kick    chan struct{}

	mu     sync.Mutex
	byID   map[string]*owedEntry
	byKey  map[string]int // entries of each run
	failed int
}

func (r *retrier) init() {
	r.kick = make(chan struct{}, 1)
	r.byID = make(map[string]*owedEntry)
	r.byKey = make(map[string]int)
}

func (r *retrier) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *retrier) counts() (owed, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID), r.failed
}

// add makes id, of run key, owed to the target of route rt, to be tried
// at next (once it is the first of its run). A reserved entry of id is
// released.
func (r *retrier) add(id, key string, rt *devhook.Route, since, next time.Time, refused bool) {
	r.mu.Lock()
	if old := r.byID[id]; old != nil {
		if old.reserved {
			old.reserved, old.since, old.next = false, since, next
			old.route, old.target = rt, targetKey(rt)
		}
		r.mu.Unlock()
		r.poke()
		return
	}
	r.insert(&owedEntry{id: id, key: key, route: rt, target: targetKey(rt), since: since, next: next, refused: refused})
	r.mu.Unlock()
	r.poke()
}

// insert adds e; r.mu is held.
func (r *retrier) insert(e *owedEntry) {
	r.byID[e.id] = e
	if e.key != "" {
		r.byKey[e.key]++
	}
	r.n.Store(int32(len(r.byID)))
	if e.refused {
		r.refused.Add(1)
	}
}

// reserve makes id owed behind the deliveries of run key that are owed
// already, and reports whether there are any. A reserved entry is not
// tried until add releases it, once its state is recorded, or unreserve
// drops it.
func (r *retrier) reserve(id, key string, now time.Time) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey[key] == 0 || r.byID[id] != nil {
		return false
	}
	r.insert(&owedEntry{id: id, key: key, since: now, next: now, reserved: true})
	return true
}

// unreserve drops id's entry if it is still reserved.
func (r *retrier) unreserve(id string) {
	if r.n.Load() == 0 {
		return
	}
	r.mu.Lock()
	e := r.byID[id]
	r.mu.Unlock()
	if e != nil && e.reserved {
		r.remove(id, false)
	}
}

func (r *retrier) remove(id string, failed bool) {
	r.mu.Lock()
	r.removeLocked(id, failed)
	r.mu.Unlock()
	r.poke()
}

// removeLocked is remove with r.mu held.
func (r *retrier) removeLocked(id string, failed bool) {
	if e := r.byID[id]; e != nil {
		if e.refused {
			r.refused.Add(-1)
		}
		if e.key != "" {
			if r.byKey[e.key]--; r.byKey[e.key] <= 0 {
				delete(r.byKey, e.key)
			}
		}
		delete(r.byID, id)
		r.n.Store(int32(len(r.byID)))
	}
	if failed {
		r.failed++
	}
}

// forget drops the entries of ids, deleted, and makes failed the count of
// deliveries given up that the store still has. It reports whether an
// entry was dropped.
func (r *retrier) forget(ids []string, failed int) bool {
	r.mu.Lock()
	dropped := false
	for _, id := range ids {
		if e := r.byID[id]; e != nil {
			e.forgotten = true
			r.removeLocked(id, false)
			dropped = true
		}
	}
	changed := dropped || r.failed != failed
	r.failed = failed
	r.mu.Unlock()
	r.poke()
	return changed
}

// isForgotten reports whether e's delivery was deleted.
func (r *retrier) isForgotten(e *owedEntry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return e.forgotten
}

// reschedule sets the next try of e after one that failed.
func (r *retrier) reschedule(e *owedEntry, next time.Time, refused bool) {
	r.mu.Lock()
	if e.forgotten {
		r.mu.Unlock()
		return
	}
	if e.refused != refused {
		if refused {
			r.refused.Add(1)
		} else {
			r.refused.Add(-1)
		}
	}
	e.next, e.refused, e.running = next, refused, false
	r.mu.Unlock()
	r.poke()
}

// wakeRefused makes every entry owed to target (targetKey) whose last
// try was refused due at now.
func (r *retrier) wakeRefused(now time.Time, target string) {
	r.mu.Lock()
	for _, e := range r.byID {
		if e.refused && e.target == target && e.next.After(now) {
			e.next = now
		}
	}
	r.mu.Unlock()
	r.poke()
}

func (r *retrier) state(id string) *devhook.RetryState {
	if r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.byID[id]; e != nil {
		return &devhook.RetryState{State: devhook.RetryOwed, Since: e.since}
	}
	return nil
}

// due marks up to n entries due at now as running and returns them, oldest
// delivery first. Of a run's entries only the first (the lowest id) is
// tried: the others wait for it to be delivered or given up. wait is how
// long until the next entry is due (0: none is); probe has the route of
// each target (targetKey) that a refused entry waits for.
func (r *retrier) due(now time.Time, n int) (due []*owedEntry, wait time.Duration, probe map[string]*devhook.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := make(map[string]string, len(r.byKey)) // run → its lowest id
	for _, e := range r.byID {
		if e.key != "" {
			if f, ok := first[e.key]; !ok || e.id < f {
				first[e.key] = e.id
			}
		}
	}
	var next time.Time
	for _, e := range r.byID {
		switch {
		case e.running, e.reserved, e.key != "" && first[e.key] != e.id:
		case !e.next.After(now):
			due = append(due, e)
		default:
			if next.IsZero() || e.next.Before(next) {
				next = e.next
			}
			if _, ok := probe[e.target]; e.refused && !ok {
				if probe == nil {
					probe = make(map[string]*devhook.Route)
				}
				probe[e.target] = e.route
			}
		}
	}
	slices.SortFunc(due, func(a, b *owedEntry) int { return strings.Compare(a.id, b.id) })
	// The rest of those due wait for a retry to finish, which wakes the
	// loop.
	due = due[:min(len(due), max(n, 0))]
	for _, e := range due {
		e.running = true
	}
	if !next.IsZero() {
		wait = max(next.Sub(now), time.Nanosecond)
	}
	return due, wait, probe
}

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
// rt took, or "" when it cannot be read: then its retries wait for no
// other.
func (a *Agent) storedKey(id string, rt *devhook.Route) string {
	d, err := a.cfg.Store.Delivery(id)
	if err != nil {
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

// receiverAnswered is called when target (targetKey) answered a forward:
// the deliveries waiting for it to listen again can go.
func (a *Agent) receiverAnswered(target string) {
	if a.owed.refused.Load() > 0 {
		a.owed.wakeRefused(a.cfg.Now(), target)
	}
}

// targetKey names the target of route rt among the owed deliveries: ""
// for the first --forward target (no route, the default route), else the
// route's target.
func targetKey(rt *devhook.Route) string {
	if rt == nil || rt.Index == 0 {
		return ""
	}
	return rt.Target
}

// retryTarget is where owed delivery e goes: the target its route chose
// at arrival.
func (a *Agent) retryTarget(e *owedEntry) *url.URL {
	return a.targetsOf(e.route)[0]
}

// owe returns the retry state of queued delivery d whose forward at failed.
func (a *Agent) owe(d *devhook.Delivery, at *devhook.Attempt) devhook.RetryState {
	st := devhook.RetryState{State: devhook.RetryOwed, Since: at.StartedAt, Route: d.Route}
	if a.cfg.RetryFor < 0 {
		st.State = devhook.RetryFailed
		st.Reason = "gave up after 1 attempt (retries are off): " + failure(at)
	}
	return st
}

// owedRecorded takes over d, whose forward at failed, once its retry state
// st is recorded.
func (a *Agent) owedRecorded(d *devhook.Delivery, at *devhook.Attempt, st devhook.RetryState) {
	if st.State == devhook.RetryFailed {
		a.owed.remove(d.ID, true)
		a.gaveUp(d, at, st)
		return
	}
	refused := at != nil && refused(at)
	a.owed.add(d.ID, orderKey(d), st.Route, st.Since, a.cfg.Now().Add(a.retryWait(0)), refused)
	a.publishRetry(d, at, &st)
	a.publishHealth()
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

// retryOne forwards owed delivery e again and decides what follows.
func (a *Agent) retryOne(ctx context.Context, e *owedEntry) {
	d, err := a.cfg.Store.Delivery(e.id)
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
	at := a.forward(ctx, d, a.retryTarget(e), devhook.AttemptRetry, d.Verdict.OK() && a.getSecret() != "", nil, "")
	at.Route = e.route
	tries := 0 // the first forward and the retries before this one; none for one owed behind another
	for i := range d.Attempts {
		if k := d.Attempts[i].Kind; k != devhook.AttemptReplay && d.Attempts[i].Target == at.Target {
			tries++
		}
	}
	rec := a.record(d, at)
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
			a.cfg.OnResult(Result{Delivery: d, Attempt: rec, Status: rec.Status, Retry: max(tries-1, 1), Since: e.since})
		}
		return
	}
	if over := now.Sub(e.since); over >= a.cfg.RetryFor {
		st := devhook.RetryState{State: devhook.RetryFailed, Since: e.since,
			Reason: fmt.Sprintf("gave up after %d attempts over %s: %s", tries, FormatDuration(over), failure(rec))}
		if !a.settle(ctx, e.id, &st) {
			a.owed.reschedule(e, now, refused(rec))
			return
		}
		a.owed.remove(e.id, true)
		a.gaveUp(d, rec, st)
		return
	}
	a.owed.reschedule(e, now.Add(a.retryWait(tries-1)), refused(rec))
}

// settle records the end of a delivery's retries: st, or no state when
// nil. A failed write is tried again until ctx ends, so that a restart
// does not send a delivered one again.
func (a *Agent) settle(ctx context.Context, id string, st *devhook.RetryState) bool {
	wait := a.cfg.MinBackoff
	for {
		var err error
		if st == nil {
			err = a.cfg.Store.DeleteRetry(id)
		} else {
			err = a.cfg.Store.PutRetry(id, *st)
		}
		if err == nil {
			a.storeOK()
			return true
		}
		a.storeFailed(err)
		t := time.NewTimer(a.jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(wait*2, holdMaxBackoff, a.cfg.MaxBackoff)
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
