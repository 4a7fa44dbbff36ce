package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"strconv"
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
	magic, version, pageSize            uint32
	root, freelist, pgid, txid, sum, ok uint64
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
		txid:     le.Uint64(p[metaStart+48:]),
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

// Page kinds, in a page header's flags.
const (
	pageBranch   = 0x01
	pageLeaf     = 0x02
	pageMeta     = 0x04
	pageFreelist = 0x10

	pageHeaderLen = 16
	elemLen       = 16 // a branch or a leaf element
	bucketFlag    = 0x01
	bucketHdrLen  = 16  // a bucket's value: its root page and sequence
	pagePrefix    = 512 // what checkTree reads of a page first
	maxTreeDepth  = 64
)

// checkTree reads, with pread and every bound checked, each page that the
// file's tree and freelist name, before bbolt maps the file: bbolt keeps
// no checksum of its pages and trusts each one it reads, so a damaged
// page would make it panic, fault outside its mapping, or return garbage
// at some later read. Both meta pages must be valid. A page is damaged
// when its header is not what its parent says (its id, its kind, its
// overflow past the file), when its elements or keys lie outside it, when
// a branch's keys are out of order, when a child is past the file's pages
// or reached twice, or when a page in use is also on the freelist. Of a
// leaf, the element array is read, not the keys and values, which are
// most of the file: a store of 100,000 deliveries (266 MB) opens read-only
// in about 50 ms with the check, about 200 ms reading every leaf whole,
// 0.07 ms without it (BenchmarkOpen100k, on 2 busy cores: about 65,000
// preads of a page's start). The bytes of the records are checked by the
// read that decodes them: each carries its checksum (codec.go,
// damaged_records.go).
func checkTree(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // bbolt has it open: it reports its own errors
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	c := &treeCheck{f: f, size: fi.Size()}
	return c.run()
}

type treeCheck struct {
	f    *os.File
	size int64
	ps   uint64
	hw   uint64 // pages in use: the high-water mark
	used []bool // pages reached from the tree or the freelist
	free []bool
	bufs [][]byte // a page buffer for each depth of the walk, reused
}

func (c *treeCheck) run() error {
	var buf [metaEnd]byte
	if _, err := c.f.ReadAt(buf[:], 0); err != nil {
		return fmt.Errorf("meta page 0: %w", err)
	}
	m0 := parseBoltMeta(buf[:])
	if !m0.valid() {
		return errors.New("meta page 0 is damaged")
	}
	if _, err := c.f.ReadAt(buf[:], int64(m0.pageSize)); err != nil {
		return fmt.Errorf("meta page 1: %w", err)
	}
	m1 := parseBoltMeta(buf[:])
	if !m1.valid() || m1.pageSize != m0.pageSize {
		return errors.New("meta page 1 is damaged")
	}
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	if err := m.fits(c.size); err != nil {
		return err
	}
	c.ps, c.hw = uint64(m.pageSize), m.pgid
	c.used, c.free = make([]bool, c.hw), make([]bool, c.hw)
	c.used[0], c.used[1] = true, true
	if m.freelist != noFreelist {
		if err := c.freelist(m.freelist); err != nil {
			return err
		}
	}
	if err := c.bucket(m.root, nil, 0); err != nil {
		return err
	}
	for id := range c.hw {
		if c.used[id] && c.free[id] {
			return fmt.Errorf("page %d is both in use and on the freelist", id)
		}
	}
	return nil
}

// pageRun reads the header of page id, checks it against what its parent
// expects, marks its pages used, and returns a reader of its bytes, valid
// until the next page of the same depth is read.
func (c *treeCheck) pageRun(id uint64, kinds uint16, depth int) (pageBytes, uint16, uint16, error) {
	if id < 2 || id >= c.hw {
		return pageBytes{}, 0, 0, fmt.Errorf("a page names page %d, outside the file's %d pages", id, c.hw)
	}
	for len(c.bufs) <= depth {
		c.bufs = append(c.bufs, make([]byte, c.ps))
	}
	// A leaf's elements are read, not its keys and values (most of
	// the file): its start first, then the rest of its element array,
	// or of a branch's page, if that is longer.
	first := c.bufs[depth][:min(c.ps, pagePrefix)]
	if _, err := c.f.ReadAt(first, int64(id*c.ps)); err != nil {
		return pageBytes{}, 0, 0, fmt.Errorf("page %d: %w", id, err)
	}
	le := binary.NativeEndian
	pid, flags, count, over := le.Uint64(first), le.Uint16(first[8:]), le.Uint16(first[10:]), uint64(le.Uint32(first[12:]))
	want := uint64(len(first))
	switch flags {
	case pageBranch:
		want = c.ps
	case pageLeaf:
		want = min(c.ps, pageHeaderLen+uint64(count)*elemLen)
	}
	if want > uint64(len(first)) {
		first = c.bufs[depth][:want]
		if _, err := c.f.ReadAt(first[pagePrefix:], int64(id*c.ps+pagePrefix)); err != nil {
			return pageBytes{}, 0, 0, fmt.Errorf("page %d: %w", id, err)
		}
	}
	switch {
	case pid != id:
		return pageBytes{}, 0, 0, fmt.Errorf("page %d calls itself page %d", id, pid)
	case flags&kinds == 0 || flags&(flags-1) != 0:
		return pageBytes{}, 0, 0, fmt.Errorf("page %d has the kind %#x, want %#x", id, flags, kinds)
	case id+over >= c.hw:
		return pageBytes{}, 0, 0, fmt.Errorf("page %d overflows past the file's %d pages", id, c.hw)
	}
	for p := id; p <= id+over; p++ {
		if c.used[p] {
			return pageBytes{}, 0, 0, fmt.Errorf("page %d is reached twice", p)
		}
		c.used[p] = true
	}
	return pageBytes{f: c.f, off: int64(id * c.ps), first: first, size: (1 + over) * c.ps}, flags, count, nil
}

// pageName names a page in an error; 0: an inline bucket's.
type pageName uint64

func (n pageName) String() string {
	if n == 0 {
		return "an inline bucket"
	}
	return "page " + strconv.FormatUint(uint64(n), 10)
}

// pageBytes reads a page run: its first page is in memory, the rest is
// read when asked for.
type pageBytes struct {
	f     *os.File // nil: first is the whole run (an inline bucket's page)
	off   int64
	first []byte
	size  uint64
}

func (p *pageBytes) at(off, n uint64) ([]byte, error) {
	if off > p.size || n > p.size-off {
		return nil, fmt.Errorf("bytes %d to %d are outside the page's %d", off, off+n, p.size)
	}
	if off+n <= uint64(len(p.first)) {
		return p.first[off : off+n], nil
	}
	if p.f == nil {
		return nil, fmt.Errorf("bytes %d to %d are outside the page's %d", off, off+n, len(p.first))
	}
	b := make([]byte, n)
	if _, err := p.f.ReadAt(b, p.off+int64(off)); err != nil {
		return nil, err
	}
	return b, nil
}

func (c *treeCheck) freelist(id uint64) error {
	p, _, count, err := c.pageRun(id, pageFreelist, 0)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	n, start := uint64(count), uint64(pageHeaderLen)
	if count == 0xFFFF {
		b, err := p.at(start, 8)
		if err != nil {
			return fmt.Errorf("freelist: %w", err)
		}
		n, start = binary.NativeEndian.Uint64(b), start+8
	}
	if n > c.hw {
		return fmt.Errorf("freelist page %d lists %d pages of %d", id, n, c.hw)
	}
	ids, err := p.at(start, 8*n)
	if err != nil {
		return fmt.Errorf("freelist page %d: %w", id, err)
	}
	for i := range n {
		f := binary.NativeEndian.Uint64(ids[8*i:])
		if f < 2 || f >= c.hw || c.free[f] {
			return fmt.Errorf("freelist page %d lists page %d, of %d pages", id, f, c.hw)
		}
		c.free[f] = true
	}
	return nil
}

// bucket checks the tree of a bucket whose root is page root, or, when
// root is 0, the inline page.
func (c *treeCheck) bucket(root uint64, inline []byte, depth int) error {
	if root == 0 {
		if len(inline) < pageHeaderLen {
			return errors.New("an inline bucket is too short")
		}
		le := binary.NativeEndian
		flags, count := le.Uint16(inline[8:]), le.Uint16(inline[10:])
		if flags != pageLeaf {
			return fmt.Errorf("an inline bucket has the kind %#x", flags)
		}
		return c.leaf(&pageBytes{first: inline, size: uint64(len(inline))}, 0, count, depth)
	}
	return c.node(root, depth)
}

// node checks the branch or leaf page id and every page below it.
func (c *treeCheck) node(id uint64, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("page %d is deeper than %d levels", id, maxTreeDepth)
	}
	p, flags, count, err := c.pageRun(id, pageBranch|pageLeaf, depth)
	if err != nil {
		return err
	}
	name := pageName(id)
	if flags == pageLeaf {
		return c.leaf(&p, name, count, depth)
	}
	if count == 0 {
		return fmt.Errorf("%s is a branch with no element", name)
	}
	elems, err := p.at(pageHeaderLen, uint64(count)*elemLen)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var prev []byte
	children := make([]uint64, count)
	for i := range uint64(count) {
		e := elems[i*elemLen:]
		pos, ksize := uint64(binary.NativeEndian.Uint32(e)), uint64(binary.NativeEndian.Uint32(e[4:]))
		key, err := p.at(pageHeaderLen+i*elemLen+pos, ksize)
		if err != nil {
			return fmt.Errorf("%s, element %d: %w", name, i, err)
		}
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			return fmt.Errorf("%s: its keys are out of order at element %d", name, i)
		}
		prev = key // the page's buffer, or a copy: unchanged until the loop ends
		children[i] = binary.NativeEndian.Uint64(e[8:])
	}
	for _, child := range children {
		if err := c.node(child, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// leaf checks the elements of a leaf page, and the buckets it holds.
func (c *treeCheck) leaf(p *pageBytes, name pageName, count uint16, depth int) error {
	elems, err := p.at(pageHeaderLen, uint64(count)*elemLen)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var prev []byte
	for i := range uint64(count) {
		e := elems[i*elemLen:]
		le := binary.NativeEndian
		flags, pos, ksize, vsize := le.Uint32(e), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
		at := pageHeaderLen + i*elemLen + pos
		if flags&^bucketFlag != 0 {
			return fmt.Errorf("%s, element %d: unknown flags %#x", name, i, flags)
		}
		if at > p.size || ksize+vsize > p.size-at {
			return fmt.Errorf("%s, element %d: its key and value run past the page", name, i)
		}
		if flags&bucketFlag == 0 {
			continue // its bytes are not read: see checkTree
		}
		key, err := p.at(at, ksize)
		if err != nil {
			return fmt.Errorf("%s, element %d: %w", name, i, err)
		}
		if prev != nil && bytes.Compare(prev, key) >= 0 {
			return fmt.Errorf("%s: its buckets are out of order at element %d", name, i)
		}
		prev = key
		v, err := p.at(at+ksize, vsize)
		if err != nil || vsize < bucketHdrLen {
			return fmt.Errorf("%s, bucket %q: its header is damaged", name, key)
		}
		if err := c.bucket(le.Uint64(v), v[bucketHdrLen:], depth+1); err != nil {
			return fmt.Errorf("bucket %q: %w", key, err)
		}
	}
	return nil
}
