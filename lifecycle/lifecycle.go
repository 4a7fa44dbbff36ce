// Package lifecycle runs the parts of a long-running command together, in
// the spirit of oklog/run and errgroup: each part starts in the order it
// was added; the first part that returns (failed, or ended on its own), or
// the end of the context, stops them all, in the reverse order; every
// resource is closed in that same reverse order; and Run returns the error
// that stopped the group joined with every error of stopping and closing.
//
// The reverse order holds whatever stops the group, Ctrl-C included: a
// part's context is not a child of Run's, whose end only starts the
// stopping; each part's context is canceled at its turn, once the parts
// added after it have stopped. So a part that undoes something at the end
// (listen's webhook at the service) still has the parts it needs (the
// agent's connection) while it does.
//
//	var g lifecycle.Group
//	db, err := storage.Open(path, cfg)
//	...
//	g.Close("the delivery store", db.Close)       // closed last
//	g.Serve("the inspector", srv, ln)              // stopped first
//	return g.Run(ctx)                              // nil after Ctrl-C, else why it stopped
//
// A part that fails stops the others at once: a server whose listener
// breaks does not leave the process running until Ctrl-C.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DefaultStopTimeout bounds each part's stop when Group.StopTimeout is 0.
const DefaultStopTimeout = 5 * time.Second

// Group is the parts of one command. The zero value is ready to use; a
// Group runs once.
type Group struct {
	// StopTimeout bounds each part's stop function and the wait for its
	// run function to return; 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	parts       []part
}

type part struct {
	name  string
	run   func(ctx context.Context) error // nil for a resource that is only closed
	stop  func(ctx context.Context) error
	close func() error
	// abandon releases what a part that never ran holds (a server's
	// listener); see Abandon.
	abandon func() error
}

// Go adds a part: run blocks until the part ends, and stop makes it end
// (it is called once, with a context bounded by StopTimeout, also when run
// already returned). run returning, with or without an error, stops the
// group. stop may be nil when canceling run's context is enough: each
// part's context is canceled at its turn to stop (at once without a stop
// function, after StopTimeout with one that did not end it), not before,
// even when Run's context ended; it carries the values of Run's context.
func (g *Group) Go(name string, run func(ctx context.Context) error, stop func(ctx context.Context) error) {
	g.parts = append(g.parts, part{name: name, run: run, stop: stop})
}

// Close adds a resource that only needs closing when the group stops, in
// reverse order with the parts (one added first is closed last).
func (g *Group) Close(name string, close func() error) {
	g.parts = append(g.parts, part{name: name, close: close})
}

// Serve adds an HTTP server on ln: it serves until the group stops, then
// shuts down (waiting for requests in flight up to StopTimeout) and
// closes. http.ErrServerClosed is no error.
func (g *Group) Serve(name string, srv *http.Server, ln net.Listener) {
	g.serve(name, srv, ln, func() error { return srv.Serve(ln) })
}

// ServeTLS is Serve over TLS, with the certificates of srv.TLSConfig
// (http.Server.ServeTLS with no files): HTTP/2 is offered as Serve's
// caller could not by wrapping ln.
func (g *Group) ServeTLS(name string, srv *http.Server, ln net.Listener) {
	g.serve(name, srv, ln, func() error { return srv.ServeTLS(ln, "", "") })
}

func (g *Group) serve(name string, srv *http.Server, ln net.Listener, run func() error) {
	g.Go(name, func(context.Context) error {
		return run()
	}, func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			err = srv.Close()
		}
		return err
	})
	g.parts[len(g.parts)-1].abandon = ln.Close
}

// Abandon is for a command whose wiring failed before Run: it closes
// every resource added so far and the listeners of the servers added, in
// the reverse order, without starting anything, and returns err joined
// with the errors of closing. The group is not to be run after it.
func (g *Group) Abandon(err error) error {
	errs := []error{err}
	for i := len(g.parts) - 1; i >= 0; i-- {
		p := g.parts[i]
		close := p.close
		if close == nil {
			close = p.abandon
		}
		if close == nil {
			continue
		}
		if cerr := close(); cerr != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", p.name, cerr))
		}
	}
	g.parts = nil
	return errors.Join(errs...)
}

// StoppedError is the error of a part that ended on its own, without an
// error, while the others were running: nothing says why, but the command
// cannot go on without it.
type StoppedError struct{ Name string }

func (e *StoppedError) Error() string { return e.Name + " stopped" }

// Run starts the parts, waits until ctx ends or a part's run returns, and
// stops every part and closes every resource in the reverse order of
// adding. It returns nil when ctx ended and everything stopped cleanly;
// else the error of the part that stopped the group (named), joined with
// the errors of stopping and closing (each named).
func (g *Group) Run(ctx context.Context) error {
	type result struct {
		i   int
		err error
	}
	ended := make(chan result, len(g.parts))
	done := make([]chan struct{}, len(g.parts))
	cancels := make([]context.CancelFunc, len(g.parts))
	defer func() {
		for _, c := range cancels {
			if c != nil {
				c()
			}
		}
	}()
	running := 0
	for i, p := range g.parts {
		if p.run == nil {
			continue
		}
		running++
		done[i] = make(chan struct{})
		// Canceled at its turn to stop, not with ctx: see the top of
		// this file.
		var pctx context.Context
		pctx, cancels[i] = context.WithCancel(context.WithoutCancel(ctx))
		go func() {
			defer close(done[i])
			ended <- result{i, p.run(pctx)}
		}()
	}

	var cause error
	var first = -1
	if running > 0 {
		select {
		case <-ctx.Done():
		case r := <-ended:
			first = r.i
			cause = g.ranErr(r.i, r.err)
			if cause == nil && ctx.Err() == nil {
				cause = &StoppedError{Name: g.parts[r.i].name}
			}
			// else: a part that ended cleanly because ctx ended, seen
			// before ctx's end itself: no cause.
		}
	} else {
		<-ctx.Done()
	}

	timeout := g.StopTimeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	errs := []error{cause}
	for i := len(g.parts) - 1; i >= 0; i-- {
		p := g.parts[i]
		if p.close != nil {
			if err := p.close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", p.name, err))
			}
			continue
		}
		sctx, scancel := context.WithTimeout(context.Background(), timeout)
		if p.stop != nil {
			if err := p.stop(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs = append(errs, fmt.Errorf("stop %s: %w", p.name, err))
			}
		}
		if p.stop == nil {
			cancels[i]()
		}
		if i != first {
			// Its run returns once stopped; canceling its context is the
			// last word for a part whose stop did not end it.
			select {
			case <-done[i]:
			case <-sctx.Done():
				cancels[i]()
				select {
				case <-done[i]:
				case <-time.After(timeout):
					errs = append(errs, fmt.Errorf("stop %s: it did not end within %s", p.name, 2*timeout))
				}
			}
		}
		cancels[i]()
		scancel()
	}
	// The runs' own errors while stopping (a failed final flush) count.
	for len(ended) > 0 {
		r := <-ended
		if r.i == first {
			continue
		}
		if err := g.ranErr(r.i, r.err); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ranErr is what a part's run returned, as an error of the group: the
// ends that stopping causes (a closed server, a canceled context) are none.
func (g *Group) ranErr(i int, err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", g.parts[i].name, err)
}
