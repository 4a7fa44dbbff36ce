package boltrelay_test

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
)

// Compact syncs the directory after the rename, which its promise rests
// on, and says so when that sync fails instead of dropping the error.
func TestCompact_SyncsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "relay.db")
	s := mustOpen(t, path)
	if err := s.PutChannel(relay.Channel{ID: "c", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	var synced []string
	if _, err := boltrelay.CompactSyncingDir(path, time.Second, func(d string) error {
		synced = append(synced, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 1 || synced[0] != dir {
		t.Fatalf("directories synced: %q, want %q once", synced, dir)
	}

	res, err := boltrelay.CompactSyncingDir(path, time.Second, func(string) error { return syscall.EIO })
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "directory is not synced") {
		t.Fatalf("a failed directory sync: %v, want EIO said", err)
	}
	if res.After == 0 || fileSize(t, path) != res.After {
		t.Fatalf("the compacted file is in place all the same: %+v, file %d bytes", res, fileSize(t, path))
	}
	if _, err := boltrelay.Compact(path, time.Second); err != nil {
		t.Fatalf("the real directory sync: %v", err)
	}
}
