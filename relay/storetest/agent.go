package storetest

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// agent is a minimal agent on one connection, over the relay's real
// WebSocket client: it answers every delivery 200 with "ok <id>", acks
// the queued ones (as an agent does once it recorded them), and keeps
// count of the deliveries it got.
type agent struct {
	conn *relayclient.Conn
	done chan struct{}
	got  *received
}

// received counts the deliveries the agents of a test got, by id.
type received struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *received) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = make(map[string]int)
	}
	r.n[id]++
}

// count returns how many times delivery id arrived.
func (r *received) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// connect connects an agent to channel cr of the relay at url, counting
// its deliveries in got.
func connect(url string, cr wire.Credentials, got *received) (*agent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: url, Credentials: cr})
	if err != nil {
		return nil, err
	}
	a := &agent{conn: conn, done: make(chan struct{}), got: got}
	go func() {
		defer close(a.done)
		for {
			d, err := conn.Receive()
			if err != nil {
				return
			}
			got.add(d.ID)
			conn.Respond(d.ID, http.StatusOK, nil, []byte("ok "+d.ID))
			if d.Queued {
				conn.Ack(d.ID)
			}
		}
	}()
	return a, nil
}

// mustConnect is connect, failing t on an error; the agent is closed
// when t ends.
func mustConnect(t *testing.T, url string, cr wire.Credentials, got *received) *agent {
	t.Helper()
	a, err := connect(url, cr, got)
	if err != nil {
		t.Fatalf("connect an agent to channel %s: %v", cr.Channel, err)
	}
	t.Cleanup(a.close)
	return a
}

// close ends the agent's connection and waits for its reader.
func (a *agent) close() {
	a.conn.Close()
	<-a.done
}

// waitUntil polls cond until it holds, failing t after limit: for what
// waits on a backoff or a sweep on a busy machine.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not so after %s: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
