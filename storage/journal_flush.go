package storage

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Flushing the journal. Two files take turns: records are appended to the
// active one; a flush makes the other one active, applies every pending
// record (journal_apply.go), then starts the file it left on a new round
// (journal_file.go), all of its records being in bbolt: a header write,
// no system call. A flush that fails (the disk is full) leaves both files
// as they are, keeps its records pending and is retried, with a growing
// delay, until bbolt takes them; meanwhile records go on being appended to
// the active file, since the other one holds records bbolt lacks.

const (
	// A flush starts once this many records or bytes are pending, or
	// journalDelay after the first pending record.
	journalRecords = 1024
	journalBytes   = 2 << 20
	journalDelay   = 100 * time.Millisecond
	// A flush that failed is retried after journalDelay, then after twice
	// as long each time, up to maxRetryDelay.
	maxRetryDelay = 2 * time.Second
	// A write that finds this many bytes pending (bbolt is slow) applies
	// them itself before it returns, so memory stays bounded; when bbolt
	// fails, writes are refused instead.
	journalMaxBytes = 16 << 20
	// bbolt's mapped pages are given back (releaseMapped) once this many
	// bytes of records were applied since the last time, or at the first
	// flush after releaseEvery: not after every flush, since each page
	// given back that the next transaction reads is a page fault.
	releaseBytes = 8 << 20
	releaseEvery = 10 * time.Second
)

// runJournal flushes the journal in the background until Close.
func (db *DB) runJournal() {
	j := db.journal
	defer close(j.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var backoff time.Duration
	var notBefore time.Time
	for {
		select {
		case <-j.stop:
			timer.Stop()
			return
		case <-j.kick:
		case <-timer.C:
		}
		j.mu.Lock()
		n, size, first := len(j.pending), j.bytes, j.first
		j.mu.Unlock()
		if n == 0 {
			continue
		}
		due := first.Add(journalDelay)
		if n >= journalRecords || size >= journalBytes {
			due = time.Now()
		}
		if notBefore.After(due) {
			due = notBefore
		}
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			continue
		}
		if err := db.flush(); err != nil {
			// The records stay pending and journaled; reads still see
			// them. Try again later, and again, until bbolt takes them.
			backoff = min(max(2*backoff, journalDelay), maxRetryDelay)
			notBefore = time.Now().Add(backoff)
			timer.Reset(backoff)
			continue
		}
		backoff, notBefore = 0, time.Time{}
		j.mu.Lock()
		again := len(j.pending) > 0
		j.mu.Unlock()
		if again {
			j.poke()
		}
	}
}

func (j *journal) poke() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// setOverMax updates overMax after j.bytes or j.failed changed. j.mu is
// held.
func (j *journal) setOverMax() {
	j.overMax.Store(j.bytes > journalMaxBytes && j.failed == nil)
}

// flush applies the pending records to bbolt and empties the journal file
// that held them.
func (db *DB) flush() error {
	if db.readOnly {
		return errReadOnly
	}
	j := db.journal
	j.flushMu.Lock()
	defer j.flushMu.Unlock()
	return db.flushLocked()
}

// flushLocked is flush with j.flushMu held: Delete holds it from its
// flush to its commit, so that no flush runs between them.
func (db *DB) flushLocked() error {
	j := db.journal
	j.mu.Lock()
	if len(j.pending) == 0 {
		j.mu.Unlock()
		return nil
	}
	// The other file becomes active if it holds nothing bbolt lacks: it
	// was started on a new round when its records were applied. (When a
	// flush failed, it holds the records still pending: the active file
	// stays.)
	if o := j.files[1-j.active]; o == nil || o.off == o.hdr {
		j.active = 1 - j.active
	}
	batch := j.pending
	size := j.bytes
	lastSeq := batch[len(batch)-1].seq
	known := j.lastBolt // replaced, never changed in place
	j.mu.Unlock()

	res, err := db.apply(batch, known)

	j.mu.Lock()
	if err != nil {
		first := j.failed == nil
		j.failed = fmt.Errorf("storage: apply journal to %s: %w", db.path, err)
		j.setOverMax()
		j.mu.Unlock()
		switch {
		case first && errors.Is(err, ErrDamaged):
			db.logf("storage: cannot write to %s (%v); deliveries stay in its journal: stop devhook listen and start it again, which sets the file aside as evidence and applies the journal to a new one", db.path, err)
		case first:
			db.logf("storage: cannot write to %s (%v); deliveries stay in its journal and are applied once it takes writes again", db.path, err)
		}
		return fmt.Errorf("storage: apply journal to %s: %w", db.path, err)
	}
	recovered := j.failed != nil
	j.failed = nil
	// Readers may hold the old array: the records that came meanwhile go
	// to a new one, sized for a batch like this one rather than grown
	// from nothing by copying.
	rest := j.pending[len(batch):]
	j.pending = append(make([]jrec, 0, max(len(rest), min(len(batch), journalRecords))), rest...)
	j.bytes = 0
	for _, r := range j.pending {
		j.bytes += len(r.raw)
	}
	j.setOverMax()
	if len(j.pending) > 0 {
		j.first = time.Now()
	}
	j.applied = lastSeq
	for id, st := range j.ids {
		if st.lastSeq <= lastSeq {
			delete(j.ids, id)
		}
	}
	if last := maxPutID(batch); bytes.Compare(last, j.lastBolt) > 0 {
		j.lastBolt = bytes.Clone(last)
	}
	terr := j.recycle()
	j.mu.Unlock()
	if recovered {
		db.logf("storage: %s takes writes again; the journal is applied", db.path)
	}
	db.reportDropped(res.dropped)
	if terr != nil {
		return fmt.Errorf("storage: empty journal of %s: %w", db.path, terr)
	}
	j.sinceRelease += size
	if now := db.now(); j.sinceRelease >= releaseBytes || now.Sub(j.releasedAt) >= releaseEvery {
		db.releaseMapped()
		j.releasedAt, j.sinceRelease = now, 0
	}

	if res.created > 0 {
		after := db.puts.Add(int64(res.created))
		if after/db.pruneEvery != (after-int64(res.created))/db.pruneEvery {
			if _, err := db.prune(); err != nil {
				return err
			}
		}
	}
	return nil
}

// recycle starts each file all of whose records bbolt has on a new round,
// numbered after every record written so far, or removes it when a
// previous process left it. j.mu is held.
func (j *journal) recycle() error {
	var err error
	for i, f := range j.files {
		if f == nil || f.off == f.hdr || f.last > j.applied {
			continue
		}
		if f.inherited {
			rerr := f.close()
			if rerr == nil {
				if rerr = os.Remove(f.path); errors.Is(rerr, os.ErrNotExist) {
					rerr = nil
				}
			}
			if rerr == nil {
				j.files[i] = nil
			}
			err = cmp.Or(err, rerr)
			continue
		}
		err = cmp.Or(err, f.reuse(j.seq+1))
	}
	return err
}

// maxPutID returns the greatest delivery id that recs put, nil if none.
func maxPutID(recs []jrec) []byte {
	var last []byte
	for i := range recs {
		if r := &recs[i]; r.kind == recPut && bytes.Compare(r.put.id, last) > 0 {
			last = r.put.id
		}
	}
	return last
}

// lastDelivery returns the greatest delivery id in bbolt, for
// journal.lastBolt.
func (db *DB) lastDelivery() ([]byte, error) {
	var last []byte
	err := db.safely(func() error {
		return db.bolt.View(func(tx *bolt.Tx) error {
			k, _ := tx.Bucket([]byte(bucketDeliveries)).Cursor().Last()
			last = bytes.Clone(k)
			return nil
		})
	})
	return last, err
}
