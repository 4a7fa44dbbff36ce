//go:build unix

package storage

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// renameLocked renames the file at path to aside holding its lock, as
// bbolt takes it (flock), so that a process using the file never has it
// renamed under it.
func renameLocked(path, aside string, timeout time.Duration) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return errLockHeld
		}
		time.Sleep(50 * time.Millisecond) // as bbolt waits for the lock
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return os.Rename(path, aside)
}
