// Package storage keeps the agent's state in a bbolt file: DB, the
// deliveries, their attempts, an index by run id and the retry states of
// owed deliveries (journaled, not fsynced: a killed process loses
// nothing). The single relay's store, package boltrelay, opens its file
// and encodes its queue with what shared.go exports.
//
// Layout of DB's file (every key below is a top-level bucket):
//
//	meta        "version" → schema version; "count" → number of deliveries (uint64, big endian)
//	deliveries  id → the delivery without body and attempts (binary, see codec.go)
//	bodies      id → the body, raw bytes
//	summaries   id → the list row; rewritten when an attempt is added
//	attempts    id 0x00 seq(uint32, big endian) → attempt, its body raw
//	runs        run id 0x00 id → empty
//	owed        id → retry state as JSON (owed.go; created by its first write)
//
// PutDelivery and AddAttempt append to a journal beside the file
// (<file>.journal0 and .journal1) and return; a goroutine applies the
// journal to bbolt in batches, and reads see bbolt plus what is pending
// (see journal.go and pending.go). Reads never write.
//
// Damage is reported, never hidden, and evidence never deleted. Open
// refuses a file bbolt cannot safely map (empty, cut short, not bbolt)
// with a message that says to move it away, and leaves it untouched
// (boltcheck.go). A damaged journal has its intact records applied and is
// renamed to <journal>.damaged-<UTC time>; a record bbolt refuses is kept
// in <file>.rejected. Each is reported through Config.Logf. A damaged
// record inside a page is that record's problem: lists skip it and count
// it, the read of its delivery fails saying so (damaged_records.go).
//
// Delivery ids are UUIDv7 strings, so the byte order of keys is the order
// of arrival: lists walk the summaries bucket backwards and never touch the
// bodies unless they search them.
package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Defaults for retention.
const (
	DefaultMaxDeliveries = 100_000
	DefaultMaxAge        = 30 * 24 * time.Hour
)

// Config configures a DB. Zero values mean defaults.
type Config struct {
	MaxDeliveries int              // keep at most this many deliveries; 0 = DefaultMaxDeliveries, <0 = no limit
	MaxAge        time.Duration    // drop deliveries older than this; 0 = DefaultMaxAge, <0 = no limit
	Now           func() time.Time // nil = time.Now

	// Logf hears what the store found wrong and did about it: a damaged
	// journal set aside, a record the database refused, a disk that
	// stopped taking writes and took them again. nil = log.Printf.
	Logf func(format string, args ...any)

	// LockTimeout is how long Open waits for another process to release
	// the file; 0 = one second.
	LockTimeout time.Duration

	// ReadOnly opens an existing file to read it, for the commands that
	// only show what was recorded: nothing is written to it or beside it
	// (no retention, no journal applied, removed or set aside), and
	// writes fail. Records a stopped devhook left in the journal are read
	// and shown, not applied, and Logf says so. It shares the file with
	// other readers, not with a devhook listen (ErrLocked).
	ReadOnly bool

	// NoSpace, when set, is asked before each write to the file, its
	// journal or its probe (CheckWrite): an error from it fails that
	// write as a full disk would, with what it returns (ENOSPC, say).
	// Tests fill the disk with it without mounting one. nil: the disk
	// alone decides.
	NoSpace func() error

	pageSize int // bbolt's page size for a new file; 0 = the OS's (tests make small fixtures, and larger pages)
	// bodyFileMin: bodies this large or larger go to body files; 0 =
	// bodyFileMin, -1 = none (tests of bbolt's own file).
	bodyFileMin int
}

const (
	// schemaVersion 2: bodies may be in body files (bodyfiles.go), which
	// a devhook that reads 1 would not find.
	schemaVersion = 2

	// pruneInterval is how many recorded deliveries pass between two
	// retention checks, at most.
	pruneInterval = 1000
	// pruneChunk is how many deliveries one pruning transaction removes.
	pruneChunk = 5000
	// maxIDLen bounds delivery and channel ids (UUIDs are 36 bytes).
	maxIDLen = 200
	// initialMmap is how much of the bbolt file is mapped at first.
	initialMmap = 64 << 20
)

// The names of the buckets and keys, converted to []byte where they are
// used (the compiler does that without allocating).
const (
	bucketMeta       = "meta"
	bucketDeliveries = "deliveries"
	bucketBodies     = "bodies"
	bucketSummaries  = "summaries"
	bucketAttempts   = "attempts"
	bucketRuns       = "runs"

	keyVersion = "version"
	keyCount   = "count"
)

// allBuckets are the buckets of the schema.
func allBuckets() [][]byte {
	return append(firstBuckets(), []byte(bucketBodyRefs), []byte(bucketBodyFiles))
}

// firstBuckets are the buckets of schema 1: a read-only Open reads a store
// that has them, and takes the others for empty.
func firstBuckets() [][]byte {
	return [][]byte{[]byte(bucketMeta), []byte(bucketDeliveries), []byte(bucketBodies), []byte(bucketSummaries),
		[]byte(bucketAttempts), []byte(bucketRuns)}
}

// DB is a devhook bbolt file. Its methods are safe for concurrent use.
type DB struct {
	bolt *bolt.DB
	path string

	now           func() time.Time
	logf          func(format string, args ...any)
	maxDeliveries int           // <= 0: no limit
	maxAge        time.Duration // <= 0: no limit
	pruneEvery    int64

	journal *journal   // see journal.go
	bodies  *bodyFiles // see bodyfiles.go
	// bodyReads is held (read) by every view: a body file is removed,
	// and a deleted body zeroed, only while no view is under way, whose
	// snapshot of bbolt may still refer to them.
	bodyReads sync.RWMutex
	// tidyOwed: tidyBodyFiles is to be done once no read is under way.
	tidyOwed atomic.Bool
	group    group        // see group.go
	puts     atomic.Int64 // deliveries created since Open, to schedule pruning
	pruneMu  sync.Mutex

	readOnly bool
	noSpace  func() error // see Config.NoSpace

	damage damageLog // records the reads skipped: damaged_records.go
}

// Open opens or creates the file at path, with its directory.
func Open(path string, cfg Config) (*DB, error) {
	if path == "" {
		return nil, devhook.Errorf(devhook.EINVALID, "storage: no file path given")
	}
	if cfg.LockTimeout < 0 {
		return nil, devhook.Errorf(devhook.EINVALID, "storage: negative LockTimeout")
	}
	db := &DB{
		path:          path,
		now:           cfg.Now,
		logf:          cfg.Logf,
		maxDeliveries: cfg.MaxDeliveries,
		maxAge:        cfg.MaxAge,
		pruneEvery:    pruneInterval,
	}
	if db.now == nil {
		db.now = time.Now
	}
	if db.logf == nil {
		db.logf = log.Printf
	}
	if db.maxDeliveries == 0 {
		db.maxDeliveries = DefaultMaxDeliveries
	}
	if db.maxAge == 0 {
		db.maxAge = DefaultMaxAge
	}
	if db.maxDeliveries > 0 {
		// A small store is checked more often, so that it never holds
		// more than about a tenth over its limit.
		db.pruneEvery = int64(min(pruneInterval, max(1, db.maxDeliveries/10)))
	}
	lockTimeout := cfg.LockTimeout
	if lockTimeout == 0 {
		lockTimeout = time.Second
	}

	if cfg.ReadOnly {
		// bbolt would create a missing file, and a read-only open must not.
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("storage: open %s: %w", path, err)
		}
	}
	db.readOnly = cfg.ReadOnly
	db.noSpace = cfg.NoSpace
	db.journal = newJournal(path, db.noSpace)

	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	if created {
		if err := db.spaceLeft(); err != nil {
			return nil, fmt.Errorf("storage: create %s: %w; free some space and start again", path, err)
		}
	}
	// Every page is read before bbolt reads one: it trusts them all
	// (damage.go).
	if err := db.checkFile(lockTimeout); err != nil {
		return nil, err
	}
	b, err := openFile(path, &bolt.Options{
		Timeout: lockTimeout,
		// Commits are not fsynced: what they hold is in the journal
		// first, which is not fsynced either. A killed process loses
		// nothing; a power loss may lose the last writes. Close syncs.
		// Growing the file is not fsynced either, for the same reason:
		// that sync cost a quarter of the CPU of recording a delivery
		// while the file grows, which it does for as long as deliveries
		// arrive and retention has not caught up.
		NoSync:       true,
		NoGrowSync:   true,
		FreelistType: bolt.FreelistMapType,
		ReadOnly:     cfg.ReadOnly,
		// The OS's page size, unless a test asks for another. Larger
		// pages were measured: bbolt writes each page a commit changed
		// with a pwrite of its own, 0.77 a recorded delivery with 4 KiB
		// pages and 0.05 with 64 KiB, 2-3 µs less CPU a delivery. But a
		// commit copies each page it changes, so a page of 16 or 64 KiB
		// needs that much free room where 4 KiB did: on a nearly full
		// disk the store stopped taking writes again after room came
		// back (cmd/devhook TestListen_FullDisk, a 4 MiB tmpfs, under
		// scripts/stress). A file keeps the page size it was made with.
		PageSize: cfg.pageSize,
		// Address space, not memory: a page is in RSS once read. bbolt
		// maps the file again each time it outgrows its mapping, and a
		// commit that does copies every key and value of the nodes it
		// changed (38% of a journal flush's allocations while the file
		// grows from nothing, BenchmarkRecordDelivery): below this size
		// it never does.
		InitialMmapSize: initialMmap,
	})
	if de := (*damageError)(nil); errors.As(err, &de) {
		de.readOnly = cfg.ReadOnly
		return nil, de
	}
	if err != nil {
		if created && spaceError(err) {
			// What bbolt began to write is no store: a later Open would
			// take it for damage.
			_ = os.Remove(path)
			return nil, fmt.Errorf("%w; free some space and start again", err)
		}
		return nil, err
	}
	db.bolt = b
	if err := db.safely(db.init); err != nil {
		if de := (*damageError)(nil); errors.As(err, &de) && !cfg.ReadOnly {
			err = db.setStoreAside(de)
		}
		_ = b.Close()
		return nil, err
	}
	var recorded map[uint32]bodyFileState
	if err := db.safely(func() error {
		return b.View(func(tx *bolt.Tx) error { recorded = bodyFileStates(tx); return nil })
	}); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	if db.bodies, err = openBodyFiles(path, cfg.ReadOnly, recorded, db.logf); err != nil {
		_ = b.Close()
		return nil, err
	}
	opened := false
	defer func() {
		if !opened {
			_ = db.bodies.close() // the file being filled, opened above
		}
	}()
	switch {
	case cfg.bodyFileMin > 0:
		db.bodies.min = cfg.bodyFileMin
	case cfg.bodyFileMin < 0:
		db.bodies.min = math.MaxInt
	}
	if cfg.ReadOnly {
		if err := db.readJournal(); err != nil {
			_ = b.Close()
			return nil, err
		}
		close(db.journal.done)
		opened = true
		return db, nil
	}
	if err := db.replayJournal(); err != nil {
		_ = b.Close()
		return nil, err
	}
	if db.journal.lastBolt, err = db.lastDelivery(); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	if _, err := db.prune(); err != nil {
		if !spaceError(err) {
			_ = b.Close()
			return nil, fmt.Errorf("storage: open %s: %w", path, err)
		}
		db.logf("storage: retention could not run on %s (%v); it runs again later", path, err)
	}
	if err := db.scanRecords(); err != nil {
		_ = b.Close()
		return nil, err
	}
	db.tidyBodyFiles()
	go db.runJournal()
	opened = true
	return db, nil
}

var errPanic = errors.New("bbolt panicked reading the file")

// ErrLocked is wrapped by Open's error when another process holds the
// file: a running devhook listen, typically.
var ErrLocked = errors.New("the file is locked by another process")

// openFile opens the bbolt file at path for either store, creating its
// directory: a file bbolt cannot safely map (empty, cut short, damaged) is
// refused before it is, with the message that says to move it away; one
// that another process holds wraps ErrLocked.
func openFile(path string, opts *bolt.Options) (*bolt.DB, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("storage: create data directory %s: %w", dir, err)
	}
	if err := checkBoltFile(path); err != nil {
		return nil, corruptError(path, err)
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	b, err := openBolt(path, opts)
	if err != nil && created && !errors.Is(err, berrors.ErrTimeout) {
		// bbolt creates the file before it writes its first pages: one it
		// could not write (a full disk) is left empty, which the next
		// Open would refuse as damage. Remove what this call created (not
		// when another process holds the lock: the file is its own).
		removeIfEmpty(path)
	}
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("storage: open %s: %w: another devhook may be using the data directory %s; stop it or choose another data directory: %w", path, ErrLocked, dir, err)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum), errors.Is(err, errPanic):
		return nil, corruptError(path, err)
	case err != nil:
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	return b, nil
}

// removeIfEmpty removes the file at path if it holds no byte.
func removeIfEmpty(path string) {
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		_ = os.Remove(path)
	}
}

// openBolt opens the file, turning a panic on a damaged file into an error.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%w: %v", errPanic, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return bolt.Open(path, 0o600, opts)
}

// errForeign marks a bbolt file that devhook did not write.
var errForeign = errors.New("a bbolt file without devhook's schema")

// init creates the buckets of a new file and checks the schema of an
// existing one. It writes only when something is missing: an existing
// store opens on a full disk, and a read-only one is never written.
func (db *DB) init() error {
	complete := false
	err := db.bolt.View(func(tx *bolt.Tx) error {
		var err error
		complete, err = checkSchema(tx, db.path)
		return err
	})
	switch {
	case err == nil && complete:
		return nil
	case err == nil && db.readOnly && db.hasFirstBuckets():
		return nil // schema 1: no body files
	case err == nil && db.readOnly:
		return fmt.Errorf("storage: open %s: it holds no deliveries yet: devhook listen records there", db.path)
	case err == nil:
		err = db.bolt.Update(func(tx *bolt.Tx) error {
			if err := db.spaceLeft(); err != nil {
				return err
			}
			if _, err := checkSchema(tx, db.path); err != nil {
				return err
			}
			for _, name := range allBuckets() {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			return tx.Bucket([]byte(bucketMeta)).Put([]byte(keyVersion), binary.BigEndian.AppendUint64(nil, schemaVersion))
		})
	}
	switch {
	case errors.Is(err, errForeign):
		return &damageError{path: db.path, why: err, readOnly: db.readOnly}
	case devhook.ErrorCode(err) == devhook.EINVALID:
		return err
	case err != nil:
		return fmt.Errorf("storage: open %s: create buckets: %w", db.path, err)
	}
	return nil
}

// hasFirstBuckets says whether the store has the buckets of schema 1.
func (db *DB) hasFirstBuckets() bool {
	ok := true
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		for _, name := range firstBuckets() {
			ok = ok && tx.Bucket(name) != nil
		}
		return nil
	})
	return ok
}

// checkSchema checks that tx's file is a devhook store that this devhook
// reads (or an empty bbolt file), and says whether it has every bucket.
func checkSchema(tx *bolt.Tx, path string) (complete bool, err error) {
	m := tx.Bucket([]byte(bucketMeta))
	if m == nil {
		empty := true
		_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
		if !empty {
			return false, errForeign
		}
		return false, nil
	}
	v := m.Get([]byte(keyVersion))
	if len(v) != 8 {
		return false, errForeign
	}
	if n := binary.BigEndian.Uint64(v); n > schemaVersion {
		return false, devhook.Errorf(devhook.EINVALID, "storage: %s was written by a newer devhook (schema %d, this one reads %d): upgrade devhook", path, n, schemaVersion)
	}
	for _, name := range allBuckets() {
		if tx.Bucket(name) == nil {
			return false, nil
		}
	}
	return true, nil
}

// errReadOnly is what a write to a store opened with Config.ReadOnly gets.
var errReadOnly = errors.New("the store is open read-only: devhook listen records deliveries")

// spaceLeft asks Config.NoSpace, when set, whether a write may go ahead.
func (db *DB) spaceLeft() error {
	if db.noSpace == nil {
		return nil
	}
	return db.noSpace()
}

// spaceError says whether err is the disk refusing a write (full, over a
// quota, or over the size bbolt was given), rather than damage.
func spaceError(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.Is(err, syscall.EFBIG) || errors.Is(err, berrors.ErrMaxSizeReached)
}

// CheckWrite says whether the store can take a write now: it writes and
// removes a small file beside the store (and asks Config.NoSpace), and
// returns the error of a flush that is failing. The agent asks it before
// it connects, so that it takes no delivery it could not record.
func (db *DB) CheckWrite() error {
	if db.readOnly {
		return errReadOnly
	}
	db.journal.mu.Lock()
	failed := db.journal.failed
	db.journal.mu.Unlock()
	if failed != nil {
		return failed
	}
	if err := db.spaceLeft(); err != nil {
		return fmt.Errorf("storage: write to %s: %w", filepath.Dir(db.path), err)
	}
	probe := db.path + ".probe"
	err := os.WriteFile(probe, make([]byte, probeBytes), 0o600)
	_ = os.Remove(probe)
	if err != nil {
		return fmt.Errorf("storage: write to %s: %w", filepath.Dir(db.path), err)
	}
	return nil
}

// probeBytes is what CheckWrite writes: about a delivery and its attempt.
const probeBytes = 16 << 10

// Close applies the journal and closes the file. Calls in flight finish
// first.
func (db *DB) Close() error {
	if db.readOnly {
		if err := db.bolt.Close(); err != nil {
			return fmt.Errorf("storage: close %s: %w", db.path, err)
		}
		return nil
	}
	jerr := db.closeJournal()
	if err := db.bodies.close(); err != nil && jerr == nil {
		jerr = err
	}
	if err := db.bolt.Close(); err != nil {
		return fmt.Errorf("storage: close %s: %w", db.path, err)
	}
	if jerr != nil {
		return fmt.Errorf("storage: close %s: %w", db.path, jerr)
	}
	return nil
}

// Path returns the file's path.
func (db *DB) Path() string { return db.path }

func getCount(tx *bolt.Tx) int {
	v := tx.Bucket([]byte(bucketMeta)).Get([]byte(keyCount))
	if len(v) != 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(v))
}

func putCount(tx *bolt.Tx, n int) error {
	return tx.Bucket([]byte(bucketMeta)).Put([]byte(keyCount), binary.BigEndian.AppendUint64(nil, uint64(max(n, 0))))
}

// Count returns the number of deliveries kept.
func (db *DB) Count() (n int, err error) {
	err = db.view(func(v *view) error {
		n = getCount(v.tx) + len(v.newPuts("", ""))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("storage: count deliveries: %w", err)
	}
	return n, nil
}

// Prune applies retention: it removes the oldest deliveries beyond
// MaxDeliveries, and those received more than MaxAge ago, with their
// bodies, attempts and run index entries. Deliveries are examined oldest
// first and the age check stops at the first one young enough: ids and
// ReceivedAt come from the same clock.
//
// It runs every 1,000 new deliveries (more often for a small
// MaxDeliveries), and when Open is called. Prune applies the journal
// first, so it is a write and fails when the disk is full.
func (db *DB) Prune() (removed int, err error) {
	if db.readOnly {
		return 0, fmt.Errorf("storage: prune deliveries: %w", errReadOnly)
	}
	if err := db.settle(); err != nil {
		return 0, err
	}
	return db.prune()
}

// settle applies every pending record now, so that bbolt holds all
// writes made so far. It writes: reads use view instead.
func (db *DB) settle() error { return db.flush() }

// prune is Prune without applying the journal first.
func (db *DB) prune() (removed int, err error) {
	db.pruneMu.Lock()
	defer db.pruneMu.Unlock()
	for {
		n, more, err := db.pruneChunk()
		removed += n
		if err != nil {
			return removed, fmt.Errorf("storage: prune deliveries: %w", err)
		}
		if !more {
			return removed, nil
		}
	}
}

func (db *DB) pruneChunk() (removed int, more bool, err error) {
	var cutoff time.Time
	if db.maxAge > 0 {
		cutoff = db.now().Add(-db.maxAge)
	}
	err = db.safely(func() error {
		return db.bolt.Update(func(tx *bolt.Tx) error {
			if err := db.spaceLeft(); err != nil {
				return err
			}
			count := getCount(tx)
			type victim struct {
				id    []byte
				runID string
			}
			var victims []victim
			c := tx.Bucket([]byte(bucketSummaries)).Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if len(victims) == pruneChunk {
					more = true
					break
				}
				p, err := checkSummary(k, v)
				var s devhook.Summary
				if err == nil {
					s, err = decodeSummary(p)
				}
				if err != nil {
					// Its age is unknown, and it is evidence: kept.
					db.damage.note(newRecordError(bucketSummaries, k, v, "the list row", err))
					continue
				}
				over := db.maxDeliveries > 0 && count-len(victims) > db.maxDeliveries
				old := db.maxAge > 0 && !s.ReceivedAt.IsZero() && s.ReceivedAt.Before(cutoff)
				if !over && !old {
					break
				}
				victims = append(victims, victim{append([]byte{}, k...), s.Event.RunID})
			}
			if len(victims) == 0 {
				return nil
			}
			for _, v := range victims {
				if err := deleteDelivery(tx, v.id, v.runID, nil); err != nil {
					return err
				}
			}
			removed = len(victims)
			return putCount(tx, count-len(victims))
		})
	})
	if err != nil {
		return 0, false, err
	}
	if removed > 0 {
		db.tidyBodyFiles()
	}
	return removed, more, nil
}

// deleteDelivery deletes delivery id, of run runID, and what is kept of
// it; where its body was in a body file is added to zero, unless nil.
func deleteDelivery(tx *bolt.Tx, id []byte, runID string, zero *[]bodyRef) error {
	for _, name := range [][]byte{[]byte(bucketDeliveries), []byte(bucketBodies), []byte(bucketSummaries)} {
		if err := tx.Bucket(name).Delete(id); err != nil {
			return err
		}
	}
	if err := dropBodyRef(tx, id, zero); err != nil {
		return err
	}
	checks := tx.Bucket([]byte(bucketChecks))
	if checks != nil {
		if err := checks.Delete(id); err != nil {
			return err
		}
	}
	ab := tx.Bucket([]byte(bucketAttempts))
	c := ab.Cursor()
	prefix := attemptPrefix(id)
	var keys [][]byte
	for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, append([]byte{}, k...))
	}
	for _, k := range keys {
		if err := ab.Delete(k); err != nil {
			return err
		}
		if checks != nil {
			if err := checks.Delete(k); err != nil {
				return err
			}
		}
	}
	if runID != "" {
		if err := tx.Bucket([]byte(bucketRuns)).Delete(runKey(runID, id)); err != nil {
			return err
		}
	}
	return nil
}
