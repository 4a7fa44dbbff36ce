package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// Writing to the journal. A record is numbered (its seq, its attempt's
// Seq) and written under the journal's lock: a copy into the active
// file's mapping (journal_file.go), so short that concurrent writes need
// not share one, as they had to when each was a write(2). A call returns
// once its record is in the file, and the record is then pending, visible
// to reads. A write that fails (the disk is full) fails its call alone:
// the seq is not taken and the next record goes where it would have gone,
// so the file's records stay numbered one after the other, as recovery
// wants them (journal_format.go).

// jstate is what the journal knows of a delivery whose records are
// pending.
type jstate struct {
	attempts int    // its attempts, journaled ones included
	lastSeq  uint64 // of its newest record
}

// journalPut journals d; created is false when the delivery is recorded
// already.
func (db *DB) journalPut(d *devhook.Delivery) (created bool, err error) {
	j := db.journal
	rec := j.putRecord(d)
	j.mu.Lock()
	if _, ok := j.ids[d.ID]; ok {
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
	if err := db.write(&rec, jstate{}); err != nil {
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
	st, had := j.ids[id]
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
	if err := db.write(&rec, st); err != nil {
		return devhook.Attempt{}, err
	}
	db.afterAppend()
	return a, nil
}

// write numbers rec, writes it to the active file and makes it pending,
// with st (whose lastSeq it sets) the state of its delivery. j.mu is held;
// write releases it. The record is pending if and only if the error is
// nil.
func (db *DB) write(rec *jrec, st jstate) error {
	j := db.journal
	defer j.mu.Unlock()
	if j.closed {
		return errClosed
	}
	if j.failed != nil && j.bytes >= journalMaxBytes {
		return fmt.Errorf("%d MiB of records wait for a database that cannot take them: %w", j.bytes>>20, j.failed)
	}
	if j.noSpace != nil {
		if err := j.noSpace(); err != nil {
			return fmt.Errorf("write journal: %w", err)
		}
	}
	f := j.files[j.active]
	if f == nil {
		var err error
		if f, err = createJournalFile(j.path[j.active], j.seq+1, j.noMap); err != nil {
			return err
		}
		j.files[j.active] = f
	}
	seq := j.seq + 1
	binary.BigEndian.PutUint64(rec.raw[recHeaderLen:], seq)
	frame(rec.raw)
	if err := f.write(rec.raw, seq); err != nil {
		return err
	}
	j.seq, rec.seq = seq, seq
	st.lastSeq = seq
	j.ids[rec.key] = st
	j.pending = append(j.pending, *rec)
	j.bytes += len(rec.raw)
	if len(j.pending) == 1 {
		j.first = time.Now()
	}
	if n := len(j.pending); n == 1 || n == journalRecords || j.bytes >= journalBytes && j.bytes-len(rec.raw) < journalBytes {
		j.poke()
	}
	j.setOverMax()
	return nil
}

// afterAppend applies the pending records itself when too many are
// waiting. The record just appended is journaled whatever happens: a
// failure here is bbolt's, retried later, and shows in the next write.
func (db *DB) afterAppend() {
	if db.journal.overMax.Load() {
		_ = db.flush()
	}
}
