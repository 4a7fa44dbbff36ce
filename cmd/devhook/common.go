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

// serveRelay adds srv, served on ln, to g: relay.Server.Serve serves it
// until g stops, then stops it gracefully (see Serve).
func serveRelay(g *lifecycle.Group, name string, srv *relay.Server, ln net.Listener, cfg relay.ServeConfig) {
	closeListener(g, name, ln) // should it never serve
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g.Go(name, func(context.Context) error {
		defer close(done)
		return srv.Serve(ctx, ln, cfg)
	}, func(context.Context) error {
		cancel() // Serve bounds its own stop (twice cfg.Grace)
		<-done
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
