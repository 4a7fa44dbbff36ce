package emulator

import (
	"context"
	"sort"
	"time"

	"github.com/devhook/devhook"
)

// A run's schedule: queued → running → its end, each move a store write
// retried with backoff, and the runs a restart finds unfinished resumed.

// resumeRuns continues the schedule of runs a previous emulator with the
// same data directory left unfinished. Deliveries already sent are not
// sent again.
func (e *Emulator) resumeRuns() {
	e.mu.Lock()
	var keys []string
	for k, rn := range e.st.runs {
		if !final(rn.Status) {
			keys = append(keys, k)
		}
	}
	e.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		e.schedule(k, nil)
	}
}

// schedule moves the run at key to succeeded, one step after each of
// QueueTime and RunTime, and sends a run.status event for every state it
// moves to (first, the queued one, before them when not nil). A cancel
// wakes it: it then sends the canceled event and stops. One goroutine
// keeps the time, a second sends the events in order, each after the
// previous one's first attempts, so that a slow receiver does not hold up
// the run.
func (e *Emulator) schedule(key string, first *devhook.RunStatus) {
	wake := make(chan struct{}, 1)
	e.mu.Lock()
	account := e.st.runs[key].Account
	e.wake[key] = wake
	e.mu.Unlock()
	forget := func() {
		e.mu.Lock()
		if e.wake[key] == wake {
			delete(e.wake, key)
		}
		e.mu.Unlock()
	}
	events := make(chan devhook.RunStatus, 3) // queued, running, and succeeded or canceled
	started := e.goroutine(func(ctx context.Context) {
		for ev := range events {
			e.mu.Lock()
			hooks := e.subscribers(account)
			e.mu.Unlock()
			e.deliverAll(ctx, account, hooks, ev)
		}
	})
	if !started {
		forget()
		return
	}
	started = e.goroutine(func(ctx context.Context) {
		defer close(events)
		defer forget()
		if first != nil {
			events <- *first
		}
		// A run of a pushed application holds one of MaxParallelRuns
		// slots from leaving queued to its end: past them, runs stay
		// queued.
		holding := false
		defer func() {
			if holding {
				<-e.slots
			}
		}()
		for {
			e.mu.Lock()
			rn := e.st.runs[key]
			status, ev := rn.Status, rn.event()
			e.mu.Unlock()
			var next string
			var wait time.Duration
			switch status {
			case statusQueued:
				next, wait = statusRunning, e.cfg.QueueTime
			case statusRunning:
				if rn.Binary != nil {
					if !holding { // resumed after a restart while running
						select {
						case e.slots <- struct{}{}:
							holding = true
						case <-ctx.Done():
							return
						case <-wake:
							continue
						}
					}
					run := *rn
					res := e.execute(ctx, key, &run, wake)
					if ctx.Err() != nil {
						e.forgetLogs(key)
						return // Close: the run goes on when an emulator starts again
					}
					<-e.slots
					holding = false
					var ev devhook.RunStatus
					var moved bool
					if !e.retrying(ctx, "saving how run "+rn.ID+" ended", func() (err error) {
						ev, moved, err = e.finish(key, res)
						return err
					}) {
						return // Close: the run executes again at the next start
					}
					if moved {
						events <- ev
					}
					continue // a cancel's turn sends it
				}
				next, wait = statusSucceeded, e.cfg.RunTime
			case statusCanceled:
				events <- ev
				return
			default:
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-wake:
				t.Stop()
				continue // canceled: the next turn sends it
			case <-t.C:
			}
			if status == statusQueued && rn.Binary != nil && !holding {
				select {
				case e.slots <- struct{}{}:
					holding = true
				case <-ctx.Done():
					return
				case <-wake:
					continue
				}
			}
			var moved bool
			if !e.retrying(ctx, "saving run "+rn.ID+" as "+next, func() (err error) {
				ev, moved, err = e.transition(key, status, next)
				return err
			}) {
				return
			}
			if moved {
				events <- ev
			}
		}
	})
	if !started {
		forget()
		close(events)
	}
}

// Bounds of the waits between tries of a write that failed.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 30 * time.Second
)

// retrying calls f until it succeeds, waiting between tries from
// retryFirst, doubling to retryMax, give or take a fifth; the first
// failure is logged, and the count once it succeeds. It returns false
// when ctx ends first.
func (e *Emulator) retrying(ctx context.Context, what string, f func() error) bool {
	fails := failures{what: what, logf: e.cfg.Logf}
	wait := retryFirst
	for {
		err := f()
		if err == nil {
			fails.ok()
			return true
		}
		fails.fail(err)
		t := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// transition moves the run from status from to status to and returns the
// event to send. moved is false when the run is no longer in from (a
// cancel came first).
func (e *Emulator) transition(key, from, to string) (ev devhook.RunStatus, moved bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.st.runs[key]
	if old.Status != from {
		return devhook.RunStatus{}, false, nil
	}
	rn := *old
	now := e.now()
	rn.Status = to
	switch to {
	case statusRunning:
		rn.InitiatedAt = now
	case statusSucceeded:
		rn.FinishedAt = now
	}
	if err := e.persist(op{bucketRuns, key, &rn}); err != nil {
		return devhook.RunStatus{}, false, err
	}
	e.st.runs[key] = &rn
	return rn.event(), true, nil
}

// finish records how the execution of the running run at key ended and
// returns the event to send. moved is false when the run is no longer
// running (a cancel came first): it then keeps only the logs.
func (e *Emulator) finish(key string, res outcome) (ev devhook.RunStatus, moved bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer delete(e.logs, key) // the run keeps them from now on
	old := e.st.runs[key]
	rn := *old
	rn.Logs = res.logs
	moved = old.Status == statusRunning && res.status != ""
	if moved {
		rn.Status, rn.FinishedAt = res.status, e.now()
		rn.Output, rn.Error = res.output, res.errMsg
	}
	if err := e.persist(op{bucketRuns, key, &rn}); err != nil {
		return devhook.RunStatus{}, false, err
	}
	e.st.runs[key] = &rn
	return rn.event(), moved, nil
}
