package agent

// The deliveries of one connection to the relay, each handled on a worker
// of a pool: see serve.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook/relay/relayclient"
)

// InFlight is how many deliveries from the relay are being handled now:
// what stopping waits for, up to ShutdownGrace.
func (a *Agent) InFlight() int {
	if p := a.slots.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// serve handles one connection until it ends. It waits for the deliveries
// it started.
//
// Deliveries run on workers that outlive them: a worker that finished one
// waits for the next, so that its stack, grown by the first delivery, is
// not grown again (a goroutine per delivery copied its stack once per
// delivery). There are at most Concurrency workers; one that must hold a
// queued delivery until the disk takes it leaves the pool. The deliveries
// of one run go one after the other (order.go): those waiting behind one
// under way take no slot, and the worker that finishes one goes on with
// the next of its run. received, when not nil, is called when the first
// delivery has arrived, before it is handled.
func (a *Agent) serve(ctx context.Context, conn *relayclient.Conn, received func()) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, a.cfg.Concurrency)
	a.slots.Store(&sem)
	// Deliveries under way when ctx ends get a grace period to finish, so
	// that stopping devhook does not cut a receiver off mid-request.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	// Queued deliveries held because they could not be recorded belong to
	// this connection: when it ends, the relay sends them again on the
	// next one, so they are dropped here.
	held, dropHeld := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() {
		conn.Close()
		time.AfterFunc(ShutdownGrace, cancelWork)
	})
	lines := orderLines{route: a.routeOf}
	next := make(chan job)      // to an idle worker
	quit := make(chan struct{}) // idle workers leave
	var pooled atomic.Int32     // workers in the pool
	defer func() {
		stop()
		conn.Close()
		dropHeld()
		lines.close()
		close(quit)
		wg.Wait()
		cancelWork()
	}()
	// handle runs j, whose slot of sem is taken. It returns false when it
	// freed the slot to hold j's delivery, leaving the pool if *inPool.
	handle := func(j job, inPool *bool) bool {
		d := j.d
		res := a.process(work, d)
		if res.hold != 0 {
			// Waiting for the disk must not take a slot from live
			// deliveries, which are answered 503 meanwhile; nor a
			// worker, which the slot would wait for.
			if *inPool {
				*inPool = false
				pooled.Add(-1)
			}
			<-sem
			if a.hold(work, held, d, &res) {
				a.finish(conn, d, &res)
			} else {
				a.owed.unreserve(d.ID) // sent again on the next connection
			}
			return false
		}
		a.finish(conn, d, &res)
		return true
	}
	worker := func(j job) {
		defer wg.Done()
		inPool := true
		for {
			kept := handle(j, &inPool)
			if nj, ok := lines.next(j); ok {
				// The next delivery of j's run, on this worker.
				if !kept {
					select {
					case sem <- struct{}{}:
					case <-held.Done():
						lines.next(nj) // the connection ended: the rest is dropped
						return
					}
				}
				j = nj
				continue
			}
			if kept {
				<-sem
			}
			if !inPool {
				return
			}
			select {
			case j = <-next:
			case <-quit:
				pooled.Add(-1)
				return
			}
		}
	}
	for {
		d, err := conn.Receive()
		if err != nil {
			return err
		}
		if received != nil {
			received()
			received = nil
		}
		j, now := lines.admit(d)
		if !now {
			continue // behind an earlier delivery of its run
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			lines.next(j)
			return ctx.Err()
		}
		select {
		case next <- j:
			continue
		default:
		}
		if pooled.Load() < int32(a.cfg.Concurrency) {
			pooled.Add(1)
			wg.Add(1)
			go worker(j)
			continue
		}
		// Every worker is taken, and one of them freed the slot just
		// taken: it is on its way back.
		select {
		case next <- j:
		case <-ctx.Done():
			<-sem
			lines.next(j)
			return ctx.Err()
		}
	}
}
