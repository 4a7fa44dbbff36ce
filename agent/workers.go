package agent

// The deliveries of one connection to the relay, each handled on a worker
// of a pool: see serve.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
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
// queued delivery until the disk takes it leaves the pool.
func (a *Agent) serve(ctx context.Context, conn *relay.Conn) error {
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
	next := make(chan *devhook.Delivery) // to an idle worker
	quit := make(chan struct{})          // idle workers leave
	var pooled atomic.Int32              // workers in the pool
	defer func() {
		stop()
		conn.Close()
		dropHeld()
		close(quit)
		wg.Wait()
		cancelWork()
	}()
	// handle runs d, whose slot of sem is taken, and frees the slot. It
	// returns false when the worker left the pool to hold d.
	handle := func(d *devhook.Delivery) bool {
		res := a.process(work, d)
		if res.hold != 0 {
			// Waiting for the disk must not take a slot from live
			// deliveries, which are answered 503 meanwhile; nor a
			// worker, which the slot would wait for.
			pooled.Add(-1)
			<-sem
			if a.hold(work, held, d, &res) {
				a.finish(conn, d, &res)
			}
			return false
		}
		a.finish(conn, d, &res)
		<-sem
		return true
	}
	worker := func(d *devhook.Delivery) {
		defer wg.Done()
		for handle(d) {
			select {
			case d = <-next:
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
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case next <- d:
			continue
		default:
		}
		if pooled.Load() < int32(a.cfg.Concurrency) {
			pooled.Add(1)
			wg.Add(1)
			go worker(d)
			continue
		}
		// Every worker is taken, and one of them freed the slot just
		// taken: it is on its way back.
		select {
		case next <- d:
		case <-ctx.Done():
			<-sem
			return ctx.Err()
		}
	}
}
