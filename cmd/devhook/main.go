// Command devhook receives the service's webhooks on this machine: a relay
// with a public URL, an agent that verifies, records and forwards each
// delivery to a local receiver, and an inspector in the browser.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func main() {
	tuneGC()
	code := run()
	if code != 0 {
		os.Exit(code)
	}
}

// run is the command line's work; its status is the process's. It returns
// rather than exit, so that its deferred work (the CPU profile's end) is
// done on every way out but the second signal's.
func run() int {
	if stop := profileCPU(); stop != nil {
		defer stop()
	}
	ctx, stop := watchSignals()
	defer stop()
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	code, msg := exitStatus(err, stopCause(ctx, err))
	if msg != "" {
		fmt.Fprintln(os.Stderr, "devhook:", msg)
	}
	return code
}

// watchSignals is the context every command runs in: ended by SIGINT,
// SIGTERM or SIGHUP (its terminal closed), or by a closed standard output
// or error, so that a command stops as on Ctrl-C (listen.json removed,
// stores closed, temporary directories removed) rather than die of the
// signal. SIGHUP is left alone when it is ignored already (nohup: Notify
// would undo that). SIGPIPE is caught, not ignored, so that a write to a
// closed output fails (EPIPE) instead of killing the process, and the
// processes devhook starts get the usual SIGPIPE.
func watchSignals() (context.Context, func()) {
	sigs, pipes := make(chan os.Signal, 2), make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if !signal.Ignored(syscall.SIGHUP) {
		signal.Notify(sigs, syscall.SIGHUP)
	}
	signal.Notify(pipes, syscall.SIGPIPE)
	closed, stopClosed := watchClosedOutputs()
	ctx, stop := signalContext(context.Background(), signalWatch{Signals: sigs, Pipes: pipes, Broken: brokenOutput, Closed: closed,
		Quit: func(sig os.Signal) {
			fmt.Fprintln(os.Stderr, "devhook: quitting now")
			os.Exit(exitStatusFor(sig))
		}})
	return ctx, func() { stop(); stopClosed() }
}

// stopCause is what stopped the command: its context's cause, or a
// closed output that its error met before the SIGPIPE was seen (the
// signal arrives on its own time).
func stopCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil || !errors.Is(err, syscall.EPIPE) {
		return cause
	}
	if out := brokenOutput(); out != "" {
		return &interruptError{sig: syscall.SIGPIPE, output: out}
	}
	return nil
}

// exitStatus is the process's status for a command's error, and what main
// prints of it. A signal that stopped the command (cause, the context's,
// an *interruptError) decides the status, 130 for SIGINT, 143 for
// SIGTERM, 129 for SIGHUP, 141 for a closed output, whatever else the
// command returned: a command cut short has not done its work, and a CI
// job must not read it as green. Its error is printed unless it is the
// bare cancellation (the command had nothing to add). Otherwise: 0 for no error; the status a command means (check: 1 a
// handler that differs, 2 one that cannot be reached); else 1.
func exitStatus(err, cause error) (code int, msg string) {
	var sig *interruptError
	if errors.As(cause, &sig) {
		if sig.output != "" {
			// The writes that met the closed output: its symptom, and
			// like the SIGPIPE that used to end the process, not said.
			err = withoutBrokenPipe(err)
		}
		if err == nil || (interrupted(err) && !errors.As(err, new(*interruptError))) {
			return sig.ExitCode(), ""
		}
		return sig.ExitCode(), err.Error()
	}
	if err == nil {
		return 0, ""
	}
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode(), err.Error()
	}
	return 1, err.Error()
}

// exitCode is the status for err when no signal stopped the command.
func exitCode(err error) int {
	code, _ := exitStatus(err, nil)
	return code
}

// interrupted reports whether err is the end of the command's context
// alone (context.Canceled, or the *interruptError a signal caused),
// however wrapped: every error it joins must be one.
func interrupted(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if !interrupted(e) {
				return false
			}
		}
		return true
	}
	if _, ok := err.(*interruptError); ok || err == context.Canceled {
		return true
	}
	if inner := errors.Unwrap(err); inner != nil {
		return interrupted(inner)
	}
	return false
}

// profileCPU writes a CPU profile of this process to
// $DEVHOOK_CPUPROFILE.<command>.<pid> when that variable is set: the load
// harness runs relay and agent as separate processes, and this is how to
// see where each spends its time.
func profileCPU() (stop func()) {
	prefix := os.Getenv("DEVHOOK_CPUPROFILE")
	if prefix == "" || len(os.Args) < 2 {
		return nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%s.%d", prefix, os.Args[1], os.Getpid()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "devhook: cpu profile:", err)
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "devhook: cpu profile:", err)
		_ = f.Close()
		return nil
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}
