package relay

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// An agent holds its channel over one WebSocket, from serveConnect to
// closeWith: the hello is its first frame, readLoop its only reader (the
// agent's responses and acks), a wire.Writer its only writer of data frames
// (the hello and deliveries), and a timer its heartbeat. Its queued
// deliveries are sent by its drain (drain.go).

// serveConnect takes an agent's WebSocket. The newest agent of a channel
// holds it: one that was connected is closed with CloseReplaced.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request, channel string) {
	if code, msg := s.authorize(channel, bearer(r)); code != 0 {
		httpError(w, code, msg)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	s.touch(channel, true)
	// Frames from the agent carry answers, up to MaxAnswerBody whatever
	// this relay's MaxBody.
	ws.SetReadLimit(max(s.cfg.MaxBody, wire.MaxAnswerBody) + wire.MaxHeaderSize + 4)
	c := &agentConn{
		s: s, ws: ws, channel: channel,
		pending:  make(map[string]chan *wire.Answer),
		inflight: make(map[string]bool),
		acked:    make(map[string]bool),
		done:     make(chan struct{}),
	}
	c.out = wire.NewWriter(ws, s.cfg.ResponseTimeout, c.close) // close takes no lock a writer holds
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	// The agent holds the channel once it has its hello, and the hello is
	// the first frame: deliveries routed to it meanwhile wait for the lock.
	hh := &wire.Header{Type: wire.TypeHello, Channel: channel, PublicURL: s.PublicURL(r, channel),
		Header: http.Header{
			wire.HelloMaxBody:         {strconv.FormatInt(s.cfg.MaxBody, 10)},
			wire.HelloPingInterval:    {strconv.FormatInt(max(s.cfg.PingInterval.Milliseconds(), 1), 10)},
			wire.HelloResponseTimeout: {strconv.FormatInt(max(s.cfg.ResponseTimeout.Milliseconds(), 1), 10)},
		}}
	// Live run.status deliveries go to the agent only once the earlier
	// ones of their run in the queue have been sent (behind.go): from the
	// start when the queue is known to be empty, else once the store has
	// listed the queue's runs (a live run.status delivery waits for that
	// list). The queue is counted once the agent holds the channel
	// (countQueue), and it is behind until then.
	c.behind, c.bh.blind, c.bh.count = true, true, true
	c.bh.listed = make(chan struct{})
	hh.Status = math.MaxInt // the hello's largest: framed once counted
	_, err = wire.AppendFrame(nil, hh, nil)
	if err != nil {
		// Nothing the agent could do about it (a public URL past the
		// frame's bounds): said here, and the connection ended by
		// readLoop, which closeWith makes return.
		s.cfg.Logf("relay: channel %s: the hello cannot be framed: %v", channel, err)
		c.closeWith(websocket.CloseInternalServerErr, wire.ClipReason("relay: the hello cannot be framed: "+err.Error()))
		go func() { defer s.wg.Done(); c.readLoop() }()
		return
	}
	c.out.Hold()
	s.router.Attach(channel, c)
	hh.Status = c.countQueue()
	hello, _ := wire.AppendFrame(nil, hh, nil) // framed with a larger count above
	c.out.WriteNow(hello, nil)
	c.out.Release()
	if c.isGone() {
		s.router.Detach(channel, c) // closed before it was attached
	}
	c.startPing()
	c.kickDrain()
	go func() { defer s.wg.Done(); c.readLoop() }()
}

// countQueue counts the channel's queue for the hello (0 when the store
// cannot), once the agent holds the channel: a delivery queued from then
// on kicks this connection, so that one queued after a count made before
// could not be overtaken by a live delivery of its run. When the queue is
// empty and nothing was queued since, nothing is behind.
func (c *agentConn) countQueue() int {
	qc, ok := c.s.cfg.Store.(QueueCounter)
	if !ok {
		return 0
	}
	n, err := qc.QueueLen(c.channel)
	if err != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n == 0 && c.kicks == 0 {
		c.behind, c.bh.blind, c.bh.count = false, false, false
		close(c.bh.listed)
		c.bh.listed = nil
	}
	return n
}

// agentConn is one connected agent, an Endpoint. readLoop is the only
// reader; write serializes writers; acknowledged deliveries leave the
// store on a goroutine of their own (removeLoop, drain.go). Heartbeats
// come from a timer, so an idle agent has no goroutine but its reader.
type agentConn struct {
	s       *Server
	ws      *websocket.Conn
	channel string

	out *wire.Writer // every data frame goes through it

	mu       sync.Mutex
	pending  map[string]chan *wire.Answer // live deliveries waiting for a response
	inflight map[string]bool              // queued deliveries sent, not yet acked and dequeued
	acked    map[string]bool              // dequeued since the drain's last read began: its batch may be older
	stuck    map[string]bool              // queued deliveries that could be neither sent nor parked
	gone     bool
	pinger   *time.Timer    // next heartbeat
	pings    sync.WaitGroup // a heartbeat being written

	draining   bool // a drain goroutine runs
	drainAgain bool // the queue may have new work since it started
	// behind: the queue may hold deliveries not yet sent to the agent.
	// Live run.status deliveries of their runs are queued meanwhile,
	// behind them (Deliver, behind.go).
	behind    bool
	bh        behindState   // the runs of the queue's unsent deliveries (behind.go)
	kicks     uint64        // Kicks so far: a delivery may have been queued
	dr        drainState    // the drain's cursor, its retries and the removals of acknowledged deliveries (drain.go)
	done      chan struct{} // closed when the connection ends
	closeOnce sync.Once
}

func (c *agentConn) isGone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone
}

// closeWith ends the connection, telling the agent why.
func (c *agentConn) closeWith(code int, reason string) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.gone = true
		if c.pinger != nil {
			c.pinger.Stop()
		}
		c.dr.stop()
		c.mu.Unlock()
		close(c.done)
		// WriteControl may run beside a data write.
		c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
		c.ws.Close()
		c.s.router.Detach(c.channel, c)
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
}

func (c *agentConn) close() { c.closeWith(websocket.CloseGoingAway, "relay closing") }

// Replace implements Endpoint.
func (c *agentConn) Replace() {
	c.s.cfg.Logf("relay: channel %s: a new agent connected; closing the previous one", c.channel)
	c.closeWith(wire.CloseReplaced, "replaced: another agent connected to this channel")
}

// write sends one frame: hdr (a frame without payload, as AppendFrame
// makes it) followed by payload, without copying them together. Frames
// of concurrent callers leave together (see wire.Writer); a failed write
// closes the connection.
func (c *agentConn) write(hdr, payload []byte) error {
	return c.out.Write(hdr, payload)
}

// startPing arms the heartbeat timer.
func (c *agentConn) startPing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.gone {
		c.pinger = time.AfterFunc(c.s.cfg.PingInterval, c.ping)
	}
}

// ping sends a heartbeat, on the timer's goroutine: a connection slow to
// take it delays and drops only itself.
func (c *agentConn) ping() {
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return
	}
	c.pings.Add(1) // readLoop waits for it after the connection ends
	c.mu.Unlock()
	defer c.pings.Done()
	// WriteControl may run beside a data write; it waits for one in
	// progress up to the deadline.
	if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.s.cfg.PingInterval)); err != nil {
		c.s.cfg.Logf("relay: channel %s: dropping the agent: heartbeat: %v", c.channel, err)
		c.close()
		return
	}
	c.mu.Lock()
	if !c.gone {
		c.pinger.Reset(c.s.cfg.PingInterval)
	}
	c.mu.Unlock()
}

// Deliver implements Endpoint: it sends d and waits for the agent's
// response. It returns ErrNoAgent when the connection ends first, and
// ErrQueueFirst for a run.status delivery while the channel's queue holds
// deliveries of its run not yet sent to the agent (behind.go): d is queued
// behind them, so that it cannot overtake an earlier delivery of its run.
func (c *agentConn) Deliver(ctx context.Context, d *devhook.Delivery) (*wire.Answer, error) {
	if c.holds(ctx, d.Body) {
		return nil, ErrQueueFirst
	}
	hdr, err := wire.AppendFrame(nil, wire.DeliverHeader(d), nil)
	if err != nil {
		return nil, err
	}
	wt := c.s.waiter()
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		c.s.waiters.Put(wt)
		return nil, ErrNoAgent
	}
	c.pending[d.ID] = wt.ch
	c.mu.Unlock()
	defer c.unwait(d.ID, wt)
	if c.write(hdr, d.Body) != nil {
		return nil, ErrNoAgent
	}
	wt.t.Reset(c.s.cfg.ResponseTimeout)
	select {
	case a := <-wt.ch:
		return a, nil
	case <-wt.t.C:
		return nil, ErrTimeout
	case <-c.done:
		return nil, ErrNoAgent
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// answerWait is what a live delivery waits on: the channel its answer
// comes on and the timer of ResponseTimeout. A Server reuses them from
// one delivery to the next (waiter, unwait): a channel and a timer were
// five allocations per delivery.
type answerWait struct {
	ch chan *wire.Answer
	t  *time.Timer // stopped while it is not in use
}

// waiter returns an unused answerWait.
func (s *Server) waiter() *answerWait {
	if wt, ok := s.waiters.Get().(*answerWait); ok {
		return wt
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &answerWait{ch: make(chan *wire.Answer, 1), t: t}
}

// unwait ends the wait for id's answer and keeps wt for another delivery.
// readLoop sends on a pending channel only under c.mu, so that once id
// is no longer pending nothing can send on wt.ch: what it may hold (an
// answer that came as the wait ended) is taken out, and the timer is
// stopped (since Go 1.23, no value of it can be received after Stop).
func (c *agentConn) unwait(id string, wt *answerWait) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
	wt.t.Stop()
	select {
	case <-wt.ch:
	default:
	}
	c.s.waiters.Put(wt)
}

func (c *agentConn) readLoop() {
	defer func() {
		c.close()
		c.pings.Wait()
	}()
	wait := 2 * c.s.cfg.PingInterval
	c.ws.SetReadDeadline(time.Now().Add(wait))
	c.ws.SetPongHandler(func(string) error { return c.ws.SetReadDeadline(time.Now().Add(wait)) })
	var in wire.Reader
	for {
		msg, err := in.Read(c.ws)
		if err != nil {
			return
		}
		c.ws.SetReadDeadline(time.Now().Add(wait))
		h, body, err := wire.DecodeFrame(msg)
		if err != nil {
			c.s.cfg.Logf("relay: channel %s: dropping the agent: %v", c.channel, err)
			c.closeWith(websocket.CloseProtocolError, wire.ClipReason(err.Error()))
			return
		}
		switch h.Type {
		case wire.TypeResponse:
			status := h.Status
			if status < 100 || status > 999 {
				status = http.StatusBadGateway
			}
			a := &wire.Answer{Status: status, Header: h.Header, Body: body}
			// Sent under c.mu: a channel no longer pending may be
			// reused by another delivery at once (unwait).
			c.mu.Lock()
			if ch := c.pending[h.ID]; ch != nil {
				select {
				case ch <- a:
				default:
				}
			}
			c.mu.Unlock()
		case wire.TypeAck:
			c.mu.Lock()
			queued := c.inflight[h.ID]
			c.mu.Unlock()
			if queued {
				// Removed from the store off this goroutine, the
				// connection's only reader: answers to live deliveries
				// must not wait behind an fsync or a round trip.
				c.remove(h.ID)
			}
		}
	}
}
