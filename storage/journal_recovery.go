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

// journalScan is what a journal file holds.
type journalScan struct {
	recs    []jrec
	foreign string // why the file was not read at all; "" if it was
	damaged string // what was wrong with it, when records were skipped
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// journalFile is a journal file Open found, and what it holds.
type journalFile struct {
	path string
	scan journalScan
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
	headerOK := crc32.Checksum(data[:12], crcTable()) == binary.BigEndian.Uint32(data[12:])
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
func (db *DB) keepJournal(recs []jrec, files []journalFile, err error) error {
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
		// Its records lie end to end after the header: a torn tail is
		// cut off, so that the records appended next are read back.
		end := int64(fileHeaderLen)
		for _, r := range jf.scan.recs {
			end += int64(len(r.raw))
		}
		f, err := os.OpenFile(jf.path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("storage: open journal %s: %w", jf.path, err)
		}
		if err := f.Truncate(end); err != nil {
			f.Close()
			return fmt.Errorf("storage: open journal %s: %w", jf.path, err)
		}
		j.files[i], j.sizes[i] = f, end
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
func (db *DB) scanJournals() ([]journalFile, []jrec, error) {
	var files []journalFile
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
			return nil, nil, devhook.Errorf(devhook.EINVALID, "storage: %s was written by a newer devhook (%v): upgrade devhook; the journal was left untouched", p, err)
		}
		files = append(files, journalFile{p, s})
		recs = append(recs, s.recs...)
	}
	slices.SortFunc(recs, func(a, b jrec) int { return cmp.Compare(a.seq, b.seq) })
	return files, recs, nil
}
