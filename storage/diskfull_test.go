package storage_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/storage"
)

// A store opened on a full disk (ENOSPC injected through Config.NoSpace)
// with a journal a killed process left, a torn tail included: Open
// succeeds, the journal's records are pending and read, CheckWrite and
// writes fail; once there is room, writes succeed and go into the same
// journal (a process killed then loses nothing), and the flusher applies
// everything by itself.
func TestOpen_FullDiskKeepsTheJournal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "devhook.db")
	// A store with no deliveries yet, and a journal left beside it.
	db := MustOpenPath(t, path, storage.Config{})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	copyFixture(t, "journal-torn-tail.journal0", dir, "devhook.db.journal0")

	var full atomic.Bool
	full.Store(true)
	logs := newLogRecorder()
	cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1, Now: func() time.Time { return t0 }, Logf: logs.logf,
		NoSpace: func() error {
			if full.Load() {
				return syscall.ENOSPC
			}
			return nil
		}}
	db, err := storage.Open(path, cfg)
	if err != nil {
		t.Fatalf("Open on a full disk: %v", err)
	}
	defer db.Close()
	logs.waitFor(t, "cannot write to", path, "applied once it takes writes again")
	if n, err := db.Count(); err != nil || n != fixtureN {
		t.Errorf("Count() on a full disk = %d, %v; want the journal's %d", n, err, fixtureN)
	}
	if d, err := db.Delivery(id(3)); err != nil || len(d.Attempts) != 1 {
		t.Errorf("Delivery on a full disk: %+v, %v; want it with its attempt", d, err)
	}
	if err := db.CheckWrite(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("CheckWrite on a full disk: %v, want ENOSPC", err)
	}
	if _, err := db.PutDelivery(newDelivery(100)); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("PutDelivery on a full disk: %v, want ENOSPC", err)
	}

	// Room again, flushes held: a new delivery and an attempt of an old
	// one go into the journal, after its records.
	release := db.HoldFlushes()
	full.Store(false)
	mustPut(t, db, newDelivery(101))
	if a, err := db.AddAttempt(id(3), newAttempt(3)); err != nil || a.Seq != 2 {
		t.Fatalf("AddAttempt to a pending delivery: %+v, %v; want Seq 2", a, err)
	}
	// A process killed now loses nothing: a copy of the files opens whole.
	killed := t.TempDir()
	for _, name := range []string{"devhook.db", "devhook.db.journal0", "devhook.db.journal1"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(killed, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kdb := MustOpenPath(t, filepath.Join(killed, "devhook.db"), storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if n, err := kdb.Count(); err != nil || n != fixtureN+1 {
		t.Errorf("after a kill: Count() = %d, %v; want %d", n, err, fixtureN+1)
	}
	if d, err := kdb.Delivery(id(3)); err != nil || len(d.Attempts) != 2 {
		t.Errorf("after a kill: %+v, %v; want delivery 3 with its 2 attempts", d, err)
	}
	kdb.Close()

	release()
	logs.waitFor(t, "takes writes again")
	if p := db.Pending(); p != 0 {
		t.Errorf("%d records pending once the store took writes", p)
	}
	if err := db.CheckWrite(); err != nil {
		t.Errorf("CheckWrite with room: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if n, err := db.Count(); err != nil || n != fixtureN+1 {
		t.Errorf("reopened: Count() = %d, %v; want %d", n, err, fixtureN+1)
	}
	if d, err := db.Delivery(id(3)); err != nil || len(d.Attempts) != 2 {
		t.Errorf("reopened: %+v, %v; want delivery 3 with its 2 attempts", d, err)
	}
}

// A read-only Open (deliveries list, show) with a journal a killed process
// left: the records are shown, not applied; nothing is written, removed or
// set aside, and Logf says so; writes fail.
func TestOpen_ReadOnlyReadsTheJournal(t *testing.T) {
	for _, c := range []struct {
		fixture string
		n       int
		say     []string
	}{
		{"journal-intact.journal0", fixtureN, []string{"holds 24 records", "shown, not applied", "devhook listen applies them"}},
		{"journal-damaged-middle.journal0", fixtureN, []string{"is damaged", "23 intact records are shown", "left as it is"}},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "devhook.db")
			db := MustOpenPath(t, path, storage.Config{})
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			journal := copyFixture(t, c.fixture, dir, "devhook.db.journal0")
			logs := newLogRecorder()
			ro, err := storage.Open(path, storage.Config{ReadOnly: true, MaxDeliveries: 1, Logf: logs.logf})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(logs.lines(), func(l string) bool { return containsAll(l, c.say...) }) {
				t.Errorf("logged %q, want a line with %q", logs.lines(), c.say)
			}
			// Retention (MaxDeliveries 1) does not run: nothing is written.
			if n, err := ro.Count(); err != nil || n < c.n-1 {
				t.Errorf("Count() = %d, %v; want the journal's deliveries", n, err)
			}
			if d, err := ro.Delivery(id(0)); err != nil || len(d.Attempts) != 1 {
				t.Errorf("Delivery: %+v, %v; want it with its attempt", d, err)
			}
			if _, err := ro.PutDelivery(newDelivery(100)); err == nil || !strings.Contains(err.Error(), "read-only") {
				t.Errorf("PutDelivery on a read-only store: %v", err)
			}
			if _, err := ro.Prune(); err == nil {
				t.Error("Prune on a read-only store succeeded")
			}
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, before) {
				t.Error("a read-only Open changed the store")
			}
			if got, _ := os.ReadFile(path + ".journal0"); !bytes.Equal(got, journal) {
				t.Error("a read-only Open changed the journal")
			}
			if asides, _ := filepath.Glob(path + "*.damaged-*"); len(asides) != 0 {
				t.Errorf("a read-only Open set aside %v", asides)
			}
		})
	}
}
