package relay

import (
	"net"
	"sync"

	"github.com/devhook/devhook/relay/wire"
)

// LimitListener returns a listener that keeps at most n connections open
// at once: Accept waits while n are open, and the connections beyond wait
// in the kernel's backlog, which costs no file descriptor. A relay under a
// flood of slow senders then never runs out of descriptors for its agents'
// connections and its own files. A WebSocket connection counts until it is
// closed.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	// The corkConn lets a WebSocket taken over on this connection send
	// the frames of many deliveries in one write(2) (see Writer).
	return &limitConn{Conn: wire.NewCorkConn(c), release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// NetConn returns the connection c wraps (wire.Inner).
func (c *limitConn) NetConn() net.Conn { return c.Conn }

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
