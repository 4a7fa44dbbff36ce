package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"
)

// A damaged deliveries file: what finds it, what it becomes, where it goes.
//
// bbolt keeps no checksum of its pages and trusts every page it reads: a
// damaged page makes it panic, read outside its mapping (a fault, which
// kills the process unless the goroutine asked for a panic instead), or
// return garbage. So the store:
//
//   - reads the meta pages before bbolt maps the file (checkBoltFile);
//   - once bbolt holds the file's lock, reads every page of the tree and
//     the freelist with pread, bounds checked (checkTree), before any
//     other read or write: retention, the journal's replay;
//   - runs every call into bbolt under safely: a panic, or a fault, becomes
//     an error wrapping ErrDamaged that names the file and what to do.
//
// A writable Open that finds the file damaged renames it to
// <file>.damaged-<UTC time>, kept as evidence, and fails saying so: the
// journal beside it, holding what the file may not have yet, is left as
// it is and applied to the new file that the next Open creates. A
// read-only Open touches nothing and says what to do.

// ErrDamaged is wrapped by the error of an Open, a read or a write that
// found the file damaged.
var ErrDamaged = errors.New("the file is damaged")

// damageError is a file found damaged: why, and where it was set aside
// ("" when it was left in place).
type damageError struct {
	path, aside string
	why         error
	readOnly    bool
}

func (e *damageError) Unwrap() []error { return []error{ErrDamaged, e.why} }

func (e *damageError) Error() string {
	switch {
	case e.aside != "":
		return fmt.Sprintf("storage: open %s: the file is damaged (%v); devhook moved it to %s, kept as evidence, and touched nothing else: the deliveries not yet in it stay in its journal and go into the new file; start devhook again to record in a new file", e.path, e.why, e.aside)
	case e.readOnly:
		return fmt.Sprintf("storage: open %s: the file is not a devhook database or is damaged (%v); devhook left it untouched: devhook listen with this data directory sets it aside and starts a new one, or move it away yourself (for example: mv %s %s.bad)", e.path, e.why, e.path, e.path)
	}
	return fmt.Sprintf("storage: open %s: the file is not a devhook database or is damaged (%v); devhook left it untouched: move it away (for example: mv %s %s.bad) and devhook will start a new one", e.path, e.why, e.path, e.path)
}

// corruptError is the error of a file that must not be opened.
func corruptError(path string, err error) error {
	return &damageError{path: path, why: err}
}

// safely runs fn, a call into bbolt, turning a panic or a fault reading
// the mapping into an error that names the file.
func (db *DB) safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("storage: %s: %w (bbolt failed reading it: %v); stop devhook and start devhook listen again: it checks the file and sets it aside as evidence when it finds the damage; if it starts all the same, move the file away yourself (for example: mv %s %s.bad)", db.path, ErrDamaged, r, db.path, db.path)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return fn()
}

// asideName returns path.damaged-<UTC time>, with a number after it if that
// name is taken.
func asideName(path string, now time.Time) string {
	base := path + ".damaged-" + now.UTC().Format("20060102T150405Z")
	aside := base
	for n := 2; ; n++ {
		if _, err := os.Lstat(aside); errors.Is(err, os.ErrNotExist) {
			return aside
		}
		aside = fmt.Sprintf("%s-%d", base, n)
	}
}

// checkFile checks an existing file before bbolt maps it: its meta pages,
// then every page of its tree and freelist. Damage found is checked again
// holding the file's lock, since a devhook writing the file meanwhile is
// no damage; a writable Open then renames the file aside. The error says
// what was found, and what was done.
func (db *DB) checkFile(lockTimeout time.Duration) error {
	check := func() error {
		if err := checkBoltFile(db.path); err != nil {
			return err
		}
		return checkTree(db.path)
	}
	why := check()
	if why == nil {
		return nil
	}
	var aside string
	err := withLock(db.path, !db.readOnly, lockTimeout, func() error {
		if why = check(); why == nil || db.readOnly {
			return nil
		}
		aside = asideName(db.path, db.now())
		if err := os.Rename(db.path, aside); err != nil {
			return err
		}
		moveBodiesAside(db.path, aside)
		return nil
	})
	switch {
	case errors.Is(err, errLockHeld):
		return fmt.Errorf("storage: open %s: %w: another devhook may be using the data directory %s; stop it or choose another data directory", db.path, ErrLocked, filepath.Dir(db.path))
	case err != nil && !errors.Is(err, errors.ErrUnsupported):
		return fmt.Errorf("storage: open %s: %w", db.path, err)
	case why == nil:
		return nil
	}
	if aside != "" {
		db.logf("storage: %s is damaged (%v); it is kept as %s", db.path, why, aside)
	}
	return &damageError{path: db.path, why: why, aside: aside, readOnly: db.readOnly}
}

// moveBodiesAside moves the body files of the store at path, set aside
// as aside, beside it: they go with the records that say where each body
// is, and a new store starts without them.
func moveBodiesAside(path, aside string) {
	_ = os.Rename(path+bodiesDirSuffix, aside+bodiesDirSuffix)
}

// setStoreAside renames the damaged file of de aside while bbolt holds its
// lock, and returns the error that says so (de as it is when the rename
// fails).
func (db *DB) setStoreAside(de *damageError) error {
	aside := asideName(db.path, db.now())
	if err := os.Rename(db.path, aside); err != nil {
		return de
	}
	moveBodiesAside(db.path, aside)
	db.logf("storage: %s is damaged (%v); it is kept as %s", db.path, de.why, aside)
	de.aside = aside
	return de
}

var errLockHeld = errors.New("the file is locked")
