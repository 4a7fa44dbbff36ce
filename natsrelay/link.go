package natsrelay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// While the NATS connection is lost, nats.go buffers what is published for
// the reconnect and a call waits for a reply that cannot come until its own
// timeout (ResponseTimeout, Timeout: seconds). Every call of the Store and
// the Router that needs NATS therefore goes through a link, which bounds
// that wait by Config.LostWait counted from the loss:
//
//   - a call made while the connection is lost waits for it to come back,
//     at most until LostWait after the loss, then fails with ErrNATSAway;
//     after that, calls fail at once until the connection is back;
//   - a call under way when the connection is lost fails at once with
//     ErrNATSAway (its context is canceled): a reply to it could only be
//     lost with the connection.
//
// A delivery for an agent on another instance thus gets its answer within
// LostWait of the loss: the Router's request fails, the relay tries to
// queue the delivery, the Store's publish fails too, and the sender gets
// 503 with Retry-After. The loss is seen as soon as the client sees it:
// at once when the NATS server or its host closes the connection, after
// the client's pings go unanswered (nats.PingInterval × MaxPingsOut) when
// the network silently drops everything; until then, the calls' own
// timeouts bound them.

// ErrNATSAway is the error of a call that needs NATS while the connection
// to NATS is lost.
var ErrNATSAway = errors.New("natsrelay: the connection to NATS is lost")

// link follows one NATS connection's state for a Store or a Router.
type link struct {
	nc   *nats.Conn
	wait time.Duration // Config.LostWait

	mu     sync.Mutex
	up     bool            // as the handlers last said, or a call saw
	lostAt time.Time       // when the connection was lost; zero while up
	lost   context.Context // canceled with ErrNATSAway when the connection is lost
	cancel context.CancelCauseFunc
	back   chan struct{} // closed when the connection is back
}

// newLink follows nc's state through its disconnect and reconnect
// handlers, which it chains before those set already; onBack, if not nil,
// runs after each reconnect.
func newLink(nc *nats.Conn, wait time.Duration, onBack func()) *link {
	l := &link{nc: nc, wait: wait, up: true, back: make(chan struct{})}
	close(l.back)
	l.lost, l.cancel = context.WithCancelCause(context.Background())
	prevLost := nc.DisconnectErrHandler()
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		l.markLost()
		if prevLost != nil {
			prevLost(c, err)
		}
	})
	prevBack := nc.ReconnectHandler()
	nc.SetReconnectHandler(func(c *nats.Conn) {
		l.markBack()
		if prevBack != nil {
			prevBack(c)
		}
		if onBack != nil {
			onBack()
		}
	})
	if !nc.IsConnected() {
		l.markLost()
	}
	return l
}

func (l *link) markLost() {
	l.mu.Lock()
	l.markLostLocked()
	l.mu.Unlock()
}

func (l *link) markLostLocked() {
	if !l.up {
		return
	}
	l.up, l.lostAt = false, time.Now()
	l.cancel(fmt.Errorf("%w (since %s)", ErrNATSAway, l.lostAt.UTC().Format(awayTime)))
	l.back = make(chan struct{})
}

func (l *link) markBack() {
	l.mu.Lock()
	l.markBackLocked()
	l.mu.Unlock()
}

func (l *link) markBackLocked() {
	if l.up {
		return
	}
	l.up, l.lostAt = true, time.Time{}
	l.lost, l.cancel = context.WithCancelCause(context.Background())
	close(l.back)
}

// ctx returns the context of a call that needs NATS: done when parent is,
// after timeout, or when the connection is lost (its cause is then
// ErrNATSAway). While the connection is lost, ctx waits for it as the
// comment at the top of this file says, and returns an error wrapping
// ErrNATSAway if it does not come back in time. The connection's status is
// the truth; the handlers tell of changes promptly.
func (l *link) ctx(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc, error) {
	for {
		l.mu.Lock()
		switch l.nc.Status() {
		case nats.CLOSED:
			l.mu.Unlock()
			return nil, nil, fmt.Errorf("%w: the connection is closed", ErrNATSAway)
		case nats.CONNECTED:
			l.markBackLocked() // if the reconnect handler has not run yet
			lost := l.lost
			l.mu.Unlock()
			tctx, tcancel := context.WithTimeout(parent, timeout)
			ctx, cancel := context.WithCancelCause(tctx)
			stop := context.AfterFunc(lost, func() { cancel(ErrNATSAway) })
			return ctx, func() { stop(); cancel(nil); tcancel() }, nil
		}
		l.markLostLocked() // if the disconnect handler has not run yet
		lostAt, back := l.lostAt, l.back
		l.mu.Unlock()
		left := time.Until(lostAt.Add(l.wait))
		if left <= 0 {
			return nil, nil, fmt.Errorf("%w (since %s, %s ago)", ErrNATSAway, lostAt.UTC().Format(awayTime), time.Since(lostAt).Round(time.Millisecond))
		}
		t := time.NewTimer(left)
		select {
		case <-back:
		case <-t.C: // one more look at the status
		case <-parent.Done():
			t.Stop()
			return nil, nil, parent.Err()
		}
		t.Stop()
	}
}

// awayTime is how an ErrNATSAway says since when the connection is lost.
const awayTime = "2006-01-02T15:04:05.000Z07:00"

// why returns err, from a call whose context was ctx, saying that the
// connection was lost if that is why ctx ended. The context's own error
// (context canceled) is then left out: the loss canceled it, not a
// caller, and saying it would point the reader at the wrong cause. A
// publish nats.go refused because the connection is down (it keeps
// nothing for the reconnect: ReconnectOptions) is the loss too.
func why(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrNATSAway) {
		return err
	}
	c := context.Cause(ctx)
	switch {
	case !errors.Is(c, ErrNATSAway):
		if errors.Is(err, nats.ErrReconnectBufExceeded) {
			return fmt.Errorf("%w (nats.go refused to send: %w)", ErrNATSAway, err)
		}
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, nats.ErrReconnectBufExceeded):
		return c
	}
	return fmt.Errorf("%w (%w)", c, err)
}
