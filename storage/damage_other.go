//go:build !unix

package storage

import (
	"errors"
	"time"
)

// renameLocked cannot lock the file here: it is left in place.
func renameLocked(path, aside string, timeout time.Duration) error {
	return errors.ErrUnsupported
}
