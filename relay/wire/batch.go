package wire

import (
	"bytes"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Under load, many goroutines send frames on one WebSocket at once: the
// relay's ingress handlers their deliveries, the agent's deliveries their
// responses. Writing each frame with its own write(2) cost each side a
// system call per delivery, and the other side a wake-up per frame. So
// frames go through a Writer, which gathers the frames of callers that
// arrive while a write is in progress and sends them together: each is
// still its own WebSocket message (the protocol does not change), but the
// messages of one batch leave in one write(2) when the connection is a
// corkConn. An idle Writer writes at once: nothing waits for a timer or
// for another goroutine, so a lone frame leaves as soon as before.
//
// On two cores the callers seldom overlap by themselves: the goroutines
// the network poller made ready run one after the other, and each would
// find no write in progress and make its own. So a Writer that has lately
// sent a batch of several callers' messages (there is company) yields
// once before it writes: the callers already ready to run queue their
// messages behind its own, and leave in its write(2). At 32 senders this
// took the relay's write(2)s from 2.0 to 1.4 a delivery and the agent's
// from 2.1 to 1.5 (go run ./bench). A Writer whose batches are one
// caller's (one sender at a time; the drain's WriteAll of many messages
// is one caller too) stops yielding after gatherFor of them: a yield with
// nobody to wait for costs a scheduling round and wakes an idle
// processor.

// Writer sends binary messages on ws for many goroutines.
type Writer struct {
	ws      *websocket.Conn
	cork    *corkConn     // nil: each message is its own write(2)
	timeout time.Duration // write deadline of each message of a batch
	now     func() time.Time
	onError func() // called after a failed write (the connection is then useless)

	mu      sync.Mutex
	writing bool // a caller is writing batches
	queue   []Msg
	callers int // the calls of Write and WriteAll whose messages are in queue
	spare   []Msg
	// batch is the outcome of the queued messages, for the callers that
	// wait for it; nil while none waits (the caller writing does not: it
	// learns its outcome from its own write).
	batch *writeBatch
	// gather is how many more batches yield first (see above): set to
	// gatherFor by a batch of several callers' messages, lowered by a
	// batch of one caller's (a lone message, or the drain's WriteAll of
	// many: no company for the next caller to wait for).
	gather int
}

// gatherFor is how many batches of one caller a Writer still yields
// before, after a batch of several callers.
const gatherFor = 16

// Msg is one message: A then B, written without copying them together.
type Msg struct{ A, B []byte }

// writeBatch is the outcome of one batch, for the callers whose messages
// were in it.
type writeBatch struct {
	done chan struct{}
	err  error
}

// NewWriter returns a Writer of ws each of whose messages must be written
// within timeout; onError, when not nil, is called after a failed write.
func NewWriter(ws *websocket.Conn, timeout time.Duration, onError func()) *Writer {
	return &Writer{ws: ws, cork: findCork(ws.NetConn()), timeout: timeout, onError: onError, now: time.Now}
}

// Write sends one message, a followed by b, and returns once it is written
// (or the write failed). A caller that finds no write in progress writes
// its message and every one queued meanwhile; the others wait for the
// batch that carries theirs.
func (w *Writer) Write(a, b []byte) error {
	w.mu.Lock()
	w.queue = append(w.queue, Msg{a, b})
	w.callers++
	return w.join()
}

// WriteAll sends msgs, in their order, and returns once they are written
// (or the write failed): the drain's batch of queued deliveries leaves in
// one write(2), as if each were written by a caller of its own.
func (w *Writer) WriteAll(msgs []Msg) error {
	w.mu.Lock()
	w.queue = append(w.queue, msgs...)
	w.callers++
	return w.join()
}

// join has the messages just queued written: by the caller, when no write
// is in progress, else by the caller writing. w.mu is held on entry and
// released on return.
func (w *Writer) join() error {
	if w.writing {
		if w.batch == nil {
			w.batch = &writeBatch{done: make(chan struct{})}
		}
		mine := w.batch
		w.mu.Unlock()
		<-mine.done
		return mine.err
	}
	// No write in progress, so the queue held no other message (Hold
	// aside, which Release writes): the caller's are the first batch.
	w.writing = true
	if w.gather > 0 {
		// Let the callers that are ready join this batch.
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
	}
	return w.drain(true)
}

// Hold makes the writes of a new w, before any was made, wait until
// Release; the caller may write with WriteNow first (the relay's hello).
func (w *Writer) Hold() {
	w.mu.Lock()
	w.writing = true
	w.mu.Unlock()
}

// WriteNow writes one message while w is held.
func (w *Writer) WriteNow(a, b []byte) error {
	return w.send([]Msg{{a, b}})
}

// Release ends a hold, writing what was queued meanwhile.
func (w *Writer) Release() {
	w.mu.Lock()
	w.drain(false)
}

// drain writes batches until the queue is empty. w.mu is held on entry
// and released on return. It returns the error of the first batch when
// mine, the caller's messages being in it.
func (w *Writer) drain(mine bool) error {
	var myErr error
	for first := true; len(w.queue) > 0; first = false {
		msgs, b := w.queue, w.batch
		if w.callers > 1 {
			w.gather = gatherFor
		} else if w.gather > 0 {
			w.gather--
		}
		w.queue, w.spare, w.batch, w.callers = w.spare[:0], nil, nil, 0
		w.mu.Unlock()
		err := w.send(msgs)
		clear(msgs) // no references to bodies kept
		if b != nil {
			b.err = err
			close(b.done)
		}
		if first && mine {
			myErr = err
		}
		w.mu.Lock()
		if w.spare == nil {
			w.spare = msgs[:0]
		}
	}
	w.writing = false
	w.mu.Unlock()
	return myErr
}

// send writes msgs, in one write(2) when the connection can gather them.
// Each message gets the timeout from when its turn comes, as if written
// alone: a batch of large ones (the drain's WriteAll of queued
// deliveries) on a slow link is not cut where each alone would pass.
// (gorilla sets the connection's deadline at each frame it writes; the
// deadline set here is a field, not a system call.)
func (w *Writer) send(msgs []Msg) error {
	w.ws.SetWriteDeadline(w.now().Add(w.timeout))
	if w.cork != nil {
		if err := w.cork.cork(); err != nil {
			if w.onError != nil {
				w.onError()
			}
			return err
		}
	}
	var err error
	for i, m := range msgs {
		if i > 0 {
			w.ws.SetWriteDeadline(w.now().Add(w.timeout))
		}
		var mw writerCloser
		if mw, err = w.ws.NextWriter(websocket.BinaryMessage); err != nil {
			break
		}
		_, err = mw.Write(m.A)
		if err == nil && len(m.B) > 0 {
			_, err = mw.Write(m.B)
		}
		if cerr := mw.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			break
		}
	}
	if w.cork != nil {
		if ferr := w.cork.uncork(); err == nil {
			err = ferr
		}
	}
	if err != nil && w.onError != nil {
		w.onError()
	}
	return err
}

type writerCloser interface {
	Write([]byte) (int, error)
	Close() error
}

// corkConn is a net.Conn whose writes can be gathered: between cork and
// uncork, writes go to a buffer (up to corkMax bytes; beyond, it is
// written out and gathering goes on), and uncork writes what is left in
// one write(2). Outside, writes go straight through. Bytes leave in the
// order they were written (a TLS connection above depends on it). A write
// that failed makes every later one fail: the byte stream is broken.
//
// Waiting for another write in progress is bounded by the write deadline,
// as gorilla/websocket bounds waiting for its own write lock: a heartbeat
// behind a write stuck on a slow peer fails in time, and the connection is
// dropped.
type corkConn struct {
	net.Conn

	lock     chan struct{} // held while buf or the connection is written
	deadline atomic.Int64  // of writes, in UnixNano; 0: none
	corked   bool
	buf      []byte
	err      error
}

// corkMax bounds the bytes gathered before they are written.
const corkMax = 64 << 10

// NewCorkConn wraps c so that a Writer over it sends each batch of
// messages in one write(2).
func NewCorkConn(c net.Conn) net.Conn { return &corkConn{Conn: c, lock: make(chan struct{}, 1)} }

// NetConn returns the connection c wraps.
func (c *corkConn) NetConn() net.Conn { return c.Conn }

func (c *corkConn) SetWriteDeadline(t time.Time) error {
	c.deadline.Store(unixNano(t))
	return c.Conn.SetWriteDeadline(t)
}

func (c *corkConn) SetDeadline(t time.Time) error {
	c.deadline.Store(unixNano(t))
	return c.Conn.SetDeadline(t)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// acquire takes the lock, waiting at most until the write deadline.
func (c *corkConn) acquire() error {
	select {
	case c.lock <- struct{}{}:
		return nil
	default:
	}
	var timeout <-chan time.Time
	if d := c.deadline.Load(); d != 0 {
		t := time.NewTimer(time.Until(time.Unix(0, d)))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case c.lock <- struct{}{}:
		return nil
	case <-timeout:
		return os.ErrDeadlineExceeded
	}
}

func (c *corkConn) release() { <-c.lock }

func (c *corkConn) Write(p []byte) (int, error) {
	if err := c.acquire(); err != nil {
		return 0, err
	}
	defer c.release()
	if c.err != nil {
		return 0, c.err
	}
	if !c.corked {
		return c.writeLocked(p)
	}
	if len(c.buf)+len(p) > corkMax {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) > corkMax {
			return c.writeLocked(p)
		}
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

func (c *corkConn) writeLocked(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

// cork starts gathering writes.
func (c *corkConn) cork() error {
	if err := c.acquire(); err != nil {
		return err
	}
	c.corked = true
	c.release()
	return nil
}

// uncork writes what was gathered and stops gathering.
func (c *corkConn) uncork() error {
	if err := c.acquire(); err != nil {
		return err // the caller drops the connection
	}
	defer c.release()
	c.corked = false
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if c.err != nil {
		c.buf = c.buf[:0]
		return c.err
	}
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.writeLocked(c.buf)
	if cap(c.buf) > corkMax {
		c.buf = nil // a one-off large batch: do not keep its buffer
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// findCork returns the corkConn under c: c itself, or under a TLS
// connection or a LimitListener's connection. nil when there is none.
func findCork(c net.Conn) *corkConn {
	for ; c != nil; c = Inner(c) {
		if cc, ok := c.(*corkConn); ok {
			return cc
		}
	}
	return nil
}

// Inner returns the connection c wraps: what its NetConn method returns,
// as for a *tls.Conn and every wrapper of the relay and the agent (which
// must have one for the writes under them to be corked); nil when c wraps
// none.
func Inner(c net.Conn) net.Conn {
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		return w.NetConn()
	}
	return nil
}

// Reader reads whole WebSocket messages for one reading goroutine.
// gorilla's ReadMessage grows its buffer from 512 bytes, allocating and
// copying four or five times for a 2 KB delivery; Reader reads into a
// buffer it keeps and returns an exactly sized copy: one allocation. A
// message over msgKeep is handed over as read, without the copy.
type Reader struct {
	scratch []byte
}

// msgKeep bounds the buffer a Reader keeps between messages.
const msgKeep = 64 << 10

func (m *Reader) Read(ws *websocket.Conn) ([]byte, error) {
	_, r, err := ws.NextReader()
	if err != nil {
		return nil, err
	}
	buf := m.scratch[:0]
	if cap(buf) == 0 {
		buf = make([]byte, 0, 4<<10)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if cap(buf) > msgKeep {
		m.scratch = nil
		return buf, nil
	}
	m.scratch = buf
	return bytes.Clone(buf), nil
}
