package storage

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"time"

	"github.com/devhook/devhook"
)

// Recovering the journal: what Open does with a journal file it finds.
//
//   - intact, or cut short at its end (a torn tail, from a process killed in
//     the middle of a write), or followed by records of an earlier round
//     (format 2: numbered below its header's start, or not after the
//     record before them): applies every record of the file's last round,
//     then removes the file. A torn tail was never acknowledged and is not
//     reported; nor are an earlier round's records, which bbolt has.
//   - damaged in the middle (a record whose checksum fails, followed by
//     intact ones of the same round): applies every intact record,
//     skipping the damaged ones by their length when their header is
//     intact (format 1), else by searching for the next marker whose header
//     and body verify (and, format 2, whose seq is above the last one
//     read); then renames the file to <name>.damaged-<UTC time> and reports
//     it through Config.Logf. Evidence is never deleted.
//   - not starting with the magic (not ours, its first bytes damaged, or
//     a journal of a devhook from before the header): reads nothing from
//     it, renames it the same way and reports it. Refusing to open would
//     stop devhook until someone moves the file; setting it aside keeps the
//     evidence and the store working. A file of zeros alone is one created
//     and killed before its header was written: nothing to read, nothing
//     to report.
//   - written by a newer devhook (a verified header with a higher version):
//     Open fails, telling the user to upgrade, and touches nothing.

// journalScan is what a journal file holds.
type journalScan struct {
	recs    []jrec
	foreign string // why the file was not read at all; "" if it was
	damaged string // what was wrong with it, when records were skipped
	// hdr is where its records start (fileHeaderLen: format 1), end where
	// the last one read ends.
	hdr, end int
	start    uint64 // format 2: its header's start seq
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// foundJournal is a journal file Open found, and what it holds.
type foundJournal struct {
	path string
	scan journalScan
}

// scanJournal returns the intact records of a journal file's contents.
func scanJournal(data []byte) (journalScan, error) {
	s := journalScan{hdr: fileHeaderLen2, end: fileHeaderLen2}
	if allZero(data) {
		return s, nil // created, and the process killed before its header was written
	}
	if len(data) < fileHeaderLen {
		if bytes.HasPrefix(appendFileHeader(nil), data) || bytes.HasPrefix(appendVersionHeader(nil, journalVersion), data) {
			return s, nil // the same, its header cut short
		}
		s.foreign = "it is too short for a journal header and not the start of one"
		return s, nil
	}
	if string(data[:len(journalMagic)]) != journalMagic {
		s.foreign = "it does not start with devhook's journal magic"
		return s, nil
	}
	version := binary.BigEndian.Uint32(data[8:])
	headerOK := crc32.Checksum(data[:12], crcTable()) == binary.BigEndian.Uint32(data[12:])
	start, hwm, startOK := readStart(data)
	s.start = start
	switch {
	case headerOK && version > journalVersion:
		return s, errNewerJournal(version)
	case headerOK && version < 1:
		s.foreign = fmt.Sprintf("it has the unknown journal format %d", version)
	case headerOK && version == 1:
		scanRecords1(data, &s)
	case headerOK && len(data) < fileHeaderLen2:
		// Its header cut short: no record can follow.
	case headerOK && !startOK:
		// Its start sequence number is unknown: every intact record is
		// read, an earlier round's too (bbolt has them: applying them
		// again changes nothing).
		s.damaged = "its header's start sequence number is damaged"
		scanRecords2(data, 0, &s)
	case headerOK:
		scanRecords2(data, start, &s)
		checkTail2(data, hwm, &s)
	case startOK: // its version unknown, its start verified: format 2
		s.damaged = "its header is damaged"
		scanRecords2(data, start, &s)
		checkTail2(data, hwm, &s)
	default:
		s.damaged = "its header is damaged"
		scanRecords1(data, &s)
	}
	return s, nil
}

// scanRecords1 reads the records of a format 1 file: to its end, skipping
// damage.
func scanRecords1(data []byte, s *journalScan) {
	s.hdr, s.end = fileHeaderLen, fileHeaderLen
	skipped := 0
	for off := fileHeaderLen; off < len(data); {
		size, st := frameAt(data[off:])
		if st == frameOK {
			r, err := decodeRecord(data[off : off+size])
			if err == nil {
				s.recs = append(s.recs, r)
				off += size
				s.end = off
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
		} else if at := resync(data[off+1:], 0); at >= 0 {
			next = off + 1 + at
		}
		skipped += next - off
		off = next
	}
	s.noteSkipped(skipped)
}

// scanRecords2 reads the records of a format 2 file's round that starts
// at seq start: each the one after the one before, until one is not. An
// intact record further on with a greater seq makes what lies between
// damage; without one, the round ends there.
func scanRecords2(data []byte, start uint64, s *journalScan) {
	skipped := 0
	prev := max(start, 1) - 1 // the first record may be numbered above start
	first := true
	for off := fileHeaderLen2; off < len(data); {
		size, st := frameAt(data[off:])
		if st == frameOK {
			r, err := decodeRecord(data[off : off+size])
			if err == nil && (r.seq == prev+1 || first && r.seq > prev) {
				s.recs = append(s.recs, r)
				prev, first = r.seq, false
				off += size
				s.end = off
				continue
			}
		}
		at := resync(data[off+1:], prev)
		if at < 0 {
			break // the end of the round
		}
		skipped += 1 + at
		off += 1 + at
		first = true // whatever its seq, as long as it is above prev
	}
	s.noteSkipped(skipped)
}

// checkTail2 looks at what a format 2 file holds after its last round's
// records (journal_format.go): up to the high-water mark hwm, past the
// torn record there may be, a record whose header is intact and whose body
// is not is damage; after it, anything but zeros is (but for the start of
// a record that the end of the file cuts short: a torn write).
func checkTail2(data []byte, hwm int, s *journalScan) {
	hwm = min(max(hwm, s.end), len(data))
	off := s.end
	if size, st := frameAt(data[off:hwm]); st == frameBadBody {
		off += size // the record a kill cut short
	} else if st == frameTorn {
		off = hwm
	}
	var m [4]byte
	binary.BigEndian.PutUint32(m[:], recMarker)
	damaged := 0
	for off < hwm {
		i := bytes.Index(data[off:hwm], m[:])
		if i < 0 {
			break
		}
		off += i
		size, st := frameAt(data[off:hwm])
		switch st {
		case frameOK:
			off += size
		case frameBadBody:
			damaged += size
			off += size
		default:
			off++
		}
	}
	if damaged > 0 {
		s.note(fmt.Sprintf("%d bytes of records of an earlier round damaged", damaged))
	}
	if i := slices.IndexFunc(data[hwm:], func(c byte) bool { return c != 0 }); i >= 0 {
		if _, st := frameAt(data[hwm+i:]); st == frameTorn {
			return // a record cut short by the end of the file: a torn write
		}
		last := len(data) - 1
		for data[last] == 0 {
			last--
		}
		s.note(fmt.Sprintf("%d bytes after the end of what was written to it are not zeros", last+1-(hwm+i)))
	}
}

func (s *journalScan) note(what string) {
	if s.damaged != "" {
		s.damaged += "; "
	}
	s.damaged += what
}

func (s *journalScan) noteSkipped(n int) {
	if n > 0 {
		if s.damaged != "" {
			s.damaged += "; "
		}
		s.damaged += fmt.Sprintf("%d damaged bytes skipped", n)
	}
}

// resync returns the offset of the first intact record in b whose seq is
// above after, or -1.
func resync(b []byte, after uint64) int {
	var m [4]byte
	binary.BigEndian.PutUint32(m[:], recMarker)
	for off := 0; ; {
		i := bytes.Index(b[off:], m[:])
		if i < 0 {
			return -1
		}
		off += i
		// The seq is read before the body's checksum is checked: an
		// earlier round's records, which a file's tail holds by the
		// thousand, are passed over without one.
		if h := b[off:]; len(h) >= recHeaderLen+8 && binary.BigEndian.Uint64(h[recHeaderLen:]) > after {
			if size, st := frameAt(h); st == frameOK {
				if r, err := decodeRecord(h[:size]); err == nil && r.seq > after {
					return off
				}
			}
		}
		off++
	}
}

// replayJournal applies what a previous process left in the journal files
// and removes them, or sets them aside when they are damaged. Open calls it
// before anything else runs.
func (db *DB) replayJournal() error {
	files, recs, err := db.scanJournals()
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return nil
	}
	dropped := 0
	for rest := recs; len(rest) > 0; {
		n := min(len(rest), 4*journalRecords)
		res, err := db.apply(rest[:n], nil)
		if err != nil && spaceError(err) {
			// A full disk: the store opens all the same, the records
			// pending, and the flusher applies them once it can.
			return db.keepJournal(recs, files, err)
		}
		if err != nil {
			return fmt.Errorf("storage: apply the journal of %s (it is kept, and applied when devhook next opens the file): %w", db.path, err)
		}
		dropped += res.dropped
		rest = rest[n:]
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
	aside := asideName(path, db.now())
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("storage: set damaged journal %s aside: %w", path, err)
	}
	return aside, nil
}

// keepJournal is what Open does when the journal a previous process left
// cannot be applied because the disk is full (err): its records become
// pending, as if this process had written them; the files stay, and new
// records are appended to them; the flusher applies them all once bbolt
// takes writes. Applying a record twice (a process killed after a flush
// applied it, before the file was emptied) changes nothing.
func (db *DB) keepJournal(recs []jrec, files []foundJournal, err error) error {
	j := db.journal
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, f := range files {
		if f.scan.foreign == "" && f.scan.damaged == "" {
			continue
		}
		// Its intact records are pending; the file is evidence, which
		// the flush would empty.
		aside, err := db.setAside(f.path)
		if err != nil {
			return err
		}
		db.logf("storage: journal %s was damaged or not devhook's (%s%s): its %d intact records wait to be applied, and the file is kept as %s", f.path, f.scan.foreign, f.scan.damaged, len(f.scan.recs), aside)
	}
	for _, jf := range files {
		i := slices.Index(j.path[:], jf.path)
		if i < 0 || jf.scan.foreign != "" || jf.scan.damaged != "" || len(jf.scan.recs) == 0 {
			continue // set aside above, or nothing to keep: written afresh
		}
		// Records are appended after its own, in its own format, until
		// it is applied and removed (recycle).
		last := jf.scan.recs[len(jf.scan.recs)-1].seq
		f, err := openInherited(jf.path, int64(jf.scan.hdr), int64(jf.scan.end), jf.scan.start, last)
		if err != nil {
			return fmt.Errorf("storage: %w", err)
		}
		j.files[i] = f
	}
	// New records go to a file of their own, or after the newest records.
	j.active = 0
	if o := j.files[1]; j.files[0] != nil && (o == nil || o.last > j.files[0].last) {
		j.active = 1
	}
	j.loadPending(recs)
	j.failed = fmt.Errorf("storage: apply journal to %s: %w", db.path, err)
	j.setOverMax()
	db.logf("storage: cannot write to %s (%v); the %d records of its journal stay there, and are applied once it takes writes again", db.path, err, len(recs))
	return nil
}

// loadPending makes recs, read from the journal files in seq order,
// pending. j.mu is held, or the journal not yet shared.
func (j *journal) loadPending(recs []jrec) {
	j.pending = recs
	j.bytes = 0
	for _, r := range recs {
		j.bytes += len(r.raw)
		st := j.ids[r.key]
		st.lastSeq = r.seq
		if r.kind == recAttempt {
			st.attempts = max(st.attempts, r.att.seq)
		}
		j.ids[r.key] = st
		j.seq = max(j.seq, r.seq)
	}
	if len(recs) > 0 {
		j.first = time.Now()
		j.poke()
	}
}

// readJournal reads, for a read-only Open, what a previous process left
// in the journal files, without applying, removing or setting aside
// anything: the records become pending, so that reads show them, and Logf
// says what was found and that devhook listen applies it.
func (db *DB) readJournal() error {
	files, recs, err := db.scanJournals()
	if err != nil {
		return err
	}
	for _, f := range files {
		switch s := f.scan; {
		case s.foreign != "":
			db.logf("storage: %s is not a devhook journal that this devhook can read (%s); nothing was read from it, and it was left as it is: devhook listen sets it aside", f.path, s.foreign)
		case s.damaged != "":
			db.logf("storage: journal %s is damaged (%s): its %d intact records are shown, and it was left as it is: devhook listen applies them and sets the file aside", f.path, s.damaged, len(s.recs))
		case len(s.recs) > 0:
			db.logf("storage: journal %s holds %d records that %s does not have yet (devhook stopped without closing it): they are shown, not applied; devhook listen applies them", f.path, len(s.recs), db.path)
		}
	}
	db.journal.loadPending(recs)
	return nil
}

// scanJournals reads the journal files there are, and returns each with
// what its scan found, and all their records in sequence order. A journal
// a newer devhook wrote is an error, and nothing is touched.
func (db *DB) scanJournals() ([]foundJournal, []jrec, error) {
	var files []foundJournal
	var recs []jrec
	for _, p := range db.journal.path {
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("storage: read journal %s: %w", p, err)
		}
		s, err := scanJournal(data)
		if newer := errNewerJournal(0); errors.As(err, &newer) {
			return nil, nil, devhook.Errorf(devhook.EINVALID, "storage: %s was written by a newer devhook (%w): upgrade devhook; the journal was left untouched", p, err)
		}
		files = append(files, foundJournal{p, s})
		recs = append(recs, s.recs...)
	}
	slices.SortFunc(recs, func(a, b jrec) int { return cmp.Compare(a.seq, b.seq) })
	return files, recs, nil
}
