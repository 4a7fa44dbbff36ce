package pending_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/internal/fulldisk"
	"github.com/devhook/devhook/jsonfile"
	"github.com/devhook/devhook/pending"
	"github.com/devhook/devhook/running"
)

// lines collects what Writes says.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(format, args...))
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.l, "\n")
}

// run runs w until the test ends.
func run(t *testing.T, w *pending.Writes) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling the file system
	}
}

// On a really full disk, the files of listen's start (channels.json
// through jsonfile, listen.json through running) are kept, said once,
// and written by themselves once there is room; a removal asked while
// the write still waits replaces it.
func TestWritesWaitForRoomOnAFullDisk(t *testing.T) {
	disk := fulldisk.Mount(t, "1m")
	var log lines
	w := pending.New(pending.Config{Logf: log.logf, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	channels := jsonfile.New[string](filepath.Join(disk.Dir, "channels.json"))
	disk.Fill()

	if err := w.Do(channels.Path()+" relay", "channels.json", func() error { return channels.Put("relay", "channel-1") }); err != nil {
		t.Fatalf("channels.json on a full disk: %v, want it kept", err)
	}
	var remove func() error
	me := running.Listen{PID: os.Getpid(), Data: disk.Dir, PublicURL: "http://relay/c/1"}
	if err := w.Do(running.Path(disk.Dir), "listen.json", func() (err error) {
		remove, err = running.Write(disk.Dir, me)
		return err
	}); err != nil {
		t.Fatalf("listen.json on a full disk: %v, want it kept", err)
	}
	if got := w.Waiting(); len(got) != 2 {
		t.Fatalf("waiting %v, want both files", got)
	}
	for _, f := range []string{"channels.json", "listen.json"} {
		if !strings.Contains(log.String(), "cannot write "+f+" (") || !strings.Contains(log.String(), "no space left on device") {
			t.Errorf("not said that %s waits for room:\n%s", f, log.String())
		}
	}

	run(t, w)
	disk.Free()
	waitFor(t, "both files written", func() bool { return len(w.Waiting()) == 0 })
	if v, ok, err := channels.Get("relay"); err != nil || !ok || v != "channel-1" {
		t.Errorf("channels.json after room returned: %q %v %v", v, ok, err)
	}
	if l, err := running.Read(disk.Dir); err != nil || l.PublicURL != me.PublicURL {
		t.Errorf("listen.json after room returned: %+v %v", l, err)
	}
	for _, f := range []string{"channels.json", "listen.json"} {
		if n := strings.Count(log.String(), "wrote "+f+", which waited"); n != 1 {
			t.Errorf("said %d times that %s was written, want once:\n%s", n, f, log.String())
		}
	}

	// Full again: a write kept, then its removal asked (listen stopping)
	// before there is room: nothing is written.
	disk.Fill()
	other := jsonfile.New[string](filepath.Join(disk.Dir, "webhooks.json"))
	key := other.Path() + " service"
	w.Do(key, "webhooks.json", func() error { return other.Put("service", "hook-1") })
	if err := w.Do(key, "webhooks.json", func() error {
		return other.Update(func(m map[string]string) bool { _, ok := m["service"]; delete(m, "service"); return ok })
	}); err != nil {
		t.Fatalf("the removal of an entry never written: %v", err)
	}
	if got := w.Waiting(); len(got) != 0 {
		t.Fatalf("waiting %v after the removal replaced the write", got)
	}
	if err := w.Do(running.Path(disk.Dir), "listen.json", remove); err != nil { // removing needs no room
		t.Fatal(err)
	}
	disk.Free()
	if _, err := os.Stat(other.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("webhooks.json written after its entry's removal: %v", err)
	}
	if _, err := running.Read(disk.Dir); !errors.Is(err, running.ErrNotRunning) {
		t.Errorf("listen.json after its removal: %v", err)
	}
}

// Errors other than a full disk are returned, not kept.
func TestWritesReturnOtherErrors(t *testing.T) {
	w := pending.New(pending.Config{})
	boom := errors.New("permission denied")
	if err := w.Do("k", "f", func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want the error", err)
	}
	if err := w.Do("q", "f", func() error { return fmt.Errorf("write: %w", syscall.EDQUOT) }); err != nil {
		t.Fatalf("a quota: %v, want it kept", err)
	}
	if got := w.Waiting(); len(got) != 1 {
		t.Fatalf("waiting %v", got)
	}
}

// Run tries no faster than its backoff: against a disk that stays full,
// the tries over a window stay within what doubling from MinBackoff to
// MaxBackoff (each wait at least half its step) allows.
func TestWritesRetryWithinTheBackoff(t *testing.T) {
	const minB, maxB = 20 * time.Millisecond, 200 * time.Millisecond
	var log lines
	w := pending.New(pending.Config{Logf: log.logf, MinBackoff: minB, MaxBackoff: maxB})
	var mu sync.Mutex
	tries := 0
	start := time.Now()
	w.Do("k", "listen.json", func() error {
		mu.Lock()
		defer mu.Unlock()
		tries++
		return syscall.ENOSPC
	})
	run(t, w)
	count := func() int { mu.Lock(); defer mu.Unlock(); return tries }
	waitFor(t, "eight tries", func() bool { return count() >= 8 })
	elapsed := time.Since(start)
	allowed, step, waited := 1, minB, time.Duration(0)
	for {
		if waited += step / 2; waited > elapsed {
			break
		}
		allowed++
		step = min(2*step, maxB)
	}
	if n := count(); n > allowed+2 {
		t.Fatalf("%d tries in %s; the backoff allows %d", n, elapsed, allowed)
	}
	if n := strings.Count(log.String(), "listen.json"); n != 1 {
		t.Errorf("a write failing alike said %d times, want once:\n%s", n, log.String())
	}
}

// A write that keeps failing alike is said once, however many times it is
// tried: its error names a temporary file, new at each try (jsonfile's),
// which is no new cause to say it again.
func TestWritesFailingAlikeSaidOnce(t *testing.T) {
	disk := fulldisk.Mount(t, "1m")
	var log lines
	w := pending.New(pending.Config{Logf: log.logf, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	channels := jsonfile.New[string](filepath.Join(disk.Dir, "channels.json"))
	disk.Fill()
	var mu sync.Mutex
	tries := 0
	if err := w.Do(channels.Path()+" relay", "channels.json", func() error {
		mu.Lock()
		tries++
		mu.Unlock()
		return channels.Put("relay", "channel-1")
	}); err != nil {
		t.Fatalf("channels.json on a full disk: %v, want it kept", err)
	}
	run(t, w)
	waitFor(t, "five tries", func() bool { mu.Lock(); defer mu.Unlock(); return tries >= 5 })
	if n := strings.Count(log.String(), "cannot write channels.json"); n != 1 {
		t.Errorf("a write failing alike said %d times in %d tries, want once:\n%s", n, tries, log.String())
	}
}

// The writes still waiting for room when Run ends are said in words, not
// as a Go slice ("[channels.json listen.json]"). ENOSPC is returned by the
// writes themselves: what is tested is the line, not the disk.
func TestNeverWrittenSaidInWords(t *testing.T) {
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{[]string{"channels.json"}, "never written, for want of room: channels.json"},
		{[]string{"channels.json", "listen.json"}, "never written, for want of room: channels.json and listen.json"},
		{[]string{"channels.json", "listen.json", "webhooks.json"}, "never written, for want of room: channels.json, listen.json and webhooks.json"},
	} {
		var log lines
		w := pending.New(pending.Config{Logf: log.logf, MinBackoff: time.Hour, MaxBackoff: time.Hour})
		for _, name := range tt.names {
			if err := w.Do(name, name, func() error { return &os.PathError{Op: "write", Path: name, Err: syscall.ENOSPC} }); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := w.Run(ctx); err != nil {
			t.Fatal(err)
		}
		var said []string
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.HasPrefix(l, "never written") {
				said = append(said, l)
			}
		}
		if len(said) != 1 || said[0] != tt.want {
			t.Errorf("said %q, want %q", said, tt.want)
		}
	}
}
