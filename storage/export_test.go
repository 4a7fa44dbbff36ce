package storage

import (
	"os"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// Flush applies the journal now, as the background flusher would within
// journalDelay.
func (db *DB) Flush() error { return db.flush() }

// HoldFlushes stops every flush, the background one included, until
// release is called: records stay in the journal.
func (db *DB) HoldFlushes() (release func()) {
	db.journal.flushMu.Lock()
	return db.journal.flushMu.Unlock
}

// Pending returns the number of journaled records bbolt does not have.
func (db *DB) Pending() int {
	db.journal.mu.Lock()
	defer db.journal.mu.Unlock()
	return len(db.journal.pending)
}

// PruneApplied applies retention to what bbolt holds, without flushing.
func (db *DB) PruneApplied() (int, error) { return db.prune() }

// SetMaxSize makes bbolt refuse to grow its file beyond n bytes (0: no
// limit), as a full disk would.
func (db *DB) SetMaxSize(n int) {
	release := db.HoldFlushes()
	defer release()
	db.bolt.MaxSize = n
}

// CorruptSummary overwrites the stored summary of delivery id with bytes
// that do not decode.
func (db *DB) CorruptSummary(id string) error {
	return db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSummaries).Put([]byte(id), []byte{0xff, 0xff})
	})
}

// JournalRecords returns the intact records of the journal file at path,
// and what was wrong with it ("" if nothing, or only a torn tail).
func JournalRecords(path string) (n int, problem string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, "", err
	}
	s, err := scanJournal(data)
	if err != nil {
		return 0, "", err
	}
	return len(s.recs), s.foreign + s.damaged, nil
}

// JournalHeaderLen and RecordHeaderLen are the sizes of a journal file's
// header and of a record's.
const (
	JournalHeaderLen = fileHeaderLen
	RecordHeaderLen  = recHeaderLen
)

// RecordOffsets returns where each intact record of the journal file data
// starts.
func RecordOffsets(data []byte) []int {
	var offs []int
	for off := fileHeaderLen; off < len(data); {
		size, st := frameAt(data[off:])
		if st != frameOK {
			break
		}
		offs = append(offs, off)
		off += size
	}
	return offs
}

// PutDeliveriesTx records ds in one transaction, for building large stores
// in tests and benchmarks quickly. It does not prune.
func (db *DB) PutDeliveriesTx(ds []*devhook.Delivery) error {
	recs := make([]jrec, len(ds))
	for i, d := range ds {
		recs[i] = putRecord(d)
	}
	if err := db.flush(); err != nil {
		return err
	}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		a := newApplyTx(tx, len(recs), nil)
		for i := range recs {
			if err := a.put(recs[i].key, &recs[i].put); err != nil {
				return err
			}
		}
		_, err := a.done()
		return err
	})
	if err != nil {
		return err
	}
	last, err := db.lastDelivery()
	db.journal.mu.Lock()
	db.journal.lastBolt = last
	db.journal.mu.Unlock()
	return err
}

// BucketLens returns the number of keys in each top-level bucket that
// holds per-delivery or per-channel records.
func (db *DB) BucketLens() map[string]int {
	m := map[string]int{}
	_ = db.flush()
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if string(name) == "meta" {
				continue
			}
			m[string(name)] = tx.Bucket(name).Stats().KeyN
		}
		return nil
	})
	return m
}

// EncodeRecords returns the stored encodings of d (meta, queued, summary)
// and of a.
func EncodeRecords(d *devhook.Delivery, a devhook.Attempt) [][]byte {
	s := d.Summarize()
	return [][]byte{appendMeta(nil, d, false), appendMeta(nil, d, true), appendSummary(nil, &s), appendAttempt(nil, &a)}
}

// DecodeRecords decodes b as every kind of record and returns their
// errors: meta, summary, filter match, attempt.
func DecodeRecords(b []byte) []error {
	_, e1 := decodeMeta(b)
	_, e2 := decodeSummary(b)
	_, e3 := matchSummary(b, &devhook.Filter{Verdict: "ok", RunID: "r"})
	_, e4 := decodeAttempt(b)
	return []error{e1, e2, e3, e4}
}
