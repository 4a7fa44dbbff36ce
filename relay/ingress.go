package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// IngressListener serves deliveries itself and passes every other
// connection on, through Accept, to the http.Server that serves it.
//
// A delivery through net/http's server costs the relay more CPU than the
// parsing it needs: each request gets a context, a response with its own
// buffers, a goroutine reading in the background to notice a sender that
// hangs up, and five or six changes of the connection's read deadline.
// Measured end to end (go run ./bench --chisel, 15 rounds of a build with
// and without this listener, interleaved, November 2026 on a 2-core VM): the
// relay's CPU per delivery is 31 against 37 µs at concurrency 32 (tunnel
// CPU 80 against 88 µs, 10 %) and 100 against 125 µs at concurrency 1,
// with 12 fewer allocations (BenchmarkIngress). That is above the bar
// for keeping a hand-written part (5 % of a delivery's cost). An IngressListener reads requests with net/http's own parser
// (http.ReadRequest: the same checks of framing, Content-Length,
// Transfer-Encoding and header syntax), answers them with a writer that
// knows the whole answer before it writes it (one write(2), always a
// Content-Length), and changes the read deadline two or three times.
//
// A connection stays with the IngressListener while its requests are
// deliveries (a path under /c/). The first request that is anything else
// (the API, an agent's WebSocket, metrics) hands the connection over, with
// the bytes already read, to the http.Server, for that request only: its
// answer ends the connection (an agent's WebSocket stays). A
// TLS connection (the inner listener's Accept returns a *tls.Conn) has its
// handshake here; one that chose another protocol than HTTP/1.1 by ALPN
// (h2, acme-tls/1) is handed over at once, as it is. One handed over with
// bytes already read is no *tls.Conn to net/http: its requests have no
// r.TLS, and PublicURL tells them by their local address (handedAddr).
//
// Requests net/http's server refuses are refused alike, a body left
// unread is read away up to 256 KiB, and the connection ends when it must
// as it would there (TestIngress_AnswersAsNetHTTPDoes compares the two).
// Framing net/http's server takes in its own way (both Content-Length and
// Transfer-Encoding, a bare LF, obs-fold: headScan) is refused with 400
// and the connection closed, for every request this listener reads the
// header of: that is every request of a connection, since the answer to
// a request handed over ends its connection (Connection: close, set by
// the Server's handler: handedOver). Other differences, on delivery paths
// only: a sender that hangs up while its delivery waits for the agent is
// not noticed until the answer is written (the delivery is forwarded and
// recorded all the same); an HTTP/1.0 request always ends its connection.
type IngressListener struct {
	inner net.Listener
	srv   *Server
	cfg   ListenerConfig

	handoff   chan net.Conn
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	ctx       context.Context // requests' context; cancelled by Abort
	cancel    context.CancelFunc

	wg    sync.WaitGroup // the accept loop and every connection's goroutine
	mu    sync.Mutex
	conns map[*ingressConn]struct{}
	err   error // the inner listener's, when it failed
}

// ListenerConfig configures an IngressListener. Zero values mean
// net/http's defaults or none, as for the http.Server it stands in front
// of: give it the same values.
type ListenerConfig struct {
	// ReadHeaderTimeout bounds the reading of a request's headers, from
	// its first byte (0: none).
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection (0: none).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (0: 1 MiB, net/http's
	// default); beyond it, 431.
	MaxHeaderBytes int
	// Logf hears about a request that panicked (nil: the Server's Logf).
	Logf func(format string, args ...any)
}

// NewIngressListener serves srv's deliveries from ln's connections; ln is
// closed by Close. Serve an http.Server with srv as its handler on it.
func NewIngressListener(srv *Server, ln net.Listener, cfg ListenerConfig) *IngressListener {
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = http.DefaultMaxHeaderBytes
	}
	if cfg.Logf == nil {
		cfg.Logf = srv.cfg.Logf
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &IngressListener{
		inner: ln, srv: srv, cfg: cfg, ctx: ctx, cancel: cancel,
		handoff: make(chan net.Conn), done: make(chan struct{}),
		conns: map[*ingressConn]struct{}{},
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Accept returns the next connection for the http.Server: one whose
// request is not a delivery.
func (l *IngressListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.handoff:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		if err == nil {
			err = net.ErrClosed
		}
		return nil, err
	}
}

// Addr is the inner listener's address.
func (l *IngressListener) Addr() net.Addr { return l.inner.Addr() }

// Close stops accepting and closes the connections that wait for a
// request. A delivery in progress is answered, then its connection is
// closed. Wait waits for those.
func (l *IngressListener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.inner.Close()
		l.mu.Lock()
		for c := range l.conns {
			c.closeIfIdle()
		}
		l.mu.Unlock()
	})
	return err
}

// Wait waits, after Close, until every delivery in progress is answered,
// or ctx ends.
func (l *IngressListener) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { // ends when the goroutines it waits for end
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Abort ends, after Close, the deliveries still in progress: their
// connections are closed and their requests' context cancelled (a
// delivery waiting for its agent stops waiting). It returns when their
// goroutines have.
func (l *IngressListener) Abort() {
	l.cancel()
	l.mu.Lock()
	for c := range l.conns {
		c.c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// Shutdown closes l, waits for the deliveries in progress until ctx ends,
// then aborts those left. The http.Server serving l has its own Shutdown.
func (l *IngressListener) Shutdown(ctx context.Context) error {
	l.Close()
	err := l.Wait(ctx)
	if err != nil {
		l.Abort()
	}
	return err
}

func (l *IngressListener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() { // out of descriptors: as net/http does
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
				case <-l.done:
					return
				}
				continue
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.Close()
			return
		}
		delay = 0
		ic := &ingressConn{l: l, c: c}
		l.mu.Lock()
		select {
		case <-l.done:
			l.mu.Unlock()
			c.Close()
			return
		default:
		}
		l.conns[ic] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go ic.serve()
	}
}

func (l *IngressListener) forget(ic *ingressConn) {
	l.mu.Lock()
	delete(l.conns, ic)
	l.mu.Unlock()
}

// closing reports whether Close was called.
func (l *IngressListener) closing() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// handedConn is a connection handed to net/http with bytes already read.
type handedConn struct {
	net.Conn
	br *bufio.Reader
}

// NetConn returns the connection c wraps (wire.Inner).
func (c *handedConn) NetConn() net.Conn { return c.Conn }

// LocalAddr marks the connection as handed over (handedAddr): net/http
// puts it in each request's context (http.LocalAddrContextKey).
func (c *handedConn) LocalAddr() net.Addr {
	_, isTLS := c.Conn.(*tls.Conn)
	return handedAddr{Addr: c.Conn.LocalAddr(), tls: isTLS}
}

// handedAddr is the local address of a connection an IngressListener read
// from first, then handed to net/http: tls says it is a TLS connection,
// which net/http serves as a plain one (no r.TLS).
type handedAddr struct {
	net.Addr
	tls bool
}

// overTLS reports whether r came over TLS.
func overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	a, ok := r.Context().Value(http.LocalAddrContextKey).(handedAddr)
	return ok && a.tls
}

// handedOver reports whether r came on a connection an IngressListener
// handed to net/http. Its answer must end the connection: net/http's
// parser would read the next request on it without the IngressListener's
// framing checks (headScan), so the next request comes on a new
// connection, whose header the IngressListener looks at first.
func handedOver(r *http.Request) bool {
	_, ok := r.Context().Value(http.LocalAddrContextKey).(handedAddr)
	return ok
}

func (c *handedConn) Read(p []byte) (int, error) {
	if c.br != nil {
		if c.br.Buffered() > 0 {
			return c.br.Read(p) // from its buffer only
		}
		c.br = nil
	}
	return c.Conn.Read(p)
}
