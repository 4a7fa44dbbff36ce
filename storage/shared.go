package storage

import (
	"fmt"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// What the single relay's store (package boltrelay) uses of this package,
// exported for it alone. Its relay.db was once a DB of this package, and
// its queue entries are still this package's delivery records: it shares
// the record encoding, the checks a bbolt file passes before it is mapped
// (boltcheck.go), the damaged-file error (damage.go) and ErrLocked, the
// group commit (group.go) and the bounds of an id. They stay here, with
// the delivery store whose failure modes shaped them, rather than in a
// package of their own that would split the damaged-file error from the
// store that sets files aside. Nothing here knows of the relay: this
// package does not import it.

// OpenBolt opens the bbolt file at path as Open does, creating its
// directory: a file bbolt cannot safely map (empty, cut short, not bbolt)
// is refused before it is, with an error wrapping ErrDamaged that says to
// move it away; one another process holds past opts.Timeout wraps
// ErrLocked; a panic of bbolt reading the file becomes an error.
func OpenBolt(path string, opts *bolt.Options) (*bolt.DB, error) {
	return openFile(path, opts)
}

// DamagedFile is the error of the file at path found damaged (why): it
// wraps ErrDamaged and why, and says to move the file away.
func DamagedFile(path string, why error) error { return corruptError(path, why) }

// GroupCommit commits concurrent writes to one bbolt file together: one
// fsync (or one round of page writes) for all the writes that arrived
// while the previous commit ran. Its zero value is ready; one per file.
type GroupCommit struct{ g group }

// Update runs fn in a write transaction of b, possibly shared with
// concurrent writes, and returns once it is committed. fn may run more
// than once, so it must set its results afresh on each run; its error
// fails only its own write, and a panic in it becomes its error.
func (c *GroupCommit) Update(b *bolt.DB, fn func(*bolt.Tx) error) error {
	return c.g.update(b, fn)
}

// AppendDelivery appends d's record, body included and attempts left out,
// to b: layout 1 of a delivery's record, without a checksum (codec.go),
// as relay.db has always held it.
func AppendDelivery(b []byte, d *devhook.Delivery) []byte { return appendQueued(b, d) }

// DecodeDelivery decodes a record AppendDelivery wrote.
func DecodeDelivery(b []byte) (*devhook.Delivery, error) {
	d, _, err := decodeMeta(nil, b)
	if err != nil {
		return nil, fmt.Errorf("its record %w", err)
	}
	return d, nil
}

// ValidID returns an error with code devhook.EINVALID when id cannot be a
// key of a store: empty, over 200 bytes, or with a NUL byte. what names
// the id in the error ("delivery", "channel").
func ValidID(what, id string) error { return validID(what, id) }
