// Command natsserver runs a NATS server with JetStream on a free loopback
// port, as a process of its own, for the load harness's cluster phases:
// its CPU time and memory are then measured apart from the harness's
// senders and receiver. It prints
//
//	nats on nats://127.0.0.1:PORT
//
// once it accepts connections, and stops on SIGINT or SIGTERM.
//
//	go run ./bench/natsserver -dir /tmp/js
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/devhook/devhook/natsrelay/natstest"
)

func main() {
	dir := flag.String("dir", "", "directory for the JetStream store (required)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "natsserver: -dir is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ns, err := natstest.Start(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsserver:", err)
		os.Exit(1)
	}
	fmt.Printf("nats on %s\n", ns.ClientURL())
	<-ctx.Done()
	ns.Shutdown()
	ns.WaitForShutdown()
}
