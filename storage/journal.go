package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
// write(2). So a write appends a record to the journal and returns: from
// then on it survives the process being killed, as a NoSync bbolt commit
// does (the journal is never fsynced: a power loss may lose the last
// records). A goroutine owned by the DB applies the journal to bbolt in
// batches, at most journalDelay later. Reads never write: they read a
// bbolt read transaction plus the records still pending in memory (see
// pending.go). Open applies what a killed process left in the journal.
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
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// jrec is a journaled record that bbolt does not have yet.
type jrec struct {
	seq  uint64
	kind byte
	raw  []byte           // the record as it is in the file, header included
	put  *encodedDelivery // recPut: slices of raw
	id   []byte           // recAttempt: a slice of raw
	att  devhook.Attempt  // recAttempt: the fields a summary shows
	enc  []byte           // recAttempt: the encoded attempt, a slice of raw
}

// jstate is what the journal knows of a delivery whose records are
// pending: how many attempts it has.
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
	pending []jrec // never changed in place: readers keep a copy of the slice
	bytes   int
	ids     map[string]*jstate
	first   time.Time // when the oldest pending record was appended
	failed  error     // the last flush's error, until a flush succeeds
	closed  bool

	flushMu sync.Mutex // one flush at a time

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

// appendLocked frames rec.raw, writes it to the active file and makes rec
// pending. j.mu is held.
func (db *DB) appendLocked(rec jrec) error {
	j := db.journal
	if j.closed {
		return errClosed
	}
	if j.failed != nil && j.bytes >= journalMaxBytes {
		return fmt.Errorf("%d MiB of records wait for a database that cannot take them: %w", j.bytes>>20, j.failed)
	}
	i := j.active
	if j.files[i] == nil {
		f, err := openJournalFile(j.path[i])
		if err != nil {
			return err
		}
		j.files[i], j.sizes[i] = f, fileHeaderLen
	}
	b := rec.raw
	frame(b)
	if _, err := j.files[i].WriteAt(b, j.sizes[i]); err != nil {
		// Cut a partial record off, so that the records after it replay.
		_ = j.files[i].Truncate(j.sizes[i])
		return fmt.Errorf("write journal: %w", err)
	}
	j.sizes[i] += int64(len(b))
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

// afterAppend applies the pending records itself when too many are
// waiting. The record just appended is journaled whatever happens: a
// failure here is bbolt's, retried later, and shows in the next write.
func (db *DB) afterAppend() {
	j := db.journal
	j.mu.Lock()
	over := j.bytes > journalMaxBytes && j.failed == nil
	j.mu.Unlock()
	if over {
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
	batch := j.pending
	if len(batch) == 0 {
		j.mu.Unlock()
		return nil
	}
	old := j.active
	j.active = 1 - old
	lastSeq := batch[len(batch)-1].seq
	j.mu.Unlock()

	res, err := db.apply(batch)

	j.mu.Lock()
	if err != nil {
		first := j.failed == nil
		j.failed = fmt.Errorf("storage: apply journal to %s: %w", db.path, err)
		j.mu.Unlock()
		if first {
			db.logf("storage: cannot write to %s (%v); deliveries stay in its journal and are applied once it takes writes again", db.path, err)
		}
		return fmt.Errorf("storage: apply journal to %s: %w", db.path, err)
	}
	recovered := j.failed != nil
	j.failed = nil
	j.pending = append(j.pending[:0:0], j.pending[len(batch):]...)
	j.bytes = 0
	for _, r := range j.pending {
		j.bytes += len(r.raw)
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
func (db *DB) apply(recs []jrec) (applied, error) {
	owned := false
	for {
		var res applied
		bad := -1
		var badErr error
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			res = applied{}
			for i := range recs {
				if err := applyRecord(tx, &recs[i], &res); err != nil {
					bad, badErr = i, err
					return err
				}
			}
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

// applyRecord writes r to tx.
func applyRecord(tx *bolt.Tx, r *jrec, res *applied) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("bbolt panicked: %v", p)
		}
	}()
	switch r.kind {
	case recPut:
		ok, err := r.put.put(tx)
		if err != nil {
			return fmt.Errorf("delivery %s: %w", r.put.id, err)
		}
		if ok {
			res.created++
		}
	case recAttempt:
		ok, err := applyAttempt(tx, r.id, &r.att, r.enc)
		if err != nil {
			return fmt.Errorf("attempt %d of delivery %s: %w", r.att.Seq, r.id, err)
		}
		if !ok {
			res.dropped++
		}
	}
	return nil
}

// applyAttempt stores attempt a (encoded as enc) of delivery id and makes
// it the summary's last attempt unless a later one is there already. A
// delivery that is gone (pruned) takes no attempt: ok is false.
func applyAttempt(tx *bolt.Tx, id []byte, a *devhook.Attempt, enc []byte) (ok bool, err error) {
	summaries := tx.Bucket(bucketSummaries)
	v := summaries.Get(id)
	if v == nil {
		return false, nil
	}
	s, err := decodeSummary(v)
	if err != nil {
		return false, err
	}
	attempts := tx.Bucket(bucketAttempts)
	attempts.FillPercent = appendFill
	if err := attempts.Put(attemptKey(id, a.Seq), enc); err != nil {
		return false, err
	}
	if !withAttempt(&s, a) {
		return true, nil
	}
	summaries.FillPercent = appendFill
	return true, summaries.Put(id, appendSummary(make([]byte, 0, len(v)+16), &s))
}

// withAttempt makes a the last attempt of s unless s has a later one, and
// reports whether it did.
func withAttempt(s *devhook.Summary, a *devhook.Attempt) bool {
	if a.Seq <= s.Attempts {
		return false
	}
	s.Attempts = a.Seq
	s.Status, s.Duration, s.Error = a.Status, a.Duration, a.Error
	return true
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

// journalPut journals e; created is false when the delivery is recorded
// already.
func (db *DB) journalPut(e *encodedDelivery) (created bool, err error) {
	j := db.journal
	enc := encoder{make([]byte, recHeaderLen, recHeaderLen+9+20+len(e.id)+len(e.meta)+len(e.summary)+len(e.runID)+len(e.body))}
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
	seq := j.seq + 1
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
		j.mu.Unlock()
		return false, derr
	}
	if err := db.appendLocked(jrec{seq: seq, kind: recPut, raw: enc.b, put: own}); err != nil {
		j.mu.Unlock()
		return false, err
	}
	j.seq = seq
	j.ids[string(e.id)] = &jstate{lastSeq: seq}
	j.mu.Unlock()
	db.afterAppend()
	return true, nil
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
	attEnc := appendAttempt(nil, &a)
	enc := encoder{make([]byte, recHeaderLen, recHeaderLen+9+20+len(key)+len(attEnc))}
	seq := j.seq + 1
	enc.b = binary.BigEndian.AppendUint64(enc.b, seq)
	enc.byte(recAttempt)
	enc.bytes(key)
	idEnd := len(enc.b)
	enc.bytes(attEnc)
	raw := enc.b
	rec := jrec{seq: seq, kind: recAttempt, raw: raw, id: raw[idEnd-len(key) : idEnd : idEnd],
		att: devhook.Attempt{Seq: a.Seq, Status: a.Status, Duration: a.Duration, Error: a.Error},
		enc: raw[len(raw)-len(attEnc):]}
	if err := db.appendLocked(rec); err != nil {
		j.mu.Unlock()
		return devhook.Attempt{}, err
	}
	j.seq = seq
	st.attempts = a.Seq
	st.lastSeq = seq
	j.ids[id] = st
	j.mu.Unlock()
	db.afterAppend()
	return a, nil
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
		r.put = e
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
		r.att = a
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
		res, err := db.apply(recs[:n])
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
