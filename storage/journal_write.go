package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// Writing to the journal. Concurrent writes share a write(2), as
// group.go's writes share a bbolt commit: a write that finds the file idle
// writes its record at once; one that finds a write under way queues its
// record and waits, and the next write takes every record queued meanwhile
// (up to maxWriteBytes) in one pwrite. A call returns only once the write
// holding its record returned. A record is numbered (its seq, its
// attempt's Seq) when it is queued, and becomes pending, visible to reads,
// only once written. A write that fails fails every call whose record it
// held, and nothing else: the file is cut back to where the write started,
// the records' deliveries get back the state they had, and the seqs taken
// stay unused, a gap that replay, which only sorts by seq, does not mind.
// While a record of a delivery is being written, the next record of that
// delivery waits for it, so that a failed write never leaves a later
// attempt numbered after a lost one, nor answers "recorded already" for a
// delivery whose record was then lost.

const (
	// maxWriteBytes bounds the records that one write(2) takes together,
	// and so the buffer it copies them into. A longer record is written
	// alone, from its own buffer.
	maxWriteBytes = 128 << 10
)

// jstate is what the journal knows of a delivery whose records are
// pending or being written.
type jstate struct {
	attempts int    // its attempts, journaled ones included
	lastSeq  uint64 // of its newest record
	writing  bool   // a record of it is being written: its next one waits
}

// jwrite is a record on its way to the file.
type jwrite struct {
	rec  jrec
	prev jstate     // its delivery's state before it, restored if the write fails
	had  bool       // whether there was one
	done chan error // where the write's outcome is sent; nil for the writer's own
}

// journalPut journals d; created is false when the delivery is recorded
// already.
func (db *DB) journalPut(d *devhook.Delivery) (created bool, err error) {
	j := db.journal
	rec := j.putRecord(d)
	j.mu.Lock()
	if _, ok := j.waitWritten(d.ID); ok {
		j.mu.Unlock()
		return false, nil
	}
	// Ids grow with time: a new delivery's sorts after every id in
	// bbolt, which need not be asked. A redelivery, or a delivery that
	// arrived late, is looked up.
	if bytes.Compare(rec.put.id, j.lastBolt) <= 0 {
		var exists bool
		err = db.safely(func() error {
			return db.bolt.View(func(tx *bolt.Tx) error {
				exists = tx.Bucket([]byte(bucketDeliveries)).Get(rec.put.id) != nil
				return nil
			})
		})
		if err != nil || exists {
			j.mu.Unlock()
			return false, err
		}
	}
	if err := db.write(jwrite{rec: rec}, jstate{}); err != nil {
		return false, err
	}
	db.afterAppend()
	return true, nil
}

// journalAttempt journals a as the next attempt of delivery id.
func (db *DB) journalAttempt(id string, a devhook.Attempt) (devhook.Attempt, error) {
	// Everything but the Seq, numbered under the lock, is encoded first.
	sp := db.journal.scratch.get()
	tail := appendAttemptTail((*sp)[:0], &a)
	defer db.journal.scratch.put(sp, tail)
	b := make([]byte, recHeaderLen+8, recHeaderLen+9+binary.MaxVarintLen64+len(id)+binary.MaxVarintLen64+1+binary.MaxVarintLen64+len(tail)+crcLen)
	b = append(b, recAttempt)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	idEnd := len(b)

	j := db.journal
	j.mu.Lock()
	st, had := j.waitWritten(id)
	prev := st
	if !had {
		var s summaryFields
		err := db.safely(func() error {
			return db.bolt.View(func(tx *bolt.Tx) error {
				key := b[idEnd-len(id) : idEnd]
				v := tx.Bucket([]byte(bucketSummaries)).Get(key)
				if v == nil {
					return notFound(id)
				}
				var err error
				if _, s, err = summaryPayload(key, v); err != nil {
					return newRecordError(bucketSummaries, key, v, "the list row", err)
				}
				return nil
			})
		})
		if err != nil {
			j.mu.Unlock()
			return devhook.Attempt{}, err
		}
		st = jstate{attempts: s.attempts}
	}
	a.Seq = st.attempts + 1
	var seq [binary.MaxVarintLen64]byte
	seqLen := binary.PutVarint(seq[:], int64(a.Seq))
	b = binary.AppendUvarint(b, uint64(1+seqLen+len(tail)+crcLen))
	encAt := len(b)
	b = append(b, checkedFormat|formatAttempt)
	b = append(b, seq[:seqLen]...)
	b = append(b, tail...)
	b = seal(b, encAt, kindAttempt)
	rec := jrec{kind: recAttempt, raw: b, key: id, id: b[idEnd-len(id) : idEnd : idEnd],
		att: outcomeOf(&a), enc: b[encAt:len(b):len(b)]}
	st.attempts = a.Seq
	if err := db.write(jwrite{rec: rec, prev: prev, had: had}, st); err != nil {
		return devhook.Attempt{}, err
	}
	db.afterAppend()
	return a, nil
}

// doneChans are the channels on which queued writes hear their outcome.
// The zero value is ready; each journal has its own.
type doneChans struct{ pool sync.Pool }

func (d *doneChans) get() chan error {
	if c, ok := d.pool.Get().(chan error); ok {
		return c
	}
	return make(chan error, 1)
}

func (d *doneChans) put(c chan error) { d.pool.Put(c) }

// write numbers w.rec, makes st (whose lastSeq it sets) the state of its
// delivery and writes the record, together with any others queued, in one
// write(2). j.mu is held; write releases it. The record is pending if and
// only if the error is nil.
func (db *DB) write(w jwrite, st jstate) error {
	j := db.journal
	if j.closed {
		j.mu.Unlock()
		return errClosed
	}
	if j.failed != nil && j.bytes >= journalMaxBytes {
		err := fmt.Errorf("%d MiB of records wait for a database that cannot take them: %w", j.bytes>>20, j.failed)
		j.mu.Unlock()
		return err
	}
	j.seq++
	w.rec.seq = j.seq
	binary.BigEndian.PutUint64(w.rec.raw[recHeaderLen:], j.seq)
	st.lastSeq, st.writing = j.seq, true
	j.ids[w.rec.key] = st
	if !j.writing {
		// The file is idle: write at once.
		j.writing = true
		j.queue = append(j.queue, w)
		return db.writeQueued()
	}
	done := j.dones.get()
	w.done = done
	j.queue = append(j.queue, w)
	j.mu.Unlock()
	err := <-done
	j.dones.put(done)
	if err != errLead { // errLead (group.go) hands this call the write turn
		return err
	}
	j.mu.Lock()
	return db.writeQueued()
}

// writeQueued writes the records queued, the caller's first, up to
// maxWriteBytes, then hands the write turn to the next record queued, if
// any. The caller holds the turn and j.mu, which writeQueued releases. It
// returns the write's outcome, which every record written shares.
func (db *DB) writeQueued() error {
	j := db.journal
	n, size := 1, len(j.queue[0].rec.raw)
	for n < len(j.queue) && size+len(j.queue[n].rec.raw) <= maxWriteBytes {
		size += len(j.queue[n].rec.raw)
		n++
	}
	batch := append(j.batch[:0], j.queue[:n]...)
	rest := copy(j.queue, j.queue[n:])
	clear(j.queue[rest:])
	j.queue = j.queue[:rest]
	i := j.active
	var err error
	if j.files[i] == nil {
		f, oerr := openJournalFile(j.path[i], db.noSpace)
		if oerr != nil {
			err = oerr
		} else {
			j.files[i], j.sizes[i] = f, fileHeaderLen
		}
	}
	f, off := j.files[i], j.sizes[i]
	j.writingTo = i
	j.mu.Unlock()

	if err == nil {
		for k := range batch {
			frame(batch[k].rec.raw)
		}
		buf := batch[0].rec.raw
		if n > 1 {
			buf = j.wbuf[:0]
			if cap(buf) < size {
				buf = make([]byte, 0, size)
			}
			for k := range batch {
				buf = append(buf, batch[k].rec.raw...)
			}
			j.wbuf = buf
		}
		if _, werr := j.writeAt(f, buf, off); werr != nil {
			// Cut the partial write off: the records after it must
			// replay, and the records it holds whole, of calls that
			// fail, must not. (Should the truncate fail too, the next
			// write starts at off all the same and covers what it can.)
			_ = f.Truncate(off)
			err = fmt.Errorf("write journal: %w", werr)
		}
	}

	j.mu.Lock()
	j.writingTo = -1
	if err == nil {
		j.sizes[i] = off + int64(size)
		j.madePending(batch)
	} else {
		for k := range batch {
			w := &batch[k]
			// The delivery's earlier records may have been applied while
			// this one was written: then its state goes, as the flush
			// would have removed it.
			if w.had && w.prev.lastSeq > j.applied {
				j.ids[w.rec.key] = w.prev
			} else {
				delete(j.ids, w.rec.key)
			}
		}
	}
	j.settled.Broadcast()
	for k := 1; k < len(batch); k++ {
		batch[k].done <- err // buffered, and sent once: never blocks
	}
	clear(batch)
	j.batch = batch[:0]
	if len(j.queue) > 0 {
		j.queue[0].done <- errLead
	} else {
		j.writing = false
	}
	j.mu.Unlock()
	return err
}

// madePending makes the records of batch, just written, pending. j.mu is
// held.
func (j *journal) madePending(batch []jwrite) {
	before := len(j.pending)
	for k := range batch {
		r := &batch[k].rec
		j.pending = append(j.pending, *r)
		j.bytes += len(r.raw)
		st := j.ids[r.key]
		st.writing = false
		j.ids[r.key] = st
	}
	if before == 0 {
		j.first = time.Now()
	}
	if before == 0 || before < journalRecords && len(j.pending) >= journalRecords || j.bytes >= journalBytes {
		j.poke()
	}
	j.setOverMax()
}

// waitWritten waits until no record of delivery id is being written, and
// returns its state. j.mu is held.
func (j *journal) waitWritten(id string) (jstate, bool) {
	for {
		st, ok := j.ids[id]
		if !ok || !st.writing {
			return st, ok
		}
		j.settled.Wait()
	}
}

// afterAppend applies the pending records itself when too many are
// waiting. The record just appended is journaled whatever happens: a
// failure here is bbolt's, retried later, and shows in the next write.
func (db *DB) afterAppend() {
	if db.journal.overMax.Load() {
		_ = db.flush()
	}
}

// openJournalFile creates the journal file at path, with its header.
// Open has applied and removed any file there before.
func openJournalFile(path string, noSpace func() error) (*os.File, error) {
	if noSpace != nil {
		if err := noSpace(); err != nil {
			return nil, fmt.Errorf("write journal header: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	if _, err := f.Write(appendFileHeader(nil)); err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("write journal header: %w", err)
	}
	return f, nil
}
