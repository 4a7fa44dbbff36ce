package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// interruptError is the cause of a command's context once a signal
// stopped it (context.Cause): which signal, for the exit status and for
// what the command reports. A command that stops on it says what it did so
// far; main ends the process with ExitCode whatever the command returned.
//
// A closed output is one too: output names it ("standard output") when a
// write to it failed with a broken pipe (sig is then SIGPIPE). The process
// would have died of that SIGPIPE, leaving listen.json and its journal
// behind; it stops as on Ctrl-C instead, with the status SIGPIPE gives.
type interruptError struct {
	sig    os.Signal
	output string
}

func (e *interruptError) Error() string {
	if e.output != "" {
		return e.output + " closed (broken pipe)"
	}
	return "interrupted by " + signalName(e.sig)
}

// ExitCode is 128 plus the signal's number, as a shell reports a process
// a signal ended: 130 for SIGINT (Ctrl-C), 143 for SIGTERM, 129 for SIGHUP
// and 141 for a closed output (SIGPIPE).
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
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	}
	return sig.String()
}

// signalWatch is what signalContext watches.
type signalWatch struct {
	// Signals stop the command: SIGINT, SIGTERM, SIGHUP.
	Signals <-chan os.Signal
	// Pipes has SIGPIPE, which comes of a write to any broken pipe or
	// socket (a receiver gone, a relay's client gone) as well as to a
	// closed standard output; Broken says which output, if any, is
	// closed ("" for none). Either nil: no output is watched.
	Pipes  <-chan os.Signal
	Broken func() string
	// Closed has the name of an output closed as soon as it is, before
	// a write meets it (nil: none watched).
	Closed <-chan string
	// Quit ends the process at once: the second signal's.
	Quit func(os.Signal)
}

// signalContext returns a context cancelled by the first signal, or the
// first closed output, with an *interruptError naming it as its cause, so
// that a command stops gracefully and reports what it did; the second
// signal calls Quit with itself: a second Ctrl-C quits at once. stop ends
// the watch; it does not cancel the context.
func signalContext(parent context.Context, w signalWatch) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	done := make(chan struct{})
	go func() {
		signalled := false
		for {
			select {
			case sig := <-w.Signals:
				if signalled {
					w.Quit(sig)
					return
				}
				signalled = true
				cancel(&interruptError{sig: sig}) // no-op after a closed output
			case sig := <-w.Pipes:
				if w.Broken == nil {
					continue
				}
				if out := w.Broken(); out != "" {
					cancel(&interruptError{sig: sig, output: out})
				}
			case out := <-w.Closed:
				cancel(&interruptError{sig: syscall.SIGPIPE, output: out})
			case <-done:
				return
			}
		}
	}()
	return ctx, func() { close(done) }
}

// stopReason is what a command that runs until stopped returns, given
// what its run returned: a stop for a closed output is said (the one who
// started it sees it end otherwise without a word), a signal is not (who
// sent it knows).
func stopReason(ctx context.Context, err error) error {
	var cause *interruptError
	if !errors.As(context.Cause(ctx), &cause) || cause.output == "" {
		return err
	}
	return errors.Join(fmt.Errorf("stopped: %w", cause), err)
}

// withoutBrokenPipe is err less the errors of writing to a closed output
// (EPIPE), each of those it joins looked at; nil when nothing is left.
func withoutBrokenPipe(err error) error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var errs []error
		for _, e := range joined.Unwrap() {
			errs = append(errs, withoutBrokenPipe(e))
		}
		return errors.Join(errs...)
	}
	if errors.Is(err, syscall.EPIPE) {
		return nil
	}
	return err
}
