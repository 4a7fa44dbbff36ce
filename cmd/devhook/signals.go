package main

import (
	"context"
	"os"
)

// signalContext returns a context cancelled by the first signal on sigs,
// so that a command stops gracefully, and calls quit on the second: a
// second Ctrl-C quits at once. stop ends the watch; it does not cancel
// the context.
func signalContext(parent context.Context, sigs <-chan os.Signal, quit func()) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
			quit()
		case <-done:
		}
	}()
	return ctx, func() { close(done) }
}
