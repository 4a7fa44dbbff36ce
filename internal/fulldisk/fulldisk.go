// Package fulldisk is for tests only: a real file system that fills up,
// rather than an error injected in its place. Mount gives a small tmpfs
// (as root; the test is skipped with the reason otherwise, and fails
// when CI is set, where it must run), Fill takes its last byte, and
// Free gives the room back.
package fulldisk

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Disk is a tmpfs mounted for one test, unmounted when it ends.
type Disk struct {
	Dir string
	t   testing.TB
}

// Mount mounts a tmpfs of size (as mount(8) reads it: "4m") on a new
// directory and returns it.
func Mount(t testing.TB, size string) *Disk {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		msg := "a real full disk is a tmpfs this test mounts, which " + why
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		skip("only root may do")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		skip(fmt.Sprintf("this machine refused (%v: %s)", err, out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return &Disk{Dir: dir, t: t}
}

// filler is the file that takes the room.
const filler = ".fulldisk-filler"

// Fill writes a file until the disk has not a byte left: the next write
// of any file fails with ENOSPC.
func (d *Disk) Fill() {
	d.t.Helper()
	f, err := os.OpenFile(filepath.Join(d.Dir, filler), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for len(buf) > 0 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				d.t.Fatal(err)
			}
			buf = buf[:len(buf)/2] // down to the last byte
		}
	}
	probe := filepath.Join(d.Dir, ".fulldisk-probe")
	err = os.WriteFile(probe, []byte("x"), 0o600)
	os.Remove(probe)
	if !errors.Is(err, syscall.ENOSPC) {
		d.t.Fatalf("the disk is filled, yet a byte could be written (%v)", err)
	}
}

// Free removes the file Fill wrote.
func (d *Disk) Free() {
	d.t.Helper()
	if err := os.Remove(filepath.Join(d.Dir, filler)); err != nil {
		d.t.Fatal(err)
	}
}
