package agent

// Receive: the deliveries of one connection to the relay, each run on the
// worker that read it.
//
// The workers of a connection take turns at reading it. The one whose
// turn it is reads until a delivery is to run now (order.go keeps the
// others back), takes a slot for it, hands its turn on (to an idle worker,
// or to a new one while the pool has fewer than Config.Concurrency), and
// runs the delivery itself (live.go: process, then finish), then the next
// ones of its run; then it waits for its turn again. So a delivery stays
// on the goroutine that read it, from the WebSocket to its answer: only
// the turn to read passes from one goroutine to another.
//
// Bounds: at most Concurrency deliveries under way, a slot each; at most
// Concurrency workers in the pool, and when every one runs a delivery,
// nobody reads until one is done; one reader at a time (relayclient.Conn's
// Receive: each turn handed on through the pool's lock or channel, which
// orders one reader's calls before the next one's); workers that outlive
// their delivery, so that a worker's stack, grown by the first delivery,
// is not grown again; all of them gone when serve returns. A worker that
// must hold a queued delivery until the disk takes it (queued.go) frees
// its slot and leaves the pool; one starts in its place if nobody reads.

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

// serve handles one connection until it ends, and waits for the
// deliveries under way. received, when not nil, is called when the first
// delivery has arrived, before it is handled.
func (a *Agent) serve(ctx context.Context, conn *relayclient.Conn, received func()) error {
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
	p := &pool{a: a, conn: conn, work: work, held: held, received: received,
		lines: orderLines{route: a.routeOf}, sem: sem,
		turn: make(chan struct{}, 1), quit: make(chan struct{}), end: make(chan error, 1)}
	var wg sync.WaitGroup
	p.start = func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.runWorker()
		}()
	}
	p.n = 1
	p.start()
	var err error
	select {
	case err = <-p.end:
	case <-ctx.Done():
		err = ctx.Err()
	}
	stop()
	conn.Close()
	dropHeld()
	p.lines.close()
	close(p.quit)
	wg.Wait()
	cancelWork()
	return err
}

// pool is the workers of one connection.
type pool struct {
	a        *Agent
	conn     *relayclient.Conn
	work     context.Context // the deliveries': outlives ctx by ShutdownGrace
	held     context.Context // the connection's: a held delivery is dropped when it ends
	received func()          // see serve; read only by the worker whose turn it is
	lines    orderLines
	sem      chan struct{} // a slot per delivery under way
	start    func()        // starts a worker, whose turn it is

	mu   sync.Mutex
	n    int  // workers in the pool
	idle int  // of them, waiting for their turn
	free bool // nobody reads: the pool was full and no worker idle; the next one done reads
	turn chan struct{}
	quit chan struct{} // closed once the connection ended: idle workers leave

	end chan error // why the connection ended: the first error, the rest are dropped
}

// runWorker is a worker: it reads, runs what it read, and waits for its turn
// again, until the connection ends or it leaves the pool.
//
// The turn to read is handed on once per delivery read (handOnce), as
// late as it can be: after the forward's request is written, before
// anything that may wait (a dial, a large body's write, a held write, the
// answer to the relay). Handing it on wakes another worker, and the
// processor it runs on: done at once, that wake-up was 9.5 µs of the 180
// on the agent's path of a lone delivery (go run ./bench at c=1); after the
// write, the receiver is at work meanwhile.
func (p *pool) runWorker() {
	w := &worker{p: p, inPool: true}
	w.ctx = context.WithValue(p.work, turnKey{}, w)
	for {
		j, ok := p.read()
		if !ok {
			return
		}
		w.handed.Store(false)
		if !p.a.runLine(w, j) || !p.await() {
			return
		}
	}
}

// read reads the connection, its turn to, until a delivery is to run now,
// and takes a slot for it. It returns false when the connection ended.
func (p *pool) read() (job, bool) {
	for {
		d, err := p.conn.Receive()
		if err != nil {
			p.ended(err)
			return job{}, false
		}
		if p.received != nil {
			p.received()
			p.received = nil
		}
		j := job{d: d}
		if wait := p.conn.ResponseTimeout(); wait > 0 && !d.Queued {
			j.sender = senderWait{wait: wait, by: p.a.cfg.Now().Add(wait)}
		}
		j, now := p.lines.admit(j)
		if !now {
			continue // behind an earlier delivery of its run
		}
		select {
		case p.sem <- struct{}{}:
			return j, true
		case <-p.held.Done():
			p.lines.next(j)
			p.ended(p.held.Err())
			return job{}, false
		}
	}
}

func (p *pool) ended(err error) {
	select {
	case p.end <- err:
	default:
	}
}

// handOn hands the turn to read on: to an idle worker, or to a new one
// while the pool has room; with neither, the next worker done takes it.
func (p *pool) handOn() {
	p.mu.Lock()
	switch {
	case p.idle > 0:
		p.idle--
		p.mu.Unlock()
		p.turn <- struct{}{} // one turn only: never more than one waits here
	case p.n < cap(p.sem):
		p.n++
		p.mu.Unlock()
		p.start()
	default:
		p.free = true
		p.mu.Unlock()
	}
}

// await waits for the worker's turn to read: at once when nobody reads.
// It returns false when the connection ended.
func (p *pool) await() bool {
	p.mu.Lock()
	if p.free {
		p.free = false
		p.mu.Unlock()
		return true
	}
	p.idle++
	p.mu.Unlock()
	select {
	case <-p.turn:
		return true
	case <-p.quit:
		return false
	}
}

// runLine runs j, whose slot is taken, on worker w, then the next
// deliveries of its run (order.go), each answered (finish). It returns
// false when w left the pool to hold a delivery.
func (a *Agent) runLine(w *worker, j job) bool {
	p := w.p
	w.slot = true
	for {
		res := a.process(w.ctx, w, j.d, j.sender)
		w.handOnce() // before the answer's write, and the wait for a slot
		if !res.ended {
			a.finish(p.conn, j.d, &res)
		}
		nj, ok := p.lines.next(j)
		if !ok {
			break
		}
		if !w.slot {
			select {
			case p.sem <- struct{}{}:
				w.slot = true
			case <-p.held.Done():
				p.lines.next(nj) // the connection ended: the rest is dropped
				return false
			}
		}
		j = nj
	}
	if w.slot {
		<-p.sem
	}
	return w.inPool
}

// worker is a worker's state, and the holder (queued.go) of the delivery
// it runs.
type worker struct {
	p      *pool
	ctx    context.Context // the pool's work, carrying the worker under turnKey
	inPool bool            // it may leave the pool once only: then it ends with its run's line
	slot   bool            // the delivery it runs holds a slot
	// handed: the turn to read was handed on since the worker read. A
	// delivery's copies may hand it on from their own goroutines.
	handed atomic.Bool
}

// handOnce hands the turn to read on, the first time it is called after
// the worker read a delivery.
func (w *worker) handOnce() {
	if !w.handed.Swap(true) {
		w.p.handOn()
	}
}

// turnKey is the context key of the worker running a delivery: the
// forward hands its turn to read on (handTurnOn) once the request is
// written.
type turnKey struct{}

// turnOf returns the worker running the delivery ctx is for; nil when it
// is not a worker's (a replay, a retry).
func turnOf(ctx context.Context) *worker {
	w, _ := ctx.Value(turnKey{}).(*worker)
	return w
}

// handTurnOn hands on the turn to read of the worker ctx carries, if any.
func handTurnOn(ctx context.Context) {
	if w := turnOf(ctx); w != nil {
		w.handOnce()
	}
}

func (w *worker) leave() {
	w.handOnce() // it is going to wait
	if w.slot {
		<-w.p.sem
		w.slot = false
	}
	if !w.inPool {
		return
	}
	w.inPool = false
	p := w.p
	p.mu.Lock()
	if p.free {
		// Nobody reads, and every worker may be held: one starts in this
		// one's place, and reads.
		p.free = false
		p.mu.Unlock()
		p.start()
		return
	}
	p.n--
	p.mu.Unlock()
}

func (w *worker) connEnded() <-chan struct{} { return w.p.held.Done() }
