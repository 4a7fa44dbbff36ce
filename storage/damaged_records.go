package storage

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// Damaged records: a record's damage is that record's problem. Open checks
// the pages of the file (damage.go); the bytes of the records inside a
// leaf are checked by the read that decodes them (codec.go: every value's
// checksum, its key). A record that fails, or that a newer devhook wrote,
// is left out of every list (List, RunDeliveries, retention, which never
// removes one: it is evidence) and noted here; a read of its delivery
// (Delivery) fails saying what is damaged, naming the file and what to
// do, when it is the delivery's record; when it is its body or an
// attempt, the read gives the rest, that part marked with that error
// (Delivery.BodyError, Attempt.ReadError), and a *devhook.PartialError,
// and nothing is noted: no list skips that delivery. Damage returns what
// the reads of this DB noted, each record once, for a list to say how
// many it skipped and where. A writable Open (devhook
// listen's start) reads every list row and delivery record, not the
// bodies and attempts, whose size is the file's, says what it found
// through Config.Logf, and gives the pages it read back (mapped_linux.go).

// recordError is a stored record a read could not use: damaged (it wraps
// ErrDamaged) or a newer devhook's (ErrNewerRecord).
type recordError struct {
	bucket string
	key    []byte // copied out of the transaction
	sum    uint32 // the CRC-32C of the value as stored: see damageLog.note
	what   string // what it is to its delivery: "the record", "the list row", "attempt 2", "the body"
	err    error
}

// newRecordError is the error err of the value val stored at key in
// bucket (nil: it is missing).
func newRecordError(bucket string, key, val []byte, what string, err error) *recordError {
	return &recordError{bucket: bucket, key: append([]byte{}, key...), sum: crc32.Checksum(val, crcTable()), what: what, err: err}
}

func (e *recordError) Error() string {
	id := e.id()
	if id == "" {
		return fmt.Sprintf("%s of a delivery whose key is damaged %v", e.what, e.err)
	}
	return fmt.Sprintf("%s of delivery %s %v", e.what, id, e.err)
}

func (e *recordError) Unwrap() error { return e.err }

// id returns the id of the record's delivery, "" when its key is not one
// (damaged): an error never shows a key's raw bytes.
func (e *recordError) id() string {
	k := e.key
	switch {
	case e.bucket == bucketAttempts && len(k) > 5:
		k = k[:len(k)-5] // id 0x00 seq
	case e.bucket == bucketRuns:
		k = k[bytes.LastIndexByte(k, 0)+1:] // run id 0x00 id
	}
	return readableID(k)
}

// readableID returns k if it can be a delivery id shown as it is:
// printable ASCII without spaces, at most maxIDLen bytes; else "".
func readableID(k []byte) string {
	if len(k) == 0 || len(k) > maxIDLen {
		return ""
	}
	for _, c := range k {
		if c <= ' ' || c > '~' {
			return ""
		}
	}
	return string(k)
}

const (
	// maxDamageKeys bounds the records damageLog remembers: past it, new
	// ones are no longer counted (the file is a wreck by then).
	maxDamageKeys = 100_000
)

// damageLog is what the reads of a DB found damaged, each record once.
type damageLog struct {
	mu                      sync.Mutex
	seen                    map[string]struct{} // bucket 0x00 key
	damaged, newer, unnamed int
	ids                     []string
}

// note counts the record of e unless it was counted already: the record
// at the same key, or, when the key is damaged too, at the same key with
// the same value (damage can make two keys alike).
func (l *damageLog) note(e *recordError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := e.bucket + "\x00" + string(e.key)
	if e.id() == "" {
		k += "\x00" + strconv.FormatUint(uint64(e.sum), 16)
	}
	if _, ok := l.seen[k]; ok || len(l.seen) >= maxDamageKeys {
		return
	}
	if l.seen == nil {
		l.seen = map[string]struct{}{}
	}
	l.seen[k] = struct{}{}
	if errors.Is(e.err, ErrNewerRecord) {
		l.newer++
	} else {
		l.damaged++
	}
	id := e.id()
	if id == "" {
		l.unnamed++
		return
	}
	if len(l.ids) >= devhook.DamageIDs {
		return
	}
	for _, have := range l.ids {
		if have == id {
			return
		}
	}
	l.ids = append(l.ids, id)
}

// reset forgets what was found: the records are gone.
func (l *damageLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen, l.ids = nil, nil
	l.damaged, l.newer, l.unnamed = 0, 0, 0
}

// noteRecord notes err's record if err is a recordError, and reports
// whether it was one: a read that skips it goes on.
func (db *DB) noteRecord(err error) bool {
	var re *recordError
	if !errors.As(err, &re) {
		return false
	}
	db.damage.note(re)
	return true
}

// Damage returns the records the reads of this DB skipped since Open:
// damaged ones, and those a newer devhook wrote, with the file's path.
func (db *DB) Damage() devhook.Damage {
	l := &db.damage
	l.mu.Lock()
	defer l.mu.Unlock()
	return devhook.Damage{File: db.path, Damaged: l.damaged, Newer: l.newer, IDs: append([]string(nil), l.ids...), Unnamed: l.unnamed}
}

// recordReadError is the error of Delivery for the record error re: it
// names the file and says what to do.
func (db *DB) recordReadError(re *recordError) error {
	if errors.Is(re, ErrNewerRecord) {
		return fmt.Errorf("storage: %s: %w", db.path, re)
	}
	var inFile bodyFileDamage
	if errors.As(re, &inFile) {
		return db.bodyFileDamaged(re, inFile)
	}
	return db.damagedValue(re)
}

// bodyFileDamaged is the error of Delivery for a body its body file does
// not hold whole (re, inFile): the store's file is not at fault, and
// moving it away would not help. A missing file is most often a store
// copied without its directory of body files.
func (db *DB) bodyFileDamaged(re *recordError, inFile bodyFileDamage) error {
	if errors.Is(inFile, whyBodyFileMissing) {
		return fmt.Errorf("storage: %s: %w; the other deliveries read as before. %s keeps its large bodies in the directory %s beside it: a copy of the store needs that directory copied too (with devhook stopped)",
			db.path, re, filepath.Base(db.path), filepath.Base(db.bodies.dir))
	}
	return fmt.Errorf("storage: %s: %w; %s and the other deliveries read as before. To drop this delivery: devhook deliveries delete %s (copy the body file away first to keep it as evidence: the delete writes zeros over the body's bytes)",
		db.path, re, filepath.Base(db.path), re.id())
}

// scanRecords reads every list row and delivery record in bbolt, notes
// those that fail their checks, and says what it found through Logf.
func (db *DB) scanRecords() error {
	err := db.safely(func() error {
		return db.bolt.View(func(tx *bolt.Tx) error {
			c := tx.Bucket([]byte(bucketSummaries)).Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if _, err := checkSummary(k, v); err != nil {
					db.damage.note(newRecordError(bucketSummaries, k, v, "the list row", err))
				}
			}
			c = tx.Bucket([]byte(bucketDeliveries)).Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if err := checkMeta(k, v); err != nil {
					db.damage.note(newRecordError(bucketDeliveries, k, v, "the record", err))
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("storage: read the records of %s: %w", db.path, err)
	}
	// The pages read stay in the page cache, not in the process's RSS
	// (TestOpen_ReadsLittle).
	db.releaseMapped()
	if d := db.Damage(); d.Any() {
		them := "them"
		if d.Damaged+d.Newer == 1 {
			them = "it"
		}
		db.logf("storage: found %s; lists skip %s; %s", d.Summary(), them, d.Advice())
	}
	return nil
}

// checkMeta checks the delivery record b stored at key (nil: not checked
// against a key) as decodeMeta does, without allocating.
func checkMeta(key, b []byte) error {
	_, err := walkMeta(key, b, false)
	return err
}

// metaBodySum is the checksum of its body that the delivery record b
// stored at key holds, checked as checkMeta checks it, without
// allocating; none (nothing to check the body against) when b is nil.
func metaBodySum(key, b []byte) (bodySum, error) {
	if b == nil {
		return bodySum{}, nil
	}
	return walkMeta(key, b, true)
}

// walkMeta checks the delivery record b stored at key, and returns its
// checksum of its body when sum is set (it then reads the record to its
// end; else, its checksum vouching for its fields, it stops after the id).
func walkMeta(key, b []byte, sum bool) (bodySum, error) {
	p, checked, err := openValue(b, kindMeta, formatMeta)
	if err != nil {
		return bodySum{}, err
	}
	dec := decoder{b: p}
	id := dec.raw()
	if checked && !sum {
		// Its checksum vouches for the rest.
		switch {
		case dec.err != nil:
			return bodySum{}, whyDecode
		case key != nil && string(id) != string(key):
			return bodySum{}, whyKey
		}
		return bodySum{}, nil
	}
	dec.raw() // Channel
	dec.time()
	for range 3 { // Method, Path, RawQuery
		dec.raw()
	}
	dec.skipHeader()
	dec.raw()     // RemoteAddr
	dec.bool()    // Queued
	dec.raw()     // Verdict.Result
	dec.raw()     // Verdict.Reason
	dec.int()     // Verdict.Status
	dec.raw()     // Verdict.Text
	dec.int()     // Verdict.T
	for range 4 { // Event: Type, RunID, Status, StatusV2
		dec.raw()
	}
	if dec.bool() {
		dec.raw() // Body
	}
	var bs bodySum
	if checked {
		bs = bodySum{crc: dec.fixed32(), ok: true}
	}
	dec.end()
	switch {
	case dec.err != nil:
		return bodySum{}, whyDecode
	case key != nil && string(id) != string(key):
		return bodySum{}, whyKey
	}
	return bs, nil
}

// skipHeader checks a header as header reads it, without allocating.
func (d *decoder) skipHeader() {
	n := d.uint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return
	}
	for range n {
		d.raw()
		m := d.uint()
		if d.err != nil || m > uint64(len(d.b)) {
			d.fail()
			return
		}
		for range m {
			d.raw()
		}
	}
}
