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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "devhook:", err)
		os.Exit(1)
	}
}
