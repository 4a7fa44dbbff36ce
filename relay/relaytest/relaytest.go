// Package relaytest starts a relay server for the tests of the relay, its
// wire protocol and its agent-side client, and connects to it as an agent
// would or byte by byte.
package relaytest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// New starts a relay with cfg on a bbolt store in a temporary directory,
// served as Serve serves it; everything is stopped when the test ends.
func New(t *testing.T, cfg relay.Config) (*relay.Server, *httptest.Server, *boltrelay.Store) {
	t.Helper()
	return NewWith(t, func(db *boltrelay.Store) relay.Config {
		cfg.Store = db
		return cfg
	})
}

// NewWith is New with the Config that config makes with the bbolt store:
// for a test whose relay.Store wraps it (to count, hold or fail calls).
func NewWith(t *testing.T, config func(db *boltrelay.Store) relay.Config) (*relay.Server, *httptest.Server, *boltrelay.Store) {
	t.Helper()
	db, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := relay.NewServer(config(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // cleanups run last to first
	hs := Serve(t, srv)
	t.Cleanup(func() { srv.Close() })
	return srv, hs, db
}

// Serve serves srv as devhook relay does: deliveries through a
// relay.IngressListener, the rest through the httptest.Server's
// http.Server. Closing the httptest.Server also waits for the deliveries
// in progress, and ends those that take longer than 5 seconds.
func Serve(t testing.TB, srv *relay.Server) *httptest.Server {
	hs := httptest.NewUnstartedServer(srv)
	il := relay.NewIngressListener(srv, relay.LimitListener(hs.Listener, 1<<16), relay.ListenerConfig{})
	hs.Listener = il
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		il.Shutdown(ctx)
	})
	return hs
}

// Open opens a channel on the relay hs serves.
func Open(t testing.TB, hs *httptest.Server) wire.Credentials {
	t.Helper()
	cr, err := relayclient.Open(context.Background(), hs.Client(), hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// Dial connects to the relay hs serves as the agent of cr's channel.
func Dial(t testing.TB, hs *httptest.Server, cr wire.Credentials) *relayclient.Conn {
	t.Helper()
	return DialWith(t, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
}

// DialWith connects as an agent with cfg; the connection is closed when
// the test ends.
func DialWith(t testing.TB, cfg relayclient.DialConfig) *relayclient.Conn {
	t.Helper()
	c, err := relayclient.Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// DialRaw opens the WebSocket of cr's channel without the agent's client,
// for tests that write and read frames themselves.
func DialRaw(t testing.TB, hs *httptest.Server, cr wire.Credentials) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{ReadBufferSize: 1024, WriteBufferSize: 1024}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(hs.URL, "http")+"/v1/channels/"+cr.Channel+"/connect",
		http.Header{"Authorization": {"Bearer " + cr.Token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// WaitFor polls cond until it holds, failing the test after 30 s: bounded
// by what a loaded machine needs, not by how fast this one runs.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Receive returns the next delivery, failing the test after timeout.
func Receive(t testing.TB, c *relayclient.Conn, timeout time.Duration) *devhook.Delivery {
	t.Helper()
	type res struct {
		d   *devhook.Delivery
		err error
	}
	ch := make(chan res, 1)
	go func() { d, err := c.Receive(); ch <- res{d, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.d
	case <-time.After(timeout):
		c.Close()
		t.Fatalf("no delivery within %s", timeout)
		return nil
	}
}
