package running_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/devhook/devhook/running"
)

func TestWriteReadRemove(t *testing.T) {
	dir := t.TempDir()
	if _, err := running.Read(dir); !errors.Is(err, running.ErrNotRunning) {
		t.Fatalf("Read of an empty directory: %v, want ErrNotRunning", err)
	}
	want := running.Listen{PID: os.Getpid(), Data: dir, InspectorURL: "http://127.0.0.1:5050",
		PublicURL: "http://127.0.0.1:5051/c/abc", Channel: "abc", Webhook: "devhook-1",
		StartedAt: time.Date(2026, 11, 26, 1, 2, 3, 0, time.UTC)}
	remove, err := running.Write(dir, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := running.Read(dir)
	if err != nil || got != want {
		t.Fatalf("Read = %+v, %v; want %+v", got, err, want)
	}
	fi, err := os.Stat(running.Path(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("listen.json: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := running.Read(dir); !errors.Is(err, running.ErrNotRunning) {
		t.Fatalf("Read after remove: %v, want ErrNotRunning", err)
	}
	if err := remove(); err != nil {
		t.Errorf("a second remove: %v", err)
	}
}

// A listen that exits removes its own file only: one a later listen
// wrote (another pid) stays.
func TestRemoveKeepsALaterListensFile(t *testing.T) {
	dir := t.TempDir()
	remove, err := running.Write(dir, running.Listen{PID: os.Getpid(), Data: dir})
	if err != nil {
		t.Fatal(err)
	}
	later := running.Listen{PID: os.Getppid(), Data: dir, PublicURL: "http://later"}
	if _, err := running.Write(dir, later); err != nil {
		t.Fatal(err)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if got, err := running.Read(dir); err != nil || got.PublicURL != "http://later" {
		t.Fatalf("the later listen's file: %+v, %v", got, err)
	}
}

// A file left by a listen that was killed names a pid that is gone: Read
// says it is stale and still returns what it said.
func TestReadStaleWhenTheProcessIsGone(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.Process.Pid
	dir := t.TempDir()
	if _, err := running.Write(dir, running.Listen{PID: gone, Data: dir, PublicURL: "http://gone"}); err != nil {
		t.Fatal(err)
	}
	l, err := running.Read(dir)
	if !errors.Is(err, running.ErrStale) || l.PublicURL != "http://gone" {
		t.Fatalf("Read of a dead listen's file: %+v, %v; want ErrStale with its content", l, err)
	}
	// The next listen writes over it.
	if _, err := running.Write(dir, running.Listen{PID: os.Getpid(), Data: dir, PublicURL: "http://next"}); err != nil {
		t.Fatal(err)
	}
	if l, err := running.Read(dir); err != nil || l.PublicURL != "http://next" {
		t.Fatalf("after the next listen: %+v, %v", l, err)
	}
}

// Every way the file can be wrong has a fixture: each is reported as
// damaged (never as a running listen), and the next listen writes over it.
func TestReadDamagedFiles(t *testing.T) {
	for _, name := range []string{"truncated.json", "empty.json", "nopid.json", "notjson.json"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(running.Path(dir), b, 0o600); err != nil {
				t.Fatal(err)
			}
			if l, err := running.Read(dir); !errors.Is(err, running.ErrDamaged) || l.PID != 0 {
				t.Fatalf("Read = %+v, %v; want ErrDamaged", l, err)
			}
			if _, err := running.Write(dir, running.Listen{PID: os.Getpid(), Data: dir}); err != nil {
				t.Fatal(err)
			}
			if _, err := running.Read(dir); err != nil {
				t.Fatalf("after a listen wrote over it: %v", err)
			}
		})
	}
}

func TestWriteRefusesNoPidAndAMissingDirectory(t *testing.T) {
	if _, err := running.Write(t.TempDir(), running.Listen{}); err == nil {
		t.Error("Write without a pid: no error")
	}
	missing := filepath.Join(t.TempDir(), "no", "such")
	if _, err := running.Write(missing, running.Listen{PID: os.Getpid()}); err == nil {
		t.Error("Write into a missing directory: no error")
	}
}
