package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
)

func TestPrinterConnection(t *testing.T) {
	for _, tt := range []struct {
		c    agent.Connection
		want string
	}{
		{agent.Connection{}, "connected\n"},
		{agent.Connection{Queued: 1}, "connected, 1 queued delivery follows\n"},
		{agent.Connection{Reconnect: true, Down: 12300 * time.Millisecond, Queued: 3}, "reconnected after 12s, 3 queued deliveries follow\n"},
		{agent.Connection{Reconnect: true, Down: 2 * time.Second}, "reconnected after 2s\n"},
	} {
		var buf bytes.Buffer
		(&printer{}).connection(tt.c, &buf)
		if buf.String() != tt.want {
			t.Errorf("%+v: %q, want %q", tt.c, buf.String(), tt.want)
		}
	}
}

// After an outage of the relay, listen says it reconnected and how many
// queued deliveries follow: the relay's hello says how many it holds.
func TestListen_ReconnectedWithQueuedDeliveries(t *testing.T) {
	rdb, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	var current atomic.Pointer[relay.Server] // nil: the relay is down (503)
	newRelay := func() *relay.Server {
		srv, err := relay.NewServer(relay.Config{Store: rdb})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	current.Store(newRelay())
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if srv := current.Load(); srv != nil {
			srv.ServeHTTP(w, r)
			return
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer hs.Close()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer recv.Close()

	lr := startListen(t, "--forward", recv.URL, "--relay", hs.URL, "--data", t.TempDir())
	channel := lr.next(t, "ready")["channel"].(string)

	// The relay goes away; two deliveries are queued meanwhile.
	old := current.Swap(nil)
	old.Close()
	for range 2 {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Channel: channel, ReceivedAt: time.Now(), Method: "POST", Path: "/hook",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)}
		if err := rdb.Enqueue(channel, d); err != nil {
			t.Fatal(err)
		}
	}
	current.Store(newRelay())

	rc := lr.next(t, "reconnected")
	if rc["queued"] != float64(2) {
		t.Errorf("reconnected line %v, want queued 2", rc)
	}
	if down, _ := rc["down_ms"].(float64); down <= 0 {
		t.Errorf("reconnected line %v, want the time it was down", rc)
	}
	for range 2 {
		if d := lr.next(t, "delivery"); d["queued"] != true {
			t.Errorf("delivery line %v, want a queued delivery", d)
		}
	}
}
