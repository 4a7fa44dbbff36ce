//go:build !linux

package storage

// releaseMapped does nothing here: see mapped_linux.go.
func (db *DB) releaseMapped() {}
