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
	"runtime/debug"
	"syscall"
)

func main() {
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "devhook:", err)
		os.Exit(1)
	}
}

// tuneGC trades a little memory for CPU unless GOGC says otherwise: the
// relay and the agent allocate per delivery but keep little, so the default
// collector runs far more often than their small heaps need. The soft limit
// keeps the heap from growing without bound.
func tuneGC() {
	if os.Getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(400)
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(48 << 20)
	}
}
