package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// The journal puts PutDelivery and AddAttempt on a short path. A bbolt
// commit of one delivery rewrites a leaf and a branch page in five buckets
// and costs about 70 µs of CPU; appending the same record to a file is one
// write(2). So a write appends a record to the journal (fdatasync'd as well
// unless NoSync) and returns: from then on it survives the process being
// killed, exactly as a NoSync bbolt commit does. A goroutine owned by the
// DB applies the journal to bbolt in batches, at most journalDelay later,
// and every read applies what is pending first, so that readers see their
// own writes and the rest of the package reads bbolt alone. Open applies
// what a killed process left in the journal.
//
// Two files take turns: records are appended to the active one; a flush
// makes the other one active, applies every pending record, then empties
// the file it left, all of whose records are then in bbolt. A flush that
// fails leaves both files as they are and keeps its records pending.
// Applying a record twice is harmless: a delivery already recorded is left
// alone and an attempt has its own key, its Seq, fixed when it was
// journaled. So a crash between a commit and the emptying only costs a
// replay.
//
// A record on disk: uint32 length of what follows the checksum, uint32
// CRC-32C of it, uint64 sequence number, a kind byte, then the fields as
// codec.go writes them. A torn record at the end of a file (a crash in the
// middle of a write) ends the file's replay.

const (
	recPut     = 1 // id, meta, summary, run id, body
	recAttempt = 2 // id, attempt

	journalHeader = 8
	// A flush starts once this many records or bytes are pending, or
	// journalDelay after the first pending record.
	journalRecords = 512
	journalBytes   = 1 << 20
	journalDelay   = 50 * time.Millisecond
	// A write that finds this many bytes pending (bbolt is slow or
	// failing) applies them itself before it returns, so memory stays
	// bounded.
	journalMaxBytes = 16 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// jrec is a journaled record that bbolt does not have yet.
type jrec struct {
	seq  uint64
	kind byte
	put  *encodedDelivery // recPut
	id   []byte           // recAttempt
	att  devhook.Attempt  // recAttempt: decoded, for the summary
	enc  []byte           // recAttempt: encoded
	size int
}

// jstate is what the journal knows of a delivery whose records are
// pending: that it exists and how many attempts it has.
type jstate struct {
	attempts int
	lastSeq  uint64 // of its newest pending record
}

type journal struct {
	path [2]string

	mu      sync.Mutex
	files   [2]*os.File // opened on the first write
	sizes   [2]int64
	active  int
	seq     uint64
	pending []jrec
	bytes   int
	ids     map[string]*jstate
	first   time.Time // when the oldest pending record was appended
	failed  error     // the last flush's error, until a flush succeeds
	closed  bool

	flushMu sync.Mutex // one flush at a time

	syncMu    sync.Mutex // group fdatasync when !noSync
	syncedSeq uint64

	kick     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

var errClosed = errors.New("the database is closed")

func newJournal(dbPath string) *journal {
	return &journal{
		path: [2]string{dbPath + ".journal0", dbPath + ".journal1"},
		ids:  map[string]*jstate{},
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// runJournal flushes the journal in the background until Close.
func (db *DB) runJournal() {
	j := db.journal
	defer close(j.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
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
		if wait := journalDelay - time.Since(first); n < journalRecords && size < journalBytes && wait > 0 {
			timer.Reset(wait)
			continue
		}
		// On an error the records stay pending and journaled: the next
		// read returns the error and retries, as do the writes that
		// follow (a kick at 1 MiB pending, a flush of their own at 16).
		_ = db.flush()
		j.mu.Lock()
		again := len(j.pending) > 0 && j.failed == nil
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

// appendLocked writes rec, encoded as b (header space included), to the active
// file and makes it pending. j.mu is held.
func (db *DB) appendLocked(rec jrec, b []byte) error {
	j := db.journal
	if j.closed {
		return errClosed
	}
	i := j.active
	if j.files[i] == nil {
		f, err := os.OpenFile(j.path[i], os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("open journal: %w", err)
		}
		j.files[i] = f
	}
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)-journalHeader))
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[journalHeader:], crcTable))
	if _, err := j.files[i].WriteAt(b, j.sizes[i]); err != nil {
		// Cut a partial record off, so that the records after it replay.
		_ = j.files[i].Truncate(j.sizes[i])
		return fmt.Errorf("write journal: %w", err)
	}
	j.sizes[i] += int64(len(b))
	rec.size = len(b)
	if len(j.pending) == 0 {
		j.first = time.Now()
	}
	j.pending = append(j.pending, rec)
	j.bytes += len(b)
	if len(j.pending) == 1 || len(j.pending) == journalRecords || j.bytes >= journalBytes {
		j.poke()
	}
	return nil
}

// afterAppend makes the record seq durable when the DB syncs, and applies
// the pending records itself when too many are waiting.
func (db *DB) afterAppend(seq uint64) error {
	j := db.journal
	if !db.noSync {
		if err := j.syncTo(seq); err != nil {
			return err
		}
	}
	j.mu.Lock()
	over := j.bytes > journalMaxBytes
	j.mu.Unlock()
	if over {
		if err := db.flush(); err != nil {
			// The record is journaled and will be applied once bbolt
			// takes writes again, but memory must not grow meanwhile.
			return fmt.Errorf("more than %d MiB of records wait for the database: %w", journalMaxBytes>>20, err)
		}
	}
	return nil
}

// syncTo returns once the record seq is on disk. Concurrent writers share
// one fdatasync: whoever syncs covers every record appended before it
// started.
func (j *journal) syncTo(seq uint64) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if j.syncedSeq >= seq {
		return nil
	}
	j.mu.Lock()
	upTo := j.seq
	files := j.files
	j.mu.Unlock()
	for _, f := range files {
		if f != nil {
			if err := f.Sync(); err != nil {
				return fmt.Errorf("sync journal: %w", err)
			}
		}
	}
	j.syncedSeq = upTo
	return nil
}

// settle applies every pending record, so that bbolt holds all writes
// made so far. Reads call it first.
func (db *DB) settle() error {
	j := db.journal
	j.mu.Lock()
	n := len(j.pending)
	j.mu.Unlock()
	if n == 0 {
		return nil
	}
	return db.flush()
}

// flush applies the pending records to bbolt and empties the journal file
// that held them.
func (db *DB) flush() error {
	j := db.journal
	j.flushMu.Lock()
	defer j.flushMu.Unlock()

	j.mu.Lock()
	batch := j.pending
	if len(batch) == 0 {
		j.mu.Unlock()
		return nil
	}
	old := j.active
	j.active = 1 - old
	lastSeq := batch[len(batch)-1].seq
	j.mu.Unlock()

	// bbolt refuses nothing here that it accepted before (keys and sizes
	// were checked when journaled), so a failure is the disk's: retry
	// the whole batch later.
	created := 0
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		var err error
		created, err = applyRecords(tx, batch)
		return err
	})

	j.mu.Lock()
	if err != nil {
		j.failed = fmt.Errorf("storage: apply journal to %s: %w", db.path, err)
		j.mu.Unlock()
		return j.failed
	}
	j.failed = nil
	j.pending = append(j.pending[:0:0], j.pending[len(batch):]...)
	j.bytes = 0
	for _, r := range j.pending {
		j.bytes += r.size
	}
	if len(j.pending) > 0 {
		j.first = time.Now()
	}
	for id, st := range j.ids {
		if st.lastSeq <= lastSeq {
			delete(j.ids, id)
		}
	}
	// Every record of the old file is in bbolt now: records after lastSeq
	// went to the other file.
	var terr error
	if f := j.files[old]; f != nil && j.sizes[old] > 0 {
		if terr = f.Truncate(0); terr == nil {
			j.sizes[old] = 0
		}
	}
	j.mu.Unlock()
	if terr != nil {
		return fmt.Errorf("storage: empty journal of %s: %w", db.path, terr)
	}
	db.releaseMapped()

	if created > 0 {
		after := db.puts.Add(int64(created))
		if after/db.pruneEvery != (after-int64(created))/db.pruneEvery {
			if _, err := db.prune(); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyRecords writes recs to tx in order and returns how many deliveries
// it created.
func applyRecords(tx *bolt.Tx, recs []jrec) (created int, err error) {
	for i := range recs {
		r := &recs[i]
		switch r.kind {
		case recPut:
			ok, err := r.put.put(tx)
			if err != nil {
				return 0, fmt.Errorf("delivery %s: %w", r.put.id, err)
			}
			if ok {
				created++
			}
		case recAttempt:
			if err := applyAttempt(tx, r.id, &r.att, r.enc); err != nil {
				return 0, fmt.Errorf("attempt %d of delivery %s: %w", r.att.Seq, r.id, err)
			}
		}
	}
	return created, nil
}

// applyAttempt stores attempt a (encoded as enc) of delivery id and makes
// it the summary's last attempt unless a later one is there already. A
// delivery that is gone (pruned) takes no attempt.
func applyAttempt(tx *bolt.Tx, id []byte, a *devhook.Attempt, enc []byte) error {
	summaries := tx.Bucket(bucketSummaries)
	v := summaries.Get(id)
	if v == nil {
		return nil
	}
	s, err := decodeSummary(v)
	if err != nil {
		return err
	}
	attempts := tx.Bucket(bucketAttempts)
	attempts.FillPercent = appendFill
	if err := attempts.Put(attemptKey(id, a.Seq), enc); err != nil {
		return err
	}
	if a.Seq <= s.Attempts {
		return nil
	}
	summaries.FillPercent = appendFill
	s.Attempts = a.Seq
	s.Status, s.Duration, s.Error = a.Status, a.Duration, a.Error
	return summaries.Put(id, appendSummary(make([]byte, 0, len(v)+16), &s))
}

// journalPut journals e; created is false when the delivery is recorded
// already.
func (db *DB) journalPut(e *encodedDelivery) (created bool, err error) {
	j := db.journal
	enc := encoder{make([]byte, journalHeader, journalHeader+9+1+len(e.id)+len(e.meta)+len(e.summary)+len(e.runID)+len(e.body)+20)}
	j.mu.Lock()
	if _, ok := j.ids[string(e.id)]; ok {
		j.mu.Unlock()
		return false, nil
	}
	var exists bool
	err = db.bolt.View(func(tx *bolt.Tx) error {
		exists = tx.Bucket(bucketDeliveries).Get(e.id) != nil
		return nil
	})
	if err != nil || exists {
		j.mu.Unlock()
		return false, err
	}
	j.seq++
	seq := j.seq
	enc.b = binary.BigEndian.AppendUint64(enc.b, seq)
	enc.byte(recPut)
	// The pending record points into the journal's buffer, not into the
	// caller's delivery, which the caller may change once we return.
	fields := len(enc.b)
	enc.bytes(e.id)
	enc.bytes(e.meta)
	enc.bytes(e.summary)
	enc.str(e.runID)
	enc.bytes(e.body)
	own, derr := decodePut(enc.b[fields:])
	if derr != nil {
		j.seq--
		j.mu.Unlock()
		return false, derr
	}
	if err := db.appendLocked(jrec{seq: seq, kind: recPut, put: own}, enc.b); err != nil {
		j.seq--
		j.mu.Unlock()
		return false, err
	}
	j.ids[string(e.id)] = &jstate{lastSeq: seq}
	j.mu.Unlock()
	return true, db.afterAppend(seq)
}

// journalAttempt journals a as the next attempt of delivery id.
func (db *DB) journalAttempt(id string, a devhook.Attempt) (devhook.Attempt, error) {
	j := db.journal
	key := []byte(id)
	j.mu.Lock()
	st := j.ids[id]
	if st == nil {
		var s devhook.Summary
		err := db.bolt.View(func(tx *bolt.Tx) error {
			v := tx.Bucket(bucketSummaries).Get(key)
			if v == nil {
				return notFound(id)
			}
			var err error
			s, err = decodeSummary(v)
			return err
		})
		if err != nil {
			j.mu.Unlock()
			return devhook.Attempt{}, err
		}
		st = &jstate{attempts: s.Attempts}
	}
	a.Seq = st.attempts + 1
	enc := encoder{make([]byte, journalHeader, journalHeader+64+len(id)+len(a.Body))}
	j.seq++
	seq := j.seq
	enc.b = binary.BigEndian.AppendUint64(enc.b, seq)
	enc.byte(recAttempt)
	enc.bytes(key)
	attEnc := appendAttempt(nil, &a)
	enc.bytes(attEnc)
	if err := db.appendLocked(jrec{seq: seq, kind: recAttempt, id: key, att: a, enc: attEnc}, enc.b); err != nil {
		j.seq--
		j.mu.Unlock()
		return devhook.Attempt{}, err
	}
	st.attempts = a.Seq
	st.lastSeq = seq
	j.ids[id] = st
	j.mu.Unlock()
	return a, db.afterAppend(seq)
}

func decodePut(b []byte) (*encodedDelivery, error) {
	dec := decoder{b: b}
	e := &encodedDelivery{id: dec.raw(), meta: dec.raw(), summary: dec.raw()}
	e.runID = dec.str()
	e.body = dec.raw()
	if dec.err != nil {
		return nil, dec.err
	}
	if e.body == nil {
		e.body = []byte{}
	}
	return e, nil
}

func decodeRecord(b []byte) (jrec, error) {
	if len(b) < 9 {
		return jrec{}, errCorrupt
	}
	r := jrec{seq: binary.BigEndian.Uint64(b), kind: b[8], size: len(b) + journalHeader}
	b = b[9:]
	switch r.kind {
	case recPut:
		e, err := decodePut(b)
		if err != nil {
			return jrec{}, err
		}
		r.put = e
	case recAttempt:
		dec := decoder{b: b}
		r.id = dec.raw()
		r.enc = dec.raw()
		if dec.err != nil {
			return jrec{}, dec.err
		}
		a, err := decodeAttempt(r.enc)
		if err != nil {
			return jrec{}, err
		}
		r.att = a
	default:
		return jrec{}, errCorrupt
	}
	return r, nil
}

// readJournal returns the intact records of the file at path, and whether
// it exists.
func readJournal(path string) ([]jrec, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, true, err
	}
	var recs []jrec
	for len(data) >= journalHeader {
		n := int(binary.BigEndian.Uint32(data))
		sum := binary.BigEndian.Uint32(data[4:])
		if n > len(data)-journalHeader {
			break // torn
		}
		body := data[journalHeader : journalHeader+n]
		if crc32.Checksum(body, crcTable) != sum {
			break
		}
		r, err := decodeRecord(body)
		if err != nil {
			break
		}
		recs = append(recs, r)
		data = data[journalHeader+n:]
	}
	return recs, true, nil
}

// replayJournal applies what a previous process left in the journal files
// and removes them. Open calls it before anything else runs.
func (db *DB) replayJournal() error {
	j := db.journal
	var recs []jrec
	found := false
	for _, p := range j.path {
		r, ok, err := readJournal(p)
		if err != nil {
			return fmt.Errorf("storage: read journal %s: %w", p, err)
		}
		found = found || ok
		recs = append(recs, r...)
	}
	if !found {
		return nil
	}
	slices.SortFunc(recs, func(a, b jrec) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	for len(recs) > 0 {
		n := min(len(recs), 4*journalRecords)
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			_, err := applyRecords(tx, recs[:n])
			return err
		})
		if err != nil {
			return fmt.Errorf("storage: apply journal of %s: %w", db.path, err)
		}
		recs = recs[n:]
	}
	if !db.noSync {
		if err := db.bolt.Sync(); err != nil {
			return fmt.Errorf("storage: apply journal of %s: %w", db.path, err)
		}
	}
	for _, p := range j.path {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("storage: remove journal %s: %w", p, err)
		}
	}
	return nil
}

// closeJournal stops the flusher, applies what is pending and removes the
// files.
func (db *DB) closeJournal() error {
	j := db.journal
	j.stopOnce.Do(func() { close(j.stop) })
	<-j.done
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	err := db.flush()
	if err == nil && !db.noSync {
		err = db.bolt.Sync()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, f := range j.files {
		if f == nil {
			continue
		}
		if cerr := f.Close(); cerr != nil && err == nil {
			err = cerr
		}
		j.files[i] = nil
		if err == nil {
			// Applied: the file holds nothing bbolt lacks.
			if rerr := os.Remove(j.path[i]); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = rerr
			}
		}
	}
	return err
}
