//go:build !unix

package storage

import (
	"errors"
	"time"
)

// withLock cannot lock the file here: a damaged file is reported and left
// in place.
func withLock(path string, exclusive bool, timeout time.Duration, fn func() error) error {
	return errors.ErrUnsupported
}
