//go:build unix

package storage

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// withLock runs fn holding the lock of the file at path as bbolt takes it
// (flock: exclusive, or shared), waiting up to timeout for another process
// to release it; errLockHeld if it does not.
func withLock(path string, exclusive bool, timeout time.Duration, fn func() error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
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
	return fn()
}
