package main

import (
	"context"
	"os"
	"syscall"
)

// interruptError is the cause of a command's context once a signal
// stopped it (context.Cause): which signal, for the exit status and for
// what the command reports. A command that stops on it says what it did so
// far; main ends the process with ExitCode whatever the command returned.
type interruptError struct{ sig os.Signal }

func (e *interruptError) Error() string { return "interrupted by " + signalName(e.sig) }

// ExitCode is 128 plus the signal's number, as a shell reports a process
// a signal ended: 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
func (e *interruptError) ExitCode() int { return exitStatusFor(e.sig) }

func exitStatusFor(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128 + int(syscall.SIGINT)
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// signalContext returns a context cancelled by the first signal on sigs,
// with an *interruptError naming it as its cause, so that a command stops
// gracefully and reports what it did; the second signal calls quit with
// itself: a second Ctrl-C quits at once. stop ends the watch; it does not
// cancel the context.
func signalContext(parent context.Context, sigs <-chan os.Signal, quit func(os.Signal)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			cancel(&interruptError{sig: sig})
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			quit(sig)
		case <-done:
		}
	}()
	return ctx, func() { close(done) }
}
