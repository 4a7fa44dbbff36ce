package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Applying the journal to bbolt. A record that bbolt refuses by itself (it
// panics, or the delivery it belongs to is damaged in bbolt) is copied to
// <file>.rejected, reported and left out; the others are applied. Applying
// a record twice is harmless: a delivery already recorded is left alone
// and an attempt has its own key, its Seq, fixed when it was journaled. So
// a crash between a flush's commit and its emptying of the journal file
// only costs a replay.

// applied counts what a batch did.
type applied struct {
	created int // deliveries
	dropped int // attempts of deliveries that are not there
}

// apply writes recs to bbolt in one transaction. A record that fails by
// itself (an error or a panic while applying it) is copied to the
// rejected file, reported and left out, and the others are applied again.
// An error means that bbolt could not commit (or the rejected file could
// not be written): nothing was applied.
//
// known bounds the delivery ids in bbolt: a put of a greater id, unless the
// batch put it already, is not looked up. nil: every put is looked up.
func (db *DB) apply(recs []jrec, known []byte) (applied, error) {
	owned := false
	buf := db.bodies.takeBuf(recs)
	defer func() { db.bodies.giveBuf(buf) }()
	for {
		var res applied
		bad := -1
		var badErr error
		var a *applyTx
		err := db.safely(func() error {
			return db.bolt.Update(func(tx *bolt.Tx) error {
				if err := db.spaceLeft(); err != nil {
					return err
				}
				a = newApplyTx(tx, len(recs), known, db.bodies)
				a.bodyBuf = buf[:0]
				for i := range recs {
					if err := a.record(i, &recs[i]); err != nil {
						if !errors.As(err, new(errBodyFiles)) {
							bad, badErr = i, err // else no record's fault
						}
						return err
					}
				}
				if i, err := a.done(); err != nil {
					bad, badErr = i, err
					return err
				}
				res = a.res
				return nil
			})
		})
		if a != nil {
			buf = a.bodyBuf
			if err != nil && a.wroteBodies {
				db.bodies.unwrite(a.bodyFile, a.bodyOff, a.bodyOff+int64(len(a.bodyBuf)))
			}
		}
		if bad < 0 {
			return res, err
		}
		if err := db.reject(&recs[bad], badErr); err != nil {
			return applied{}, err
		}
		if !owned {
			// recs may be the journal's pending slice, which readers share.
			recs, owned = slices.Clone(recs), true
		}
		recs = slices.Delete(recs, bad, bad+1)
	}
}

// applyTx is one transaction that applies records: the buckets they write,
// looked up once, and the summaries they changed. A summary is written
// once, when the records are all applied: a delivery and its attempt in
// one batch, the usual case, cost one write of its summary and no read.
type applyTx struct {
	tx                                            *bolt.Tx
	deliveries, bodies, summaries, attempts, runs *bolt.Bucket
	// arena holds the keys and values made here: bbolt keeps them until
	// the commit, so they are never overwritten (a growing append leaves
	// the old array to them).
	arena []byte
	sums  map[string]int // delivery id → its summary in dirty
	dirty []dirtySummary
	rec   int // the index of the record being applied
	res   applied
	// The bodies that go to a body file (bodyfiles.go): bodyBuf, to be
	// written at bodyOff of file bodyFile when the records are applied.
	files       *bodyFiles
	bodyRefs    *bolt.Bucket
	bodyFile    uint32
	bodyOff     int64
	bodyBuf     []byte
	bodyCount   uint64 // bodies in bodyBuf
	wroteBodies bool
	// known: no delivery id in bbolt sorts after it (nil: unknown). A put
	// raises it to its id, so that a second put of one id in a batch is
	// looked up.
	known []byte
}

// dirtySummary is a summary to write when the records are applied.
type dirtySummary struct {
	id, v []byte
	rec   int // the record that changed it last
}

func newApplyTx(tx *bolt.Tx, recs int, known []byte, files *bodyFiles) *applyTx {
	a := &applyTx{tx: tx, known: known, files: files, bodyRefs: tx.Bucket([]byte(bucketBodyRefs)),
		deliveries: tx.Bucket([]byte(bucketDeliveries)), bodies: tx.Bucket([]byte(bucketBodies)),
		summaries: tx.Bucket([]byte(bucketSummaries)), attempts: tx.Bucket([]byte(bucketAttempts)), runs: tx.Bucket([]byte(bucketRuns)),
		arena: make([]byte, 0, (128+bodyRefLen)*recs), sums: make(map[string]int, recs/2), dirty: make([]dirtySummary, 0, recs/2)}
	for _, b := range []*bolt.Bucket{a.deliveries, a.bodies, a.summaries, a.attempts, a.bodyRefs} {
		b.FillPercent = appendFill
	}
	return a
}

// keep returns a copy of b in the arena.
func (a *applyTx) keep(b ...[]byte) []byte {
	start := len(a.arena)
	for _, p := range b {
		a.arena = append(a.arena, p...)
	}
	return a.arena[start:len(a.arena):len(a.arena)]
}

// summary returns the summary of delivery key (id), as this transaction
// changed it or as bbolt has it; nil if there is none.
func (a *applyTx) summary(key string, id []byte) []byte {
	if i, ok := a.sums[key]; ok {
		return a.dirty[i].v
	}
	return a.summaries.Get(id)
}

// setSummary makes v the summary of delivery key (id).
func (a *applyTx) setSummary(key string, id, v []byte) {
	if i, ok := a.sums[key]; ok {
		a.dirty[i].v, a.dirty[i].rec = v, a.rec
		return
	}
	a.sums[key] = len(a.dirty)
	a.dirty = append(a.dirty, dirtySummary{id: id, v: v, rec: a.rec})
}

// done writes the summaries, and the count of deliveries. An error is
// blamed on the record that changed the summary last (bad), or on none
// (bad < 0).
func (a *applyTx) done() (bad int, err error) {
	if err := a.writeBodies(); err != nil {
		return -1, err
	}
	for _, d := range a.dirty {
		if err := a.putSummary(d.id, d.v); err != nil {
			return d.rec, err
		}
	}
	if a.res.created == 0 {
		return -1, nil
	}
	return -1, putCount(a.tx, getCount(a.tx)+a.res.created)
}

func (a *applyTx) putSummary(id, v []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("bbolt panicked: %v", p)
		}
	}()
	if err := a.summaries.Put(id, v); err != nil {
		return fmt.Errorf("summary of delivery %s: %w", id, err)
	}
	return nil
}

// record writes r, the i-th record of the batch.
func (a *applyTx) record(i int, r *jrec) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("bbolt panicked: %v", p)
		}
	}()
	a.rec = i
	switch r.kind {
	case recPut:
		if err := a.put(r.key, &r.put); err != nil {
			return fmt.Errorf("delivery %s: %w", r.put.id, err)
		}
	case recAttempt:
		if err := a.attempt(r.key, r.id, &r.att, r.enc); err != nil {
			return fmt.Errorf("attempt %d of delivery %s: %w", r.att.seq, r.id, err)
		}
	}
	return nil
}

// put writes e, of delivery key, unless its id is already recorded.
func (a *applyTx) put(key string, e *encodedDelivery) error {
	// Ids grow with time: a new delivery sorts after every id in bbolt,
	// whose B+tree need not be searched for it. A redelivery, a replay,
	// or a delivery that arrived late, is looked up.
	if a.known == nil || bytes.Compare(e.id, a.known) <= 0 {
		if a.deliveries.Get(e.id) != nil {
			return nil
		}
	} else {
		a.known = e.id
	}
	if err := a.deliveries.Put(e.id, e.meta); err != nil {
		return err
	}
	if err := a.putBody(e.id, e.body); err != nil {
		return err
	}
	a.setSummary(key, e.id, e.summary)
	if e.runID != "" {
		start := len(a.arena)
		a.arena = append(append(append(a.arena, e.runID...), 0), e.id...)
		if err := a.runs.Put(a.arena[start:len(a.arena):len(a.arena)], nil); err != nil {
			return err
		}
	}
	a.res.created++
	return nil
}

// putBody stores body, of delivery id: in bbolt when it is small, else in
// the batch that goes to a body file.
func (a *applyTx) putBody(id, body []byte) error {
	if a.bodyRefs == nil || len(body) < a.files.min {
		return a.bodies.Put(id, body)
	}
	if a.bodyFile == 0 {
		file, off, err := a.files.place()
		if err != nil {
			return errBodyFiles{err}
		}
		a.bodyFile, a.bodyOff = file, off
	}
	ref := bodyRef{file: a.bodyFile, off: a.bodyOff + int64(len(a.bodyBuf)), n: uint32(len(body))}
	a.bodyBuf = append(a.bodyBuf, body...)
	a.bodyCount++
	start := len(a.arena)
	a.arena = appendBodyRef(a.arena, id, ref)
	return a.bodyRefs.Put(id, a.arena[start:len(a.arena):len(a.arena)])
}

// writeBodies writes the batch's bodies to their file and counts them
// there.
func (a *applyTx) writeBodies() error {
	if len(a.bodyBuf) == 0 {
		return nil
	}
	if err := a.files.write(a.bodyFile, a.bodyOff, a.bodyBuf); err != nil {
		return err
	}
	a.wroteBodies = true
	return addBodyCount(a.tx, a.bodyFile, int64(a.bodyCount), a.bodyOff+int64(len(a.bodyBuf)))
}

// errBodyFiles is a failure of the body files, which is no record's.
type errBodyFiles struct{ err error }

func (e errBodyFiles) Error() string { return e.err.Error() }
func (e errBodyFiles) Unwrap() error { return e.err }

// attempt stores attempt o (encoded as enc) of delivery key (id) and makes
// it the summary's last attempt unless a later one is there already. A
// delivery that is gone (pruned) takes no attempt: it is counted dropped.
func (a *applyTx) attempt(key string, id []byte, o *outcome, enc []byte) error {
	v := a.summary(key, id)
	if v == nil {
		a.res.dropped++
		return nil
	}
	start := len(a.arena)
	arena, changed, err := appendWithAttempt(a.arena, id, v, o)
	if err != nil {
		return err
	}
	a.arena = arena
	end := len(a.arena)
	var seq [4]byte
	binary.BigEndian.PutUint32(seq[:], uint32(o.seq))
	akey := a.keep(id, []byte{0}, seq[:])
	if err := a.attempts.Put(akey, enc); err != nil {
		return err
	}
	if changed {
		a.setSummary(key, id, a.arena[start:end:end])
	}
	return nil
}

// reject keeps r in the rejected file beside the database and reports it.
func (db *DB) reject(r *jrec, why error) error {
	path := db.path + ".rejected"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("keep a record the database refused (%w): %w", why, err)
	}
	defer f.Close()
	var b []byte
	if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
		b = appendFileHeader(nil)
	}
	if _, err := f.Write(append(b, r.raw...)); err != nil {
		return fmt.Errorf("keep a record the database refused (%w): %w", why, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("keep a record the database refused (%w): %w", why, err)
	}
	db.logf("storage: could not apply a journaled record to %s (%v); it is kept in %s and the other records were applied", db.path, why, path)
	return nil
}

func (db *DB) reportDropped(n int) {
	if n > 0 {
		db.logf("storage: %d attempt(s) in the journal of %s were not recorded: their delivery is not in the database (removed by retention, or its own record was lost)", n, db.path)
	}
}
