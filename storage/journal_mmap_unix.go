//go:build unix

package storage

import (
	"os"
	"syscall"
)

// mapFile maps the first n bytes of f, shared, to read and write: a write
// to the mapping is a write to the file.
func mapFile(f *os.File, n int64) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }
