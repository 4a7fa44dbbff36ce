package storage

import (
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// releaseMapped gives back the pages of the file that bbolt has mapped
// into this process, keeping them in the page cache. bbolt reads through
// a read-only shared mapping, and every page it touches stays mapped: a
// long run would otherwise count the whole file in the process's RSS,
// though the kernel could drop those pages at any time. A page touched
// again is mapped again from the cache. The mapping cannot move while a
// read transaction is open, so the range is taken inside one.
func (db *DB) releaseMapped() {
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		addr, size := db.bolt.Info().Data, uintptr(tx.Size())
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, addr, size, syscall.MADV_DONTNEED)
		return nil
	})
}
