package storage

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// A database file that a full disk (a real tmpfs, filled) let bbolt
// create but not write is removed by the failed open: before, the empty
// file stayed, and the next start, with room again, refused it as damaged
// and asked to move it away (found from outside: listen with its built-in
// relay started on a full data directory left an empty relay.db).
func TestOpen_FullDiskLeavesNoEmptyFile(t *testing.T) {
	dir, filler := fullTmpfs(t)
	path := filepath.Join(dir, "relay.db")
	if b, err := OpenBolt(path, nil); err == nil {
		b.Close()
		t.Fatal("opened a new database on a full disk: want an error")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed open left %s (%v)", path, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	b, err := OpenBolt(path, nil)
	if err != nil {
		t.Fatalf("open with room again: %v", err)
	}
	b.Close()
}

// fullTmpfs mounts a tmpfs of 256k on a new directory (a real disk,
// unmounted when the test ends) and fills it with the file filler: the
// next write there fails with ENOSPC until filler is removed.
func fullTmpfs(t *testing.T) (dir, filler string) {
	t.Helper()
	if os.Getuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("needs root to mount a tmpfs")
	}
	dir = t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	filler = filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for chunk := make([]byte, 4096); ; {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return dir, filler
		}
	}
}
