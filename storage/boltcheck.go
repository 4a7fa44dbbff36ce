package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
)

// checkBoltFile looks at the file at path before bbolt maps it, and
// returns why it must not (nil: bbolt may open it, or create it). bbolt
// trusts its meta pages: one that names pages past the end of a file cut
// short makes it read past the end of the file through its mapping, a
// SIGSEGV or SIGBUS that no recover catches. And bbolt takes an empty file
// for a new one and writes a fresh database over it, where an empty file
// at a path devhook created is damage (a disk that lost its blocks, a copy
// cut short). An error reading the file is left to bbolt to report.
//
// The layout read here is bbolt's (version 2, in the machine's byte
// order): pages 0 and 1 are meta pages. A page starts with a 16-byte
// header (id, flags, count, overflow); a meta follows it: magic
// 0xED0CDAED, version, page size, flags (uint32 each), the root bucket
// (root page id, sequence), the freelist's page id, the high-water mark
// (the number of pages in use), the transaction id, and an FNV-64a
// checksum of the fields before it (uint64 each).
func checkBoltFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // bbolt creates a missing file, and reports other errors
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	size := fi.Size()
	if size == 0 {
		return errEmptyFile
	}
	read := func(off int64) (boltMeta, bool) {
		var buf [metaEnd]byte
		if _, err := f.ReadAt(buf[:], off); err != nil && !errors.Is(err, io.EOF) {
			return boltMeta{}, false
		}
		m := parseBoltMeta(buf[:])
		return m, m.valid()
	}
	var metas []boltMeta
	if m0, ok := read(0); ok {
		metas = append(metas, m0)
		if m1, ok := read(int64(m0.pageSize)); ok {
			metas = append(metas, m1)
		}
	} else {
		// As bbolt does: find the second meta page by trying the page
		// sizes it may have been written with.
		for i := range 15 {
			off := int64(1024) << i
			if off >= size-1024 {
				break
			}
			if m1, ok := read(off); ok {
				metas = append(metas, m1)
				break
			}
		}
	}
	if len(metas) == 0 {
		return errNoMeta
	}
	for _, m := range metas {
		if err := m.fits(size); err != nil {
			return err
		}
	}
	return nil
}

var (
	errEmptyFile = errors.New("the file is empty (0 bytes)")
	errNoMeta    = errors.New("no valid bbolt meta page")
)

const (
	boltMagic   = 0xED0CDAED
	boltVersion = 2
	metaStart   = 16 // after the page header
	metaSumAt   = metaStart + 56
	metaEnd     = metaSumAt + 8
	noFreelist  = math.MaxUint64
)

type boltMeta struct {
	magic, version, pageSize      uint32
	root, freelist, pgid, sum, ok uint64
}

func parseBoltMeta(p []byte) boltMeta {
	le := binary.NativeEndian
	h := fnv.New64a()
	h.Write(p[metaStart:metaSumAt])
	m := boltMeta{
		magic:    le.Uint32(p[metaStart:]),
		version:  le.Uint32(p[metaStart+4:]),
		pageSize: le.Uint32(p[metaStart+8:]),
		root:     le.Uint64(p[metaStart+16:]),
		freelist: le.Uint64(p[metaStart+32:]),
		pgid:     le.Uint64(p[metaStart+40:]),
		sum:      le.Uint64(p[metaSumAt:]),
	}
	m.ok = h.Sum64()
	return m
}

// valid is bbolt's own check of a meta page.
func (m boltMeta) valid() bool {
	return m.magic == boltMagic && m.version == boltVersion && m.sum == m.ok && m.pageSize >= 512
}

// fits reports whether every page m names is inside a file of size bytes.
func (m boltMeta) fits(size int64) error {
	ps := uint64(m.pageSize)
	switch {
	case m.pgid > uint64(size)/ps || m.pgid*ps > uint64(size):
		return fmt.Errorf("the file is %d bytes long but its pages reach byte %d: it was cut short", size, m.pgid*ps)
	case m.root >= m.pgid, m.freelist >= m.pgid && m.freelist != noFreelist:
		return fmt.Errorf("its meta page names page %d or %d beyond its %d pages", m.root, m.freelist, m.pgid)
	}
	return nil
}
