package boltrelay

import "time"

// CompactSyncingDir is Compact with the directory's sync replaced, for a
// test of its failure: a directory's fsync cannot be made to fail for real
// (a full disk or a missing permission fails earlier, and tests run as root).
func CompactSyncingDir(path string, lockTimeout time.Duration, syncDir func(string) error) (CompactResult, error) {
	return compact(path, lockTimeout, syncDir)
}
