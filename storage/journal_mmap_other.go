//go:build !unix

package storage

import (
	"errors"
	"os"
)

// mapFile does not map here: the journal writes its files with pwrite
// (journal_file.go).
func mapFile(*os.File, int64) ([]byte, error) {
	return nil, errors.New("the journal is not mapped on this system")
}

func unmapFile([]byte) error { return nil }
