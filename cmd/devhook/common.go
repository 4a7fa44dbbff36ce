package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/devhook/devhook/lifecycle"
	"github.com/devhook/devhook/relay"
)

// defaultDataDir is ~/.devhook, or .devhook in the working directory when
// there is no home.
func defaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".devhook")
	}
	return ".devhook"
}

// absDir is dir as an absolute, clean path with symbolic links resolved
// where they can be, so that two spellings of one directory compare equal.
func absDir(dir string) string {
	if dir == "" {
		return ""
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return filepath.Clean(dir)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w (choose another with --data)", err)
	}
	return nil
}

// serveRelay adds to g the serving of srv on ln: deliveries through a
// relay.IngressListener, everything else through hs (whose handler is
// srv). When g stops, it stops taking connections and gives deliveries in
// progress grace to be answered; those still waiting for their agent then
// get queued (202) as the relay disconnects its agents, and the stop
// returns once they are, so that the store is closed after them.
func serveRelay(g *lifecycle.Group, name string, hs *http.Server, srv *relay.Server, ln net.Listener, logf func(string, ...any), grace time.Duration) {
	il := relay.NewIngressListener(srv, ln, relay.ListenerConfig{
		ReadHeaderTimeout: hs.ReadHeaderTimeout, IdleTimeout: hs.IdleTimeout, Logf: logf})
	closeListener(g, name, ln) // should it never serve
	g.Go(name, func(context.Context) error {
		return hs.Serve(il)
	}, func(context.Context) error {
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		err := hs.Shutdown(sctx) // closes il too
		if il.Wait(sctx) != nil || err != nil {
			srv.Close()
			qctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			err = hs.Shutdown(qctx)
			if il.Wait(qctx) != nil {
				il.Abort()
			}
			if err != nil {
				// Requests still running after twice the grace: cut them
				// rather than leave their connections (and handlers) behind.
				hs.Close()
				return fmt.Errorf("%s: requests still running after %s were cut: %w", name, 2*grace, err)
			}
		}
		return nil
	})
}

// closeListener adds ln to g, to be closed when g stops or is abandoned;
// that the server serving it closed it already is no error.
func closeListener(g *lifecycle.Group, name string, ln net.Listener) {
	g.Close(name+"'s listener", func() error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
}

// serveAside serves srv on ln beside a command's own work (check --self's
// receiver) until stop, which closes it and waits for it.
func serveAside(srv *http.Server, ln net.Listener) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return func() {
		srv.Close()
		<-done
	}
}

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
}
