package boltrelay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Compacting relay.db. bbolt reuses the pages that removed deliveries
// free, but never gives them back to the disk: after a flood the file
// keeps its largest size. Compact copies what the file holds
// into a new file, packed, and puts it in the old one's place:
//
//  1. the file is opened as the relay opens it, which takes its lock: a
//     running relay holds it, and compacting then fails with storage.ErrLocked;
//  2. everything is copied into relay.db.compact beside it (bbolt's
//     Compact, pages filled), which is synced;
//  3. it is renamed over relay.db and the directory synced; only then is
//     the old file closed and its lock released.
//
// A crash before the rename leaves relay.db as it was (and a stale
// relay.db.compact, which the next compaction replaces); after it, the new
// file is complete.

// CompactResult is the size of relay.db before and after Compact.
type CompactResult struct {
	Before, After int64
}

// Compact rewrites the relay's file at path without its free
// pages, giving the space back to the disk. The relay must be stopped:
// the error wraps storage.ErrLocked when it runs.
func Compact(path string, lockTimeout time.Duration) (CompactResult, error) {
	return compact(path, lockTimeout, syncDir)
}

// compact is Compact with the directory's sync given (a test's fault: a
// directory's fsync cannot be made to fail for real).
func compact(path string, lockTimeout time.Duration, syncDir func(string) error) (CompactResult, error) {
	var res CompactResult
	st, err := os.Stat(path)
	if err != nil {
		return res, fmt.Errorf("boltrelay: compact %s: %w", path, err)
	}
	res.Before = st.Size()
	src, err := Open(path, Config{LockTimeout: lockTimeout})
	if err != nil {
		return res, err
	}
	defer src.Close()
	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("boltrelay: compact %s: remove the leftover %s: %w", path, tmp, err)
	}
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return res, fmt.Errorf("boltrelay: compact %s: create %s: %w", path, tmp, err)
	}
	fail := func(err error) (CompactResult, error) {
		dst.Close()
		os.Remove(tmp)
		if isDiskFull(err) {
			return res, fmt.Errorf("boltrelay: compact %s: %w: the compacted copy needs up to the file's size again in free space; free some and retry", path, err)
		}
		return res, fmt.Errorf("boltrelay: compact %s: %w", path, err)
	}
	if err := bolt.Compact(dst, src.bolt, 64<<20); err != nil {
		return fail(err)
	}
	if err := dst.Sync(); err != nil {
		return fail(err)
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("boltrelay: compact %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("boltrelay: compact %s: %w", path, err)
	}
	if st, err := os.Stat(path); err == nil {
		res.After = st.Size()
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		// The compacted file is in place, but a crash may still bring the
		// old one back (which holds the same deliveries).
		return res, fmt.Errorf("boltrelay: compact %s: the compacted file is in place but its directory is not synced: a crash may bring back the uncompacted file: %w", path, err)
	}
	return res, nil
}

// syncDir syncs the directory dir, making a rename in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
