// Package natstest runs a NATS server with JetStream inside the process,
// on a free loopback port: for the tests of the relay cluster and for the
// load harness. The server has NATS's own defaults (max_payload 1 MiB)
// unless an Option says otherwise. A server shut down (Shutdown) and
// started again with the same directory and Port is the same server
// restarted: its streams, buckets and messages are kept.
package natstest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Option changes the server's options before it starts.
type Option func(*server.Options)

// MaxPayload sets the server's max_payload, the largest message a client
// may publish, in bytes.
func MaxPayload(n int32) Option {
	return func(o *server.Options) { o.MaxPayload = n }
}

// Port sets the server's port, where the default picks a free one: a
// server restarted on the port, and with the store, of one shut down.
func Port(p int) Option {
	return func(o *server.Options) { o.Port = p }
}

// Start runs a server with its JetStream store under dir. The caller
// shuts it down (Shutdown, then WaitForShutdown).
func Start(dir string, opts ...Option) (*server.Server, error) {
	o := &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true,
	}
	for _, opt := range opts {
		opt(o)
	}
	ns, err := server.NewServer(o)
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
func Run(tb testing.TB, opts ...Option) *server.Server {
	tb.Helper()
	ns, err := Start(tb.TempDir(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}
