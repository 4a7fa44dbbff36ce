package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
	bolt "go.etcd.io/bbolt"
)

// The journal puts PutDelivery and AddAttempt on a short path. A bbolt
// commit of one delivery rewrites a leaf and a branch page in five buckets
// and costs about 70 µs of CPU; appending the same record to a file is one
// write(2). So a write appends a record to the journal and returns: from
// then on it survives the process being killed, as a NoSync bbolt commit
// does (the journal is never fsynced: a power loss may lose the last
// records). A goroutine owned by the DB applies the journal to bbolt in
// batches, at most journalDelay later. Reads never write: they read a
// bbolt read transaction plus the records still pending in memory (see
// pending.go). Open applies what a killed process left in the journal.
//
// Concurrent writes share a write(2), as group.go's writes share a bbolt
// commit: a write that finds the file idle writes its record at once; one
// that finds a write under way queues its record and waits, and the next
// write takes every record queued meanwhile (up to maxWriteBytes) in one
// pwrite. A call returns only once the write holding its record returned.
// A record is numbered (its seq, its attempt's Seq) when it is queued, and
// becomes pending, visible to reads, only once written. A write that fails
// fails every call whose record it held, and nothing else: the file is cut
// back to where the write started, the records' deliveries get back the
// state they had, and the seqs taken stay unused, a gap that replay, which
// only sorts by seq, does not mind. While a record of a delivery is being
// written, the next record of that delivery waits for it, so that a
// failed write never leaves a later attempt numbered after a lost one, nor
// answers "recorded already" for a delivery whose record was then lost.
//
// Two files take turns: records are appended to the active one; a flush
// makes the other one active, applies every pending record, then empties
// the file it left, all of whose records are then in bbolt. A flush that
// fails (the disk is full) leaves both files as they are, keeps its
// records pending and is retried, with a growing delay, until bbolt takes
// them. A record that bbolt refuses by itself (it panics, or the delivery
// it belongs to is damaged in bbolt) is copied to <file>.rejected, reported
// and left out; the others are applied. Applying a record twice is
// harmless: a delivery already recorded is left alone and an attempt has
// its own key, its Seq, fixed when it was journaled. So a crash between a
// commit and the emptying only costs a replay.
//
// A journal file starts with a header: the magic "devhookJ", a uint32
// format version and a CRC-32C of those 12 bytes. Then records, each: the
// uint32 marker recMarker, the uint32 length of the body, a CRC-32C of the
// body, a CRC-32C of the 12 header bytes before it, then the body: uint64
// sequence number, a kind byte, and the fields as codec.go writes them.
// Integers are big endian.
//
// What Open does with a journal file it finds:
//
//   - intact, or cut short at its end (a torn tail, from a process killed in
//     the middle of a write): applies every record, then removes the file.
//     A torn tail was never acknowledged and is not reported.
//   - damaged in the middle (a record whose checksum fails, followed by
//     intact ones): applies every intact record, skipping the damaged ones
//     by their length when their header is intact, else by searching for
//     the next marker whose header and body verify; then renames the file
//     to <name>.damaged-<UTC time> and reports it through Config.Logf.
//     Evidence is never deleted.
//   - not starting with the magic (not ours, its first bytes damaged, or
//     a journal of a devhook from before the header): reads nothing from
//     it, renames it the same way and reports it. Refusing to open would
//     stop devhook until someone moves the file; setting it aside keeps the
//     evidence and the store working.
//   - written by a newer devhook (a verified header with a higher version):
//     Open fails, telling the user to upgrade, and touches nothing.

const (
	recPut     = 1 // id, meta, summary, run id, body
	recAttempt = 2 // id, attempt

	journalMagic   = "devhookJ"
	journalVersion = 1
	fileHeaderLen  = 16
	recMarker      = 0xd7e4a11c
	recHeaderLen   = 16
	// recMaxLen bounds a record's body; a longer length is damage.
	recMaxLen = 1 << 30

	// A flush starts once this many records or bytes are pending, or
	// journalDelay after the first pending record.
	journalRecords = 512
	journalBytes   = 1 << 20
	journalDelay   = 50 * time.Millisecond
	// A flush that failed is retried after journalDelay, then after twice
	// as long each time, up to maxRetryDelay.
	maxRetryDelay = 2 * time.Second
	// A write that finds this many bytes pending (bbolt is slow) applies
	// them itself before it returns, so memory stays bounded; when bbolt
	// fails, writes are refused instead.
	journalMaxBytes = 16 << 20
	// maxWriteBytes bounds the records that one write(2) takes together,
	// and so the buffer it copies them into. A longer record is written
	// alone, from its own buffer.
	maxWriteBytes = 128 << 10
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// jrec is a journaled record that bbolt does not have yet.
type jrec struct {
	seq  uint64
	kind byte
	raw  []byte          // the record as it is in the file, header included
	key  string          // its delivery's id
	put  encodedDelivery // recPut: slices of raw
	id   []byte          // recAttempt: a slice of raw
	att  outcome         // recAttempt: the fields a summary shows
	enc  []byte          // recAttempt: the encoded attempt, a slice of raw
}

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

type journal struct {
	path [2]string

	mu       sync.Mutex
	files    [2]*os.File // opened on the first write
	sizes    [2]int64
	active   int
	seq      uint64
	pending  []jrec // never changed in place: readers keep a copy of the slice
	bytes    int
	ids      map[string]jstate
	lastBolt []byte    // no delivery id in bbolt sorts after it
	applied  uint64    // the seq of the newest record a flush applied
	first    time.Time // when the oldest pending record was appended
	failed   error     // the last flush's error, until a flush succeeds
	closed   bool

	// Group write: see the top of this file.
	queue     []jwrite   // records waiting for the next write, in seq order
	writing   bool       // a caller holds the write turn: it writes, or hands the turn on
	writingTo int        // the file a write is under way to, or -1
	settled   *sync.Cond // on mu; broadcast after every write
	batch     []jwrite   // the turn's: the records it is writing
	wbuf      []byte     // the turn's: those records end to end

	// overMax is set while more than journalMaxBytes are pending and bbolt
	// takes writes: a write then flushes before it returns.
	overMax atomic.Bool

	flushMu sync.Mutex // one flush at a time

	// writeAt writes records to a journal file: (*os.File).WriteAt, which
	// tests replace to hold or fail a write.
	writeAt func(f *os.File, b []byte, off int64) (int, error)

	kick     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

var errClosed = errors.New("the database is closed")

func newJournal(dbPath string) *journal {
	j := &journal{
		path:      [2]string{dbPath + ".journal0", dbPath + ".journal1"},
		ids:       map[string]jstate{},
		writingTo: -1,
		writeAt:   (*os.File).WriteAt,
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	j.settled = sync.NewCond(&j.mu)
	return j
}

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

func appendFileHeader(b []byte) []byte {
	b = append(b, journalMagic...)
	b = binary.BigEndian.AppendUint32(b, journalVersion)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[len(b)-12:], crcTable))
}

// frame fills in the header of record b, whose first recHeaderLen bytes
// are reserved for it.
func frame(b []byte) {
	binary.BigEndian.PutUint32(b[0:], recMarker)
	binary.BigEndian.PutUint32(b[4:], uint32(len(b)-recHeaderLen))
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[recHeaderLen:], crcTable))
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crcTable))
}

// openJournalFile creates the journal file at path, with its header.
// Open has applied and removed any file there before.
func openJournalFile(path string) (*os.File, error) {
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

// doneChans are the channels on which queued writes hear their outcome.
var doneChans = sync.Pool{New: func() any { return make(chan error, 1) }}

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
	done := doneChans.Get().(chan error)
	w.done = done
	j.queue = append(j.queue, w)
	j.mu.Unlock()
	err := <-done
	doneChans.Put(done)
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
		f, oerr := openJournalFile(j.path[i])
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

// flush applies the pending records to bbolt and empties the journal file
// that held them.
func (db *DB) flush() error {
	j := db.journal
	j.flushMu.Lock()
	defer j.flushMu.Unlock()

	j.mu.Lock()
	if len(j.pending) == 0 {
		j.mu.Unlock()
		return nil
	}
	old := j.active
	j.active = 1 - old
	// A write to the old file that started before the switch ends there:
	// its records belong to this batch, since the file is emptied after.
	for j.writingTo == old {
		j.settled.Wait()
	}
	batch := j.pending
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
		if first {
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
	// Every record of the old file is in bbolt now: records after lastSeq
	// went to the other file.
	var terr error
	if f := j.files[old]; f != nil && j.sizes[old] > fileHeaderLen {
		if terr = f.Truncate(fileHeaderLen); terr == nil {
			j.sizes[old] = fileHeaderLen
		}
	}
	j.mu.Unlock()
	if recovered {
		db.logf("storage: %s takes writes again; the journal is applied", db.path)
	}
	db.reportDropped(res.dropped)
	if terr != nil {
		return fmt.Errorf("storage: empty journal of %s: %w", db.path, terr)
	}
	db.releaseMapped()

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
	err := db.bolt.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketDeliveries).Cursor().Last()
		last = bytes.Clone(k)
		return nil
	})
	return last, err
}

func (db *DB) reportDropped(n int) {
	if n > 0 {
		db.logf("storage: %d attempt(s) in the journal of %s were not recorded: their delivery is not in the database (removed by retention, or its own record was lost)", n, db.path)
	}
}

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
	for {
		var res applied
		bad := -1
		var badErr error
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			a := newApplyTx(tx, len(recs), known)
			for i := range recs {
				if err := a.record(i, &recs[i]); err != nil {
					bad, badErr = i, err
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

func newApplyTx(tx *bolt.Tx, recs int, known []byte) *applyTx {
	a := &applyTx{tx: tx, known: known, deliveries: tx.Bucket(bucketDeliveries), bodies: tx.Bucket(bucketBodies),
		summaries: tx.Bucket(bucketSummaries), attempts: tx.Bucket(bucketAttempts), runs: tx.Bucket(bucketRuns),
		arena: make([]byte, 0, 128*recs), sums: make(map[string]int, recs/2), dirty: make([]dirtySummary, 0, recs/2)}
	for _, b := range []*bolt.Bucket{a.deliveries, a.bodies, a.summaries, a.attempts} {
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
	if err := a.bodies.Put(e.id, e.body); err != nil {
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
	arena, changed, err := appendWithAttempt(a.arena, v, o)
	if err != nil {
		return err
	}
	a.arena = arena
	var seq [4]byte
	binary.BigEndian.PutUint32(seq[:], uint32(o.seq))
	if err := a.attempts.Put(a.keep(id, []byte{0}, seq[:]), enc); err != nil {
		return err
	}
	if changed {
		a.setSummary(key, id, a.arena[start:len(a.arena):len(a.arena)])
	}
	return nil
}

// reject keeps r in the rejected file beside the database and reports it.
func (db *DB) reject(r *jrec, why error) error {
	path := db.path + ".rejected"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("keep a record the database refused (%v): %w", why, err)
	}
	defer f.Close()
	var b []byte
	if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
		b = appendFileHeader(nil)
	}
	if _, err := f.Write(append(b, r.raw...)); err != nil {
		return fmt.Errorf("keep a record the database refused (%v): %w", why, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("keep a record the database refused (%v): %w", why, err)
	}
	db.logf("storage: could not apply a journaled record to %s (%v); it is kept in %s and the other records were applied", db.path, why, path)
	return nil
}

// scratch holds the buffers records are encoded in before they are copied,
// at their exact size, into their own.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

func putScratch(p *[]byte, b []byte) {
	if cap(b) <= 64<<10 {
		*p = b[:0]
		scratch.Put(p)
	}
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// putRecord returns the journal record of d, unnumbered: its seq is
// written when it is queued. The record holds its own copy of d's
// fields, which the caller may change once PutDelivery returns.
func putRecord(d *devhook.Delivery) jrec {
	sp := scratch.Get().(*[]byte)
	b := appendMeta((*sp)[:0], d, false)
	metaLen := len(b)
	c := *d
	c.Attempts = nil
	s := c.Summarize()
	b = appendSummary(b, &s)
	meta, summary := b[:metaLen], b[metaLen:]
	// The run id comes from a body anyone may post: one that cannot be a
	// key (bbolt refuses keys over 32 KiB) must not make the delivery
	// impossible to record. It is still in the summary, just not indexed.
	runID := d.Event.RunID
	if len(runID) > maxRunIDLen || strings.IndexByte(runID, 0) >= 0 {
		runID = ""
	}
	size := recHeaderLen + 9
	for _, n := range []int{len(d.ID), len(meta), len(summary), len(runID), len(d.Body)} {
		size += uvarintLen(n) + n
	}
	enc := encoder{make([]byte, recHeaderLen+8, size)}
	enc.byte(recPut)
	enc.str(d.ID)
	idEnd := len(enc.b)
	enc.bytes(meta)
	metaEnd := len(enc.b)
	enc.bytes(summary)
	summaryEnd := len(enc.b)
	enc.str(runID)
	enc.bytes(d.Body)
	metaN, summaryN := len(meta), len(summary)
	putScratch(sp, b)
	raw := enc.b
	slice := func(end, n int) []byte { return raw[end-n : end : end] }
	return jrec{kind: recPut, raw: raw, key: d.ID, put: encodedDelivery{
		id:      slice(idEnd, len(d.ID)),
		meta:    slice(metaEnd, metaN),
		summary: slice(summaryEnd, summaryN),
		body:    slice(len(raw), len(d.Body)),
		runID:   runID,
	}}
}

// journalPut journals d; created is false when the delivery is recorded
// already.
func (db *DB) journalPut(d *devhook.Delivery) (created bool, err error) {
	rec := putRecord(d)
	j := db.journal
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
		err = db.bolt.View(func(tx *bolt.Tx) error {
			exists = tx.Bucket(bucketDeliveries).Get(rec.put.id) != nil
			return nil
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
	sp := scratch.Get().(*[]byte)
	tail := appendAttemptTail((*sp)[:0], &a)
	defer putScratch(sp, tail)
	b := make([]byte, recHeaderLen+8, recHeaderLen+9+binary.MaxVarintLen64+len(id)+binary.MaxVarintLen64+1+binary.MaxVarintLen64+len(tail))
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
		err := db.bolt.View(func(tx *bolt.Tx) error {
			v := tx.Bucket(bucketSummaries).Get(b[idEnd-len(id) : idEnd])
			if v == nil {
				return notFound(id)
			}
			var err error
			s, err = scanSummary(v)
			return err
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
	b = binary.AppendUvarint(b, uint64(1+seqLen+len(tail)))
	encAt := len(b)
	b = append(b, formatAttempt)
	b = append(b, seq[:seqLen]...)
	b = append(b, tail...)
	rec := jrec{kind: recAttempt, raw: b, key: id, id: b[idEnd-len(id) : idEnd : idEnd],
		att: outcomeOf(&a), enc: b[encAt:len(b):len(b)]}
	st.attempts = a.Seq
	if err := db.write(jwrite{rec: rec, prev: prev, had: had}, st); err != nil {
		return devhook.Attempt{}, err
	}
	db.afterAppend()
	return a, nil
}

func decodePut(b []byte) (encodedDelivery, error) {
	dec := decoder{b: b}
	e := encodedDelivery{id: dec.raw(), meta: dec.raw(), summary: dec.raw()}
	e.runID = dec.str()
	e.body = dec.raw()
	if dec.err != nil {
		return encodedDelivery{}, dec.err
	}
	if e.body == nil {
		e.body = []byte{}
	}
	return e, nil
}

// decodeRecord decodes the record raw, whose header has been checked.
func decodeRecord(raw []byte) (jrec, error) {
	b := raw[recHeaderLen:]
	if len(b) < 9 {
		return jrec{}, errCorrupt
	}
	r := jrec{seq: binary.BigEndian.Uint64(b), kind: b[8], raw: raw}
	b = b[9:]
	switch r.kind {
	case recPut:
		e, err := decodePut(b)
		if err != nil {
			return jrec{}, err
		}
		r.put, r.key = e, string(e.id)
	case recAttempt:
		dec := decoder{b: b}
		r.id = dec.raw()
		r.enc = dec.raw()
		if dec.err != nil || len(dec.b) != 0 {
			return jrec{}, errCorrupt
		}
		a, err := decodeAttempt(r.enc)
		if err != nil {
			return jrec{}, err
		}
		r.att, r.key = outcomeOf(&a), string(r.id)
	default:
		return jrec{}, errCorrupt
	}
	return r, nil
}

// frameState is what frameAt finds at an offset of a journal file.
type frameState int

const (
	frameOK      frameState = iota
	frameTorn               // the file ends inside the record
	frameBadHead            // no marker, or a header whose checksum fails
	frameBadBody            // an intact header, and a body whose checksum fails
)

// frameAt checks the record at the start of b and returns its length,
// header included (for frameOK and frameBadBody).
func frameAt(b []byte) (int, frameState) {
	if len(b) < recHeaderLen {
		var m [4]byte
		binary.BigEndian.PutUint32(m[:], recMarker)
		if bytes.HasPrefix(m[:], b[:min(len(b), 4)]) {
			return 0, frameTorn
		}
		return 0, frameBadHead
	}
	if binary.BigEndian.Uint32(b) != recMarker || crc32.Checksum(b[:12], crcTable) != binary.BigEndian.Uint32(b[12:]) {
		return 0, frameBadHead
	}
	n := binary.BigEndian.Uint32(b[4:])
	if n > recMaxLen {
		return 0, frameBadHead
	}
	if int(n) > len(b)-recHeaderLen {
		return 0, frameTorn
	}
	size := recHeaderLen + int(n)
	if crc32.Checksum(b[recHeaderLen:size], crcTable) != binary.BigEndian.Uint32(b[8:]) {
		return size, frameBadBody
	}
	return size, frameOK
}

// journalScan is what a journal file holds.
type journalScan struct {
	recs    []jrec
	foreign string // why the file was not read at all; "" if it was
	damaged string // what was wrong with it, when records were skipped
}

// errNewerJournal is a journal written by a newer devhook.
type errNewerJournal uint32

func (e errNewerJournal) Error() string {
	return fmt.Sprintf("journal format %d, this devhook reads %d", uint32(e), journalVersion)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// scanJournal returns the intact records of a journal file's contents.
func scanJournal(data []byte) (journalScan, error) {
	var s journalScan
	header := appendFileHeader(nil)
	switch {
	case len(data) < fileHeaderLen:
		if bytes.HasPrefix(header, data) || allZero(data) {
			return s, nil // created, and the process killed before its header was written
		}
		s.foreign = "it is too short for a journal header and not the start of one"
		return s, nil
	case string(data[:len(journalMagic)]) != journalMagic:
		s.foreign = "it does not start with devhook's journal magic"
		return s, nil
	}
	version := binary.BigEndian.Uint32(data[8:])
	headerOK := crc32.Checksum(data[:12], crcTable) == binary.BigEndian.Uint32(data[12:])
	switch {
	case headerOK && version > journalVersion:
		return s, errNewerJournal(version)
	case headerOK && version < 1:
		s.foreign = fmt.Sprintf("it has the unknown journal format %d", version)
		return s, nil
	case !headerOK:
		s.damaged = "its header is damaged"
	}
	skipped := 0
	for off := fileHeaderLen; off < len(data); {
		size, st := frameAt(data[off:])
		if st == frameOK {
			r, err := decodeRecord(data[off : off+size])
			if err == nil {
				s.recs = append(s.recs, r)
				off += size
				continue
			}
			st = frameBadBody // verified, yet not a record we know: skip it
		}
		if st == frameTorn || allZero(data[off:]) {
			break
		}
		next := len(data)
		if st == frameBadBody {
			next = off + size // the header is intact: so is the length
		} else if at := resync(data[off+1:]); at >= 0 {
			next = off + 1 + at
		}
		skipped += next - off
		off = next
	}
	if skipped > 0 {
		if s.damaged != "" {
			s.damaged += "; "
		}
		s.damaged += fmt.Sprintf("%d damaged bytes skipped", skipped)
	}
	return s, nil
}

// resync returns the offset of the first intact record in b, or -1.
func resync(b []byte) int {
	var m [4]byte
	binary.BigEndian.PutUint32(m[:], recMarker)
	for off := 0; ; {
		i := bytes.Index(b[off:], m[:])
		if i < 0 {
			return -1
		}
		off += i
		if size, st := frameAt(b[off:]); st == frameOK {
			if _, err := decodeRecord(b[off : off+size]); err == nil {
				return off
			}
		}
		off++
	}
}

// replayJournal applies what a previous process left in the journal files
// and removes them, or sets them aside when they are damaged. Open calls it
// before anything else runs.
func (db *DB) replayJournal() error {
	j := db.journal
	type file struct {
		path string
		scan journalScan
	}
	var files []file
	var recs []jrec
	for _, p := range j.path {
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("storage: read journal %s: %w", p, err)
		}
		s, err := scanJournal(data)
		if newer := errNewerJournal(0); errors.As(err, &newer) {
			return devhook.Errorf(devhook.EINVALID, "storage: %s was written by a newer devhook (%v): upgrade devhook; the journal was left untouched", p, err)
		}
		files = append(files, file{p, s})
		recs = append(recs, s.recs...)
	}
	if len(files) == 0 {
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
	dropped := 0
	for len(recs) > 0 {
		n := min(len(recs), 4*journalRecords)
		res, err := db.apply(recs[:n], nil)
		if err != nil {
			return fmt.Errorf("storage: apply the journal of %s (it is kept, and applied when devhook next opens the file; is the disk full?): %w", db.path, err)
		}
		dropped += res.dropped
		recs = recs[n:]
	}
	db.reportDropped(dropped)
	for _, f := range files {
		switch {
		case f.scan.foreign != "":
			aside, err := db.setAside(f.path)
			if err != nil {
				return err
			}
			db.logf("storage: %s is not a devhook journal that this devhook can read (%s); nothing was read from it and it is kept as %s", f.path, f.scan.foreign, aside)
		case f.scan.damaged != "":
			aside, err := db.setAside(f.path)
			if err != nil {
				return err
			}
			db.logf("storage: journal %s was damaged (%s): its %d intact records were applied, and the damaged file is kept as %s", f.path, f.scan.damaged, len(f.scan.recs), aside)
		default:
			if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("storage: remove journal %s: %w", f.path, err)
			}
		}
	}
	return nil
}

// setAside renames the file at path to path.damaged-<UTC time>, with a
// number after it if that name is taken, and returns the new name.
func (db *DB) setAside(path string) (string, error) {
	base := path + ".damaged-" + db.now().UTC().Format("20060102T150405Z")
	aside := base
	for n := 2; ; n++ {
		if _, err := os.Lstat(aside); errors.Is(err, os.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s-%d", base, n)
	}
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("storage: set damaged journal %s aside: %w", path, err)
	}
	return aside, nil
}

// closeJournal stops the flusher, applies what is pending and removes the
// files.
func (db *DB) closeJournal() error {
	j := db.journal
	j.stopOnce.Do(func() { close(j.stop) })
	<-j.done
	j.mu.Lock()
	j.closed = true
	for j.writing { // records queued before Close are written first
		j.settled.Wait()
	}
	j.mu.Unlock()
	err := db.flush()
	if err == nil {
		// Commits are not fsynced; a clean close leaves the file durable
		// before the journal that also holds its last writes goes.
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
