package relay

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"
)

// ServeConfig configures Serve. Zero values mean defaults.
type ServeConfig struct {
	// ReadHeaderTimeout bounds the reading of a request's headers
	// (default 10 s); IdleTimeout the wait for the next request on a
	// kept-alive connection (default 2 min).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// Grace bounds each step of the stop (default 5 s): the deliveries in
	// flight get their answers within it; those still waiting for an
	// agent after it are queued (202), within a second Grace.
	Grace time.Duration
	// Handler serves the requests that are not deliveries (default: the
	// Server itself), for a caller that serves more beside the relay.
	Handler http.Handler
	// ErrorLog hears net/http's own errors: failed TLS handshakes, a
	// certificate that could not be obtained (nil: the standard logger).
	ErrorLog *log.Logger
}

// Serve serves s on ln until ctx is done, then stops and returns nil, or
// an error saying which requests had to be cut; an error ending the
// serving sooner is returned as it is (ln closed).
//
// Deliveries (/c/…) are read by the relay's own IngressListener, which
// looks at every request's header before net/http's parser; the API,
// agents' WebSockets and TLS connections (when ln is a TLS listener) go
// to an http.Server. The stop is graceful in two steps, each within
// cfg.Grace: first no new connection, and the deliveries in flight get
// their answers; then s is closed, so that deliveries still waiting for
// an agent are queued (202) and their senders told so, and what is left
// after a second grace is cut. Serve returns once every connection it
// served is gone; the caller closes s's store after it.
func (s *Server) Serve(ctx context.Context, ln net.Listener, cfg ServeConfig) error {
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.Handler == nil {
		cfg.Handler = s
	}
	hs := &http.Server{Handler: cfg.Handler, ReadHeaderTimeout: cfg.ReadHeaderTimeout, IdleTimeout: cfg.IdleTimeout, ErrorLog: cfg.ErrorLog}
	il := NewIngressListener(s, ln, ListenerConfig{
		ReadHeaderTimeout: cfg.ReadHeaderTimeout, IdleTimeout: cfg.IdleTimeout, Logf: s.cfg.Logf})
	served := make(chan error, 1)
	go func() { served <- hs.Serve(il) }() // ends with hs's Shutdown below
	select {
	case err := <-served:
		hs.Close()
		il.Abort()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return err
	case <-ctx.Done():
	}
	err := s.stop(hs, il, cfg.Grace)
	<-served
	return err
}

// stop ends what Serve started: see Serve.
func (s *Server) stop(hs *http.Server, il *IngressListener, grace time.Duration) error {
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := hs.Shutdown(sctx) // closes il too
	if il.Wait(sctx) == nil && err == nil {
		return nil
	}
	s.Close()
	qctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err = hs.Shutdown(qctx)
	if il.Wait(qctx) != nil {
		il.Abort()
	}
	if err != nil {
		// Requests still running after twice the grace: cut rather than
		// leave their connections (and handlers) behind.
		hs.Close()
		return fmt.Errorf("requests still running after %s were cut: %w", 2*grace, err)
	}
	return nil
}
