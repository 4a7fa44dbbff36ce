// Package atomicfile writes a file whole: a reader sees what was there or
// all of what is written, never half of it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes b to a temporary file beside path, gives it mode perm and
// renames it over path; a failure leaves what was there and no temporary
// file. It does not sync: a report or an export, not a store.
func Write(path string, b []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
