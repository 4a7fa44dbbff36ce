package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/storage"
)

// An agent started on a full disk (ENOSPC injected through
// storage.Config.NoSpace) says so, takes no delivery (it does not connect,
// so the relay queues them and answers 202), still reads its history, and
// connects by itself once there is room: the receiver then gets every
// delivery, each recorded, and the relay's queue empties.
func TestAgentStartsOnAFullDisk(t *testing.T) {
	rec, recv := newRecorder(t)
	var full atomic.Bool
	var db *storage.DB
	var (
		mu      sync.Mutex
		lines   []string
		healths []devhook.Health
	)
	saidFull := make(chan struct{})
	var once sync.Once
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		var err error
		db, err = storage.Open(filepath.Join(t.TempDir(), "deliveries.db"), storage.Config{
			NoSpace: func() error {
				if full.Load() {
					return syscall.ENOSPC
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		c.Store = db
		c.Logf = func(format string, args ...any) {
			line := strings.TrimSpace(fmt.Sprintf(format, args...))
			mu.Lock()
			lines = append(lines, line)
			mu.Unlock()
			if strings.HasPrefix(line, "cannot record deliveries") {
				once.Do(func() { close(saidFull) })
			}
		}
		c.OnChange = func(ch devhook.Change) {
			if ch.Kind == devhook.ChangeHealth {
				mu.Lock()
				healths = append(healths, *ch.Health)
				mu.Unlock()
			}
		}
	})
	// History from before the disk filled.
	mustRecord(t, db, "0195b1c8-0000-7000-8000-000000000001")
	const queued = 5
	tn.queue(t, queued)
	full.Store(true)

	cfg := tn.cfg
	cfg.RelayURL = tn.relaySrv.URL
	ag, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-saidFull:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not say that it cannot record")
	}
	mu.Lock()
	line := lines[0]
	mu.Unlock()
	for _, want := range []string{"no space left on device", "not connected to the relay", "queued"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q does not say %q", line, want)
		}
	}
	if h := ag.Health(); !strings.Contains(h.StorageError, "no space left") {
		t.Errorf("Health() = %+v, want the storage error", h)
	}
	select {
	case <-tn.connect:
		t.Fatal("the agent connected to the relay on a full disk")
	default:
	}
	// A delivery meanwhile is queued at the relay, not taken.
	tn.queue(t, 1)
	if n, _ := tn.relayDB.QueueLen(tn.creds.Channel); n != queued+1 {
		t.Errorf("relay queue %d, want %d", n, queued+1)
	}
	if got := rec.requests(); len(got) != 0 {
		t.Fatalf("the receiver got %d deliveries on a full disk", len(got))
	}
	// The history reads.
	if list, err := db.List(devhook.Filter{}); err != nil || len(list) != 1 {
		t.Errorf("List on a full disk: %d, %v; want the delivery recorded before", len(list), err)
	}

	// Room again: it connects by itself, and everything goes through.
	full.Store(false)
	select {
	case <-tn.connect:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not connect once there was room")
	}
	rec.waitFor(t, queued+1)
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	waitStored(t, db, queued+2)
	if h := ag.Health(); h.StorageError != "" {
		t.Errorf("Health() = %+v after there was room", h)
	}
	mu.Lock()
	defer mu.Unlock()
	if !containsLine(lines, "recording works again") {
		t.Errorf("log %q does not say recording works again", lines)
	}
	if len(healths) < 2 || healths[0].StorageError == "" || healths[len(healths)-1].StorageError != "" {
		t.Errorf("health changes %+v, want failing then working", healths)
	}
}

func mustRecord(t *testing.T, db *storage.DB, id string) {
	t.Helper()
	d := &devhook.Delivery{ID: id, Channel: "c", Method: "POST", Path: "/", ReceivedAt: time.Now()}
	if _, err := db.PutDelivery(d); err != nil {
		t.Fatal(err)
	}
}

func containsLine(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
