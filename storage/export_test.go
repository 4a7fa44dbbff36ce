package storage

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"os"
	"strings"

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
		return tx.Bucket([]byte(bucketSummaries)).Put([]byte(id), []byte{0xff, 0xff})
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
// header (format 1; format 2's is JournalHeaderLen2) and of a record's.
const (
	JournalHeaderLen  = fileHeaderLen
	JournalHeaderLen2 = fileHeaderLen2
	RecordHeaderLen   = recHeaderLen
)

// RecordOffsets returns where each record that Open would read of the
// journal file data starts, up to the first one that is not intact or
// not in sequence (format 2: the records of the file's last round).
func RecordOffsets(data []byte) []int {
	s, err := scanJournal(data)
	if err != nil {
		return nil
	}
	var offs []int
	next := s.hdr
	for _, r := range s.recs {
		off := cap(data) - cap(r.raw) // raw is a slice of data
		if off != next {
			break
		}
		offs = append(offs, off)
		next = off + len(r.raw)
	}
	return offs
}

// WithHighWater returns a copy of the format 2 journal file data whose
// header's high-water mark is hwm.
func WithHighWater(data []byte, hwm int) []byte {
	b := bytes.Clone(data)
	start, _, _ := readStart(b)
	copy(b[startAt:], appendStart(nil, start, int64(hwm)))
	return b
}

// JournalEnd returns where the records of the journal file data that
// Open would read end.
func JournalEnd(data []byte) int {
	s, _ := scanJournal(data)
	return s.end
}

// PutDeliveriesTx records ds in one transaction, for building large stores
// in tests and benchmarks quickly. It does not prune.
func (db *DB) PutDeliveriesTx(ds []*devhook.Delivery) error {
	recs := make([]jrec, len(ds))
	for i, d := range ds {
		recs[i] = db.journal.putRecord(d)
	}
	if err := db.flush(); err != nil {
		return err
	}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		a := newApplyTx(tx, len(recs), nil, db.bodies)
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
		for _, name := range allBuckets() {
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
	return [][]byte{appendMeta(nil, d, crc32.Checksum(d.Body, crcTable())), appendQueued(nil, d), appendSummary(nil, &s), appendAttempt(nil, &a)}
}

// DecodeRecords decodes b as every kind of record, not checked against a
// key, and returns their errors: meta, summary (checked, then matched
// against a filter and decoded), attempt.
func DecodeRecords(b []byte) []error {
	_, _, e1 := decodeMeta(nil, b)
	p, _, e2 := summaryPayload(nil, b)
	if e2 == nil {
		_, e2 = matchSummary(p, &devhook.Filter{Verdict: "ok", RunID: "r"})
	}
	if e2 == nil {
		_, e2 = decodeSummary(p)
	}
	_, e4 := decodeAttempt(nil, b)
	return []error{e1, e2, e4}
}

// CheckMeta checks a delivery record as Open's scan does.
func CheckMeta(key, b []byte) error { return checkMeta(key, b) }

// SealSummary returns the summary b, of a checked layout, with its
// format byte set to format and its checksum made again: a summary a
// newer devhook could write.
func SealSummary(b []byte, format byte) []byte {
	out := append([]byte{checkedFormat | format}, b[1:len(b)-crcLen]...)
	return seal(out, 0, kindSummary)
}

// ValueKinds are the checksums the values' checksums start from, by the
// letter of their kind.
var ValueKinds = map[string]uint32{"D": uint32(kindMeta), "S": uint32(kindSummary), "A": uint32(kindAttempt)}

// PutDeliveryDirect and AddAttemptDirect are PutDelivery and AddAttempt
// without the journal: each call one bbolt commit (the group commit of
// group.go), written as they were before the journal and without its
// encoding in place, its pending records or its apply. They are what the
// journal replaces: TestJournal_MatchesDirectCommits holds the journal to
// them and BenchmarkRecordDelivery measures both. They do not prune. A DB
// is written through one path or the other, never both: the journal
// neither sees nor is seen by direct commits until it is flushed.
func (db *DB) PutDeliveryDirect(d *devhook.Delivery) (created bool, err error) {
	if d == nil {
		return false, devhook.Errorf(devhook.EINVALID, "storage: put delivery: no delivery")
	}
	if err := validID("delivery", d.ID); err != nil {
		return false, err
	}
	c := *d
	c.Attempts = nil
	s := c.Summarize()
	id := []byte(d.ID)
	meta := appendMeta(make([]byte, 0, 256), d, crc32.Checksum(d.Body, crcTable()))
	summary := appendSummary(make([]byte, 0, 128), &s)
	body := d.Body
	if body == nil {
		body = []byte{}
	}
	runID := d.Event.RunID
	if len(runID) > maxRunIDLen || strings.IndexByte(runID, 0) >= 0 {
		runID = ""
	}
	err = db.update(func(tx *bolt.Tx) error {
		created = false
		deliveries := tx.Bucket([]byte(bucketDeliveries))
		if deliveries.Get(id) != nil {
			return nil
		}
		bodies, summaries := tx.Bucket([]byte(bucketBodies)), tx.Bucket([]byte(bucketSummaries))
		for _, b := range []*bolt.Bucket{deliveries, bodies, summaries} {
			b.FillPercent = appendFill
		}
		if err := deliveries.Put(id, meta); err != nil {
			return err
		}
		if err := bodies.Put(id, body); err != nil {
			return err
		}
		if err := summaries.Put(id, summary); err != nil {
			return err
		}
		if runID != "" {
			if err := tx.Bucket([]byte(bucketRuns)).Put(runKey(runID, id), nil); err != nil {
				return err
			}
		}
		created = true
		return putCount(tx, getCount(tx)+1)
	})
	if err != nil {
		return false, fmt.Errorf("storage: put delivery %s: %w", d.ID, err)
	}
	return created, nil
}

// AddAttemptDirect: see PutDeliveryDirect.
func (db *DB) AddAttemptDirect(id string, a devhook.Attempt) (devhook.Attempt, error) {
	if validID("delivery", id) != nil {
		return devhook.Attempt{}, notFound(id)
	}
	key := []byte(id)
	err := db.update(func(tx *bolt.Tx) error {
		summaries := tx.Bucket([]byte(bucketSummaries))
		v := summaries.Get(key)
		if v == nil {
			return notFound(id)
		}
		p, _, err := summaryPayload(key, v)
		if err != nil {
			return err
		}
		s, err := decodeSummary(p)
		if err != nil {
			return err
		}
		a.Seq = s.Attempts + 1
		attempts := tx.Bucket([]byte(bucketAttempts))
		attempts.FillPercent = appendFill
		summaries.FillPercent = appendFill
		if err := attempts.Put(attemptKey(key, a.Seq), appendAttempt(nil, &a)); err != nil {
			return err
		}
		s.Attempts = a.Seq
		s.Status, s.Duration, s.Error = a.Status, a.Duration, a.Error
		return summaries.Put(key, appendSummary(make([]byte, 0, len(v)+16), &s))
	})
	if err != nil {
		if devhook.ErrorCode(err) == devhook.ENOTFOUND {
			return devhook.Attempt{}, err
		}
		return devhook.Attempt{}, fmt.Errorf("storage: add attempt to delivery %s: %w", id, err)
	}
	return a, nil
}

// WithPageSize returns cfg making new files with bbolt pages of ps bytes.
func WithPageSize(cfg Config, ps int) Config {
	cfg.pageSize = ps
	return cfg
}

// SetBodyFileMax makes body files full at n bytes, for tests of many files.
func (db *DB) SetBodyFileMax(n int64) {
	db.bodies.mu.Lock()
	db.bodies.max = n
	db.bodies.mu.Unlock()
}

// BodyFileMin is the size from which bodies go to body files.
const BodyFileMin = bodyFileMin

// WithBodiesInBbolt keeps every body in bbolt, none in body files: for
// fixtures of bbolt's own pages.
func WithBodiesInBbolt(cfg Config) Config {
	cfg.bodyFileMin = -1
	return cfg
}

// HoldReads holds what a read holds against body files being removed or
// zeroed, as a read under way does, until release.
func (db *DB) HoldReads() (release func()) {
	db.bodyReads.RLock()
	return db.bodyReads.RUnlock
}

// BodyFileValue is the value, in bucket bodyfiles, of a body file holding
// bodies bodies that end at end.
func BodyFileValue(bodies uint64, end int64) []byte {
	return bodyFileState{bodies: bodies, end: end}.append(nil)
}

// OnBodySync has fn called with the path of each body file, and of their
// directory, that Close fsyncs: a test cannot cut the power.
func (db *DB) OnBodySync(fn func(path string)) {
	db.bodies.mu.Lock()
	db.bodies.synced = fn
	db.bodies.mu.Unlock()
}

// BodyFileHeaderLen is the length of a body file's header.
const BodyFileHeaderLen = bodyFileHeaderLen
