package storage

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
)

// A journal file, open for writing. It is mapped into the process shared
// (journal_mmap_unix.go), and a record is written by copying it into the
// mapping: no system call per record. A process killed right after the
// copy loses nothing, since the kernel has the page; a power loss may lose
// what the kernel had not written back yet, as with write(2) and no fsync,
// which is what the journal did before (see journal.go).
//
// The file grows in steps of journalGrow, by ftruncate, so it is sparse:
// a page takes room on the disk once written. A copy into a page the disk
// has no room for faults (SIGBUS), as writing past the end of the file
// would; debug.SetPanicOnFault turns the fault into a panic that put
// recovers, and the record is then written with pwrite, which either
// succeeds (the fault was passing) or returns the disk's error: ENOSPC,
// EDQUOT, EIO. Where the file cannot be mapped (not a unix, or mmap
// refused) every record is written with pwrite, at the same place: the
// file is the same.
//
// A file is reused in place (journal_format.go, format 2): once bbolt has
// every record it holds, its header gets a new start sequence number,
// above every record in it, and records are written from the start again;
// nothing is truncated or zeroed. Pages written once stay the file's,
// which is why the journal's files take their largest round's room on the
// disk until devhook closes them (a round beyond journalTrim is given
// back when the file is reused).

const (
	// journalGrow is the step the files grow by.
	journalGrow = 1 << 20
	// journalMapped is how much of a file is mapped at first: address
	// space, not memory; a file beyond it is mapped again, larger.
	journalMapped = 64 << 20
	// journalTrim: a file that grew beyond it is cut back to it when it
	// is reused.
	journalTrim = 8 << 20
)

// journalFile is one of the journal's files, open for writing. Its
// methods are called with journal.mu held.
type journalFile struct {
	path string
	f    *os.File
	mem  []byte // the file mapped shared; nil: written with pwrite
	size int64  // the file's size
	hdr  int64  // where records start: fileHeaderLen2, or fileHeaderLen in a format 1 file
	off  int64  // where the next record goes
	last uint64 // the seq of the newest record this round; 0: none yet
	// Format 2: the seq this round starts at, and the high-water mark
	// (journal_format.go): the offset past the furthest byte written.
	start uint64
	hwm   int64
	// scratch for the changing part of the header: written without
	// allocating.
	startBuf [fileHeaderLen2 - startAt]byte
	// inherited: a file a previous process left, whose records could not
	// be applied at Open (journal_recovery.go). It is appended to in its
	// own format, and removed, not reused, once bbolt has them.
	inherited bool
	// writeAt writes where the mapping cannot: (*os.File).WriteAt, which
	// tests replace to fail a write.
	writeAt func(f *os.File, b []byte, off int64) (int, error)
}

// createJournalFile creates the journal file at path, its records to
// start at seq start. Open has applied and removed any file there before.
// noMap: write with pwrite, not through a mapping (tests).
func createJournalFile(path string, start uint64, noMap bool) (*journalFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	jf := &journalFile{path: path, f: f, hdr: fileHeaderLen2, off: fileHeaderLen2, start: start, hwm: fileHeaderLen2, writeAt: (*os.File).WriteAt}
	// err, not one scoped to an if: a header that a full disk refused
	// (or a file that could not grow) fails the create, rather than
	// leaving a file without its magic, which the next Open sets aside
	// as damaged with the records written to it since.
	err = jf.grow(journalGrow, !noMap)
	if err == nil {
		err = jf.put(0, appendFileHeader2(nil, start))
	}
	if err != nil {
		jf.close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("write journal header: %w", err)
	}
	return jf, nil
}

// openInherited opens the journal file at path, which a previous process
// left holding records up to seq last, to append after them at end; start
// is its header's start seq (format 2).
func openInherited(path string, hdr, end int64, start, last uint64) (*journalFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	jf := &journalFile{path: path, f: f, hdr: hdr, off: end, last: last, start: start, hwm: end, inherited: true, writeAt: (*os.File).WriteAt}
	// What follows its records (a torn tail) goes: format 1 reads to the
	// end of the file. Then it grows, zeros, and is mapped.
	if err := f.Truncate(end); err != nil {
		jf.close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	jf.size = end
	if err := jf.grow(end+journalGrow, true); err != nil {
		jf.close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	if hdr == fileHeaderLen2 {
		// What lay after its records is gone: so is its high-water mark.
		if err := jf.put(startAt, appendStart(nil, start, end)); err != nil {
			jf.close()
			return nil, fmt.Errorf("open journal %s: %w", path, err)
		}
	}
	return jf, nil
}

// write appends record b, its seq seq, to the file. On an error the
// record is not in the file (the next one is written where it would have
// been) and the file is otherwise as it was.
func (jf *journalFile) write(b []byte, seq uint64) error {
	end := jf.off + int64(len(b))
	if end > jf.size {
		if err := jf.grow(end, jf.mem != nil); err != nil {
			return fmt.Errorf("write journal: %w", err)
		}
	}
	if end > jf.hwm && jf.hdr == fileHeaderLen2 {
		// Raised before the record is copied: a copy cut short by a kill
		// leaves its torn bytes below the mark, not damage after it.
		if err := jf.put(startAt, appendStart(jf.startBuf[:0], jf.start, end)); err != nil {
			return fmt.Errorf("write journal: %w", err)
		}
		jf.hwm = end
	}
	if err := jf.put(jf.off, b); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	jf.off, jf.last = end, seq
	return nil
}

// reuse makes the file start a new round at seq start: every record it
// holds is in bbolt, and numbered below start.
func (jf *journalFile) reuse(start uint64) error {
	hwm := min(jf.hwm, journalTrim)
	if err := jf.put(startAt, appendStart(nil, start, hwm)); err != nil {
		return fmt.Errorf("reuse journal %s: %w", jf.path, err)
	}
	jf.off, jf.last, jf.start, jf.hwm = jf.hdr, 0, start, hwm
	if jf.size > journalTrim {
		// Past the new end, the mapping is never touched until the
		// file grows again.
		if err := jf.f.Truncate(journalTrim); err != nil {
			return fmt.Errorf("reuse journal %s: %w", jf.path, err)
		}
		jf.size = journalTrim
	}
	return nil
}

// grow makes the file at least n bytes long, in steps of journalGrow, and
// maps it when mapped is set (mapped again, larger, when it outgrew its
// mapping). A file that cannot be mapped is written with pwrite.
func (jf *journalFile) grow(n int64, mapped bool) error {
	size := (n + journalGrow - 1) / journalGrow * journalGrow
	if size > jf.size {
		if err := jf.f.Truncate(size); err != nil {
			return err
		}
		jf.size = size
	}
	if !mapped || int64(len(jf.mem)) >= jf.size {
		return nil
	}
	if jf.mem != nil {
		_ = unmapFile(jf.mem)
		jf.mem = nil
	}
	if mem, err := mapFile(jf.f, max(journalMapped, 2*jf.size)); err == nil {
		jf.mem = mem
	}
	return nil
}

// put writes b at off: a copy into the mapping, or, when there is none or
// the copy faulted, pwrite.
func (jf *journalFile) put(off int64, b []byte) error {
	if jf.mem != nil && copyMapped(jf.mem[off:], b) {
		return nil
	}
	if _, err := jf.writeAt(jf.f, b, off); err != nil {
		return err
	}
	if jf.mem == nil {
		return nil
	}
	// The copy faulted. Should the file be shorter than it was made (cut
	// by someone else), it is made as long again: a copy past its end
	// within its last page would not fault, and would be lost.
	fi, err := jf.f.Stat()
	if err == nil && fi.Size() < jf.size {
		err = jf.f.Truncate(jf.size)
	}
	return err
}

// copyMapped copies b to the start of dst, part of a mapped file, and says
// whether it did: a fault (no room on the disk for a new page, the file
// cut short by someone else) returns false, part of b copied.
func copyMapped(dst, b []byte) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			var fault interface{ Addr() uintptr }
			if err, isErr := r.(error); !isErr || !errors.As(err, &fault) {
				panic(r)
			}
			ok = false
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	copy(dst, b)
	return true
}

// close unmaps and closes the file.
func (jf *journalFile) close() error {
	if jf.mem != nil {
		_ = unmapFile(jf.mem)
		jf.mem = nil
	}
	return jf.f.Close()
}
