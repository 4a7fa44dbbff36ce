// Package natstest runs a NATS server with JetStream inside the process,
// on a free loopback port: for the tests of the relay cluster and for the
// load harness.
package natstest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start runs a server with its JetStream store under dir. The caller
// shuts it down (Shutdown, then WaitForShutdown).
func Start(dir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		MaxPayload: 16 << 20, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("nats server did not start within 10s")
	}
	return ns, nil
}

// Run starts a server whose store is in a temporary directory of tb, and
// shuts it down when tb ends.
func Run(tb testing.TB) *server.Server {
	tb.Helper()
	ns, err := Start(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}
