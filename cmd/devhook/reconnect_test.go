package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
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

// A listen whose ready line said it could not record yet says in one
// line how long it waited and for what: the disk (to record), then the
// relay, which failed tries, rather than a line of the tries and another
// that put the whole wait on recording.
func TestPrinterConnectedAfterWait(t *testing.T) {
	for _, tt := range []struct {
		c      agent.Connection
		waited time.Duration
		human  string
		json   string
	}{
		{agent.Connection{Unrecordable: 12 * time.Second, Queued: 3}, 12200 * time.Millisecond,
			"connected after waiting 12s to record, 3 queued deliveries follow\n",
			`{"event":"connected","waited_ms":12200,"record_ms":12000,"relay_ms":0,"failed_tries":0,"queued":3}`},
		{agent.Connection{Unrecordable: 8 * time.Second, Fails: 6, Failing: 17 * time.Second, Unsaid: true}, 25 * time.Second,
			"connected after waiting 25s: 8s to record, 17s for the relay (6 failed tries)\n",
			`{"event":"connected","waited_ms":25000,"record_ms":8000,"relay_ms":17000,"failed_tries":6,"queued":0}`},
		{agent.Connection{Fails: 2, Failing: 900 * time.Millisecond}, 900 * time.Millisecond,
			"connected after waiting 900ms: 900ms for the relay (2 failed tries)\n",
			`{"event":"connected","waited_ms":900,"record_ms":0,"relay_ms":900,"failed_tries":2,"queued":0}`},
		{agent.Connection{Unrecordable: 10 * time.Millisecond, Fails: 1, Failing: 3 * time.Second}, 3 * time.Second,
			"connected after waiting 3s: 10ms to record, 3s for the relay (1 failed try)\n",
			`{"event":"connected","waited_ms":3000,"record_ms":10,"relay_ms":2990,"failed_tries":1,"queued":0}`},
	} {
		var buf bytes.Buffer
		(&printer{}).connectedAfterWait(tt.c, tt.waited, &buf)
		if buf.String() != tt.human {
			t.Errorf("%+v: %q, want %q", tt.c, buf.String(), tt.human)
		}
		buf.Reset()
		(&printer{w: &buf, json: true}).connectedAfterWait(tt.c, tt.waited, io.Discard)
		if got := strings.TrimSpace(buf.String()); got != tt.json {
			t.Errorf("%+v with --json:\n got %s\nwant %s", tt.c, got, tt.json)
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
