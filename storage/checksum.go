package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	bolt "go.etcd.io/bbolt"
)

// The checks bucket: checksums of the values that bbolt stores on pages of
// their own, written by devhook before every record had its own (codec.go)
// and still read. bbolt checks no page's bytes: a body or an attempt
// longer than a page lies on overflow pages, where damage (a disk's, a
// copy's) changes the value and nothing else, so that no page check can
// find it. That bucket holds the CRC-32C of each such body (key: the
// delivery's id) and attempt (key: the attempt's key) longer than half a
// page; a read compares them and fails naming the delivery and the file,
// and the other deliveries read as before. Records written since carry
// their checksum in themselves, a body's in its delivery's record, and
// nothing is added to the bucket; retention removes what it holds of the
// deliveries it removes.
const bucketChecks = "checks"

// checkOf returns the checksum of v as it is stored.
func checkOf(v []byte) [4]byte {
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc32.Checksum(v, crcTable()))
	return c
}

// errValueDamaged is what a read gets for a value whose checksum does not
// match.
type errValueDamaged struct{ what string }

func (e errValueDamaged) Error() string {
	return e.what + " does not match its checksum: a page of the file is damaged"
}

func (e errValueDamaged) Unwrap() error { return ErrDamaged }

// verify checks v, stored at key, against its checksum, if it has one.
func verify(tx *bolt.Tx, key, v []byte, what string) error {
	b := tx.Bucket([]byte(bucketChecks))
	if b == nil {
		return nil
	}
	want := b.Get(key)
	if want == nil {
		return nil
	}
	if c := checkOf(v); string(want) != string(c[:]) {
		return errValueDamaged{what}
	}
	return nil
}

// damagedValue is the error of a read that met a damaged value of the
// store's file: it names the file and what to do.
func (db *DB) damagedValue(err error) error {
	return fmt.Errorf("storage: %s: %w; the other deliveries read as before. To keep the file as evidence and start a new one: stop devhook and move it away (for example: mv %s %s.bad)", db.path, err, db.path, db.path)
}
