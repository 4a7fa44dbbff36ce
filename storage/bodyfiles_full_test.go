package storage_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// mountSmallTmpfs mounts a tmpfs of size bytes on a new directory, a real
// full disk, unmounted when the test ends.
func mountSmallTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Getuid() != 0 {
		if os.Getenv("CI") == "1" {
			t.Fatal("CI=1: this test needs root to mount a tmpfs")
		}
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fillLeaving fills the disk dir is on with the file dir/filler, then
// gives back room bytes of it: the next writes have that room, and less
// than a page more.
func fillLeaving(t *testing.T, dir string, room int64) {
	t.Helper()
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	chunk := make([]byte, 4<<10)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	fi, err := filler.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := filler.Truncate(fi.Size() - room); err != nil {
		t.Fatal(err)
	}
}

// A flush that fails writing the bodies to their file on a full disk gives
// back the room its torn write took: it is the room the journal records
// the next deliveries in. (The body file kept those blocks, referred to by
// nothing, until a flush succeeded.)
func TestBodyFiles_FailedWriteGivesRoomBack(t *testing.T) {
	dir := mountSmallTmpfs(t, "4m")
	db := MustOpenPath(t, filepath.Join(dir, "devhook.db"), storage.Config{MaxDeliveries: -1, MaxAge: -1})
	release := db.HoldFlushes()
	for i := range 24 {
		d := newDelivery(i)
		d.Body = append(d.Body, bytes.Repeat([]byte(" "), 16<<10)...)
		mustPut(t, db, d)
	}
	const room = 128 << 10 // less than the bodies pending (24 × 16 KiB)
	fillLeaving(t, dir, room)
	before := freeBytes(t, dir)
	release()
	if err := db.Flush(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Flush with %d bytes free: %v, want ENOSPC", before, err)
	}
	if after := freeBytes(t, dir); after < before-16<<10 {
		t.Errorf("free after the failed flush: %d bytes, before it %d: the torn body write kept the room", after, before)
	}
	if n := db.Pending(); n != 24 {
		t.Errorf("%d records pending, want the 24 still in the journal", n)
	}
}

// A flush whose bodies fit but whose commit does not gives their room back
// too: nothing refers to them, and the next flush writes them again.
func TestBodyFiles_FailedCommitGivesRoomBack(t *testing.T) {
	dir := mountSmallTmpfs(t, "4m")
	db := MustOpenPath(t, filepath.Join(dir, "devhook.db"), storage.Config{MaxDeliveries: -1, MaxAge: -1})
	release := db.HoldFlushes()
	var bodies int64
	for i := range 24 {
		d := newDelivery(i)
		d.Body = append(d.Body, bytes.Repeat([]byte(" "), 16<<10)...)
		bodies += int64(len(d.Body))
		mustPut(t, db, d)
	}
	room := (bodies + 8<<10) &^ (4<<10 - 1) // the bodies, and too little for bbolt's pages
	fillLeaving(t, dir, room)
	before := freeBytes(t, dir)
	release()
	err := db.Flush()
	t.Logf("flush with %d bytes free for %d bytes of bodies: %v", before, bodies, err)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Flush: %v, want ENOSPC", err)
	}
	if after := freeBytes(t, dir); after < before-16<<10 {
		t.Errorf("free after the failed commit: %d bytes, before it %d: the bodies written kept the room", after, before)
	}
}

// A batch whose commit failed is written again where it was, once the
// disk has room: unwrite moved the file's end back, so the body file is
// its header and each body once, and every body reads back. (Without it,
// the room stayed taken, or the batch went after a hole left where it
// was.)
func TestBodyFiles_FailedCommitWrittenAgainInPlace(t *testing.T) {
	dir := mountSmallTmpfs(t, "4m")
	path := filepath.Join(dir, "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	release := db.HoldFlushes()
	var bodies int64
	var ds []*devhook.Delivery
	for i := range 24 {
		d := newDelivery(i)
		d.Body = append(d.Body, bytes.Repeat([]byte(" "), 16<<10)...)
		bodies += int64(len(d.Body))
		mustPut(t, db, d)
		ds = append(ds, d)
	}
	room := (bodies + 8<<10) &^ (4<<10 - 1) // the bodies, and too little for bbolt's pages
	fillLeaving(t, dir, room)
	release()
	if err := db.Flush(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Flush: %v, want ENOSPC (the bodies written, bbolt's commit refused)", err)
	}
	file := filepath.Join(path+".bodies", "00000001")
	if n := fileSize(t, file); n != storage.BodyFileHeaderLen {
		t.Fatalf("body file after the refused commit: %d bytes; want it cut back to its header", n)
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatalf("Flush with room again: %v", err)
	}
	if n := fileSize(t, file); n != storage.BodyFileHeaderLen+bodies {
		t.Errorf("body file: %d bytes; want its header and the %d bytes of bodies once, in the place of the batch refused", n, bodies)
	}
	wantBodies(t, db, ds...)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
