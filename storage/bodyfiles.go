package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Body files: the bodies of deliveries kept out of bbolt. A body of
// bodyFileMin bytes or more is appended, when the journal is applied, to
// the body file being filled, in the directory <store>.bodies beside the
// store, and bbolt keeps where it is (bucketBodyRefs). Writing a body into
// bbolt's B+tree cost more than the rest of its delivery's records
// together (BenchmarkApplyBodySize: 2.7 µs a 1.5 KB body of the 4.6 a
// record took); appended, a batch of bodies is one write.
//
// A body file is a header (bodyFileMagic, its version) and bodies one
// after another, nothing else: what a body is and where it ends is bbolt's
// record, and its checksum is in its delivery's record, so a body that
// was damaged, cut off with its file or lost with it cannot be read, and
// that delivery alone says so, read without its body (damaged_records.go);
// the others read as before. The bodies of a batch are written before bbolt commits the
// batch, which the journal still holds until then: a process killed in
// between leaves bodies that nothing refers to, and the batch is applied
// again after the end of the file, which the next start finds. A power
// loss may lose the last writes, as it may of bbolt's (storage.go).
//
// bucketBodyFiles counts, for each file, the bodies in bbolt that are in
// it. A file whose count comes to 0 (retention, deletes) is removed once
// that is committed, unless it is the one being filled; a file whose
// count is 0 at Open, the process having stopped before it removed it,
// is removed then. A file the store has no count for is left where it is.

const (
	bodiesDirSuffix = ".bodies"
	// bodyFileMin: smaller bodies go into bbolt, where they cost about
	// what their place in a body file would.
	bodyFileMin = 512
	// bodyFileMax: a batch of bodies goes to a new file once the one
	// being filled is this large, so that retention can remove files.
	bodyFileMax = 64 << 20

	bodyFileMagic     = "devhookB"
	bodyFileVersion   = 1
	bodyFileHeaderLen = 16 // magic, version (uint32), 4 bytes reserved (0)

	bucketBodyRefs  = "bodyrefs"  // delivery id → bodyRef
	bucketBodyFiles = "bodyfiles" // file number (uint32) → bodyFileState

	// kindBodyRef is the CRC-32C of "B": see valueKind. A ref's checksum
	// starts from it updated with its delivery's id (refKind).
	kindBodyRef   valueKind = 0xf23d3e1a
	formatBodyRef           = 1
	bodyRefLen              = 1 + 4 + 8 + 4 + crcLen

	// kindBodyFile is the CRC-32C of "F".
	kindBodyFile   valueKind = 0x35a7a905
	formatBodyFile           = 1
)

// bodyRef is where a body is: its file, its offset in it, its length.
type bodyRef struct {
	file uint32
	off  int64
	n    uint32
}

// refKind is the kind of the ref of delivery id: its checksum covers the
// id, so that a ref found under another delivery's key (a damaged page)
// fails its check, rather than have that delivery's delete zero, and
// count out of its file, a body another delivery keeps.
func refKind(id []byte) valueKind {
	return valueKind(crc32.Update(uint32(kindBodyRef), crcTable(), id))
}

// appendBodyRef appends the value of r, the ref of delivery id.
func appendBodyRef(b []byte, id []byte, r bodyRef) []byte {
	start := len(b)
	b = append(b, checkedFormat|formatBodyRef)
	b = binary.BigEndian.AppendUint32(b, r.file)
	b = binary.BigEndian.AppendUint64(b, uint64(r.off))
	b = binary.BigEndian.AppendUint32(b, r.n)
	return seal(b, start, refKind(id))
}

// decodeBodyRef decodes v, the ref of delivery id.
func decodeBodyRef(id, v []byte) (bodyRef, error) {
	p, checked, err := openValue(v, refKind(id), formatBodyRef)
	if err == nil && !checked {
		err = whyFormat
	}
	if err != nil {
		return bodyRef{}, err
	}
	if len(p) != 16 {
		return bodyRef{}, whyDecode
	}
	r := bodyRef{file: binary.BigEndian.Uint32(p), off: int64(binary.BigEndian.Uint64(p[4:])), n: binary.BigEndian.Uint32(p[12:])}
	if r.file == 0 || r.off < bodyFileHeaderLen || r.off > 1<<50 {
		return bodyRef{}, whyDecode
	}
	return r, nil
}

func fileKey(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

// Why a body's read failed.
var (
	whyBodyFileMissing = errRecordDamaged("its body file is missing")
	whyBodyFileCut     = errRecordDamaged("its body file is cut short before its end")
	whyBodyFileForeign = errRecordDamaged("its body file is no devhook body file")
	// whyBodyFileCount: what the store records of the file is damaged.
	whyBodyFileCount = errRecordDamaged("the count of its body file's bodies is damaged")
)

// whyBodyInFile: a body read from its body file whose bytes there fail
// the checksum its delivery's record holds.
const whyBodyInFile = errRecordDamaged("its bytes in its body file do not match its checksum")

// bodyFileDamage is why a body in a body file could not be read whole,
// with the file's path: the file is at fault, not the store's, and what
// to do is about the file (copy it along, or keep it as evidence).
type bodyFileDamage struct {
	path string
	why  errRecordDamaged
}

func (e bodyFileDamage) Error() string {
	return fmt.Sprintf("is damaged (%s: %s)", string(e.why), e.path)
}
func (e bodyFileDamage) Unwrap() error { return e.why }

// inBodyFile is err, of reading a body of the body file path, with the
// file named when it is damage.
func inBodyFile(path string, err error) error {
	var why errRecordDamaged
	if errors.As(err, &why) {
		return bodyFileDamage{path: path, why: why}
	}
	return err
}

// errNewerBodyFile: a body file of a version above this devhook's.
type errNewerBodyFile struct{ version uint32 }

func (e errNewerBodyFile) Error() string {
	return fmt.Sprintf("is in a body file of a newer devhook (version %d; this one reads version %d): upgrade devhook to read it", e.version, bodyFileVersion)
}
func (e errNewerBodyFile) Unwrap() error { return ErrNewerRecord }

// bodyFiles is the directory of body files of a store.
type bodyFiles struct {
	dir      string
	readOnly bool
	min      int   // bodies smaller than this stay in bbolt (bodyFileMin)
	max      int64 // a file this large is full (bodyFileMax)

	mu sync.Mutex
	// active is the file being filled (0: none yet), f it open for
	// writing (nil: a new file is started before the next write), end
	// where its next body goes.
	active uint32
	f      *os.File
	end    int64
	// zero: where bodies deleted are, to be overwritten with zeros.
	zero []bodyRef
	// buf is the buffer of the last batch of bodies, reused by the next
	// (applies are one at a time: bbolt has one writer).
	buf []byte
	// unsynced: the files written since the last sync that are no longer
	// the one being filled; newFile: a file was started since (its
	// directory is to be synced).
	unsynced []uint32
	newFile  bool
	synced   func(path string) // nil; tests hear what sync fsyncs
}

// keptBuf bounds the buffer kept between batches.
const keptBuf = 4 << 20

// openBodyFiles opens the body files of the store at dbPath, given what
// bbolt records of them (recorded: each file's bodies and end). The
// highest numbered file is filled on if it is this devhook's, whole up
// to the end bbolt records; else the next write starts a new file after
// every one on disk or in bbolt, and it is left as it is (logf says so
// when it holds bodies).
func openBodyFiles(dbPath string, readOnly bool, recorded map[uint32]bodyFileState, logf func(string, ...any)) (*bodyFiles, error) {
	bf := &bodyFiles{dir: dbPath + bodiesDirSuffix, readOnly: readOnly, min: bodyFileMin, max: bodyFileMax}
	files, err := bf.list()
	if err != nil || readOnly {
		return bf, err
	}
	sayMissing(bf.dir, files, recorded, logf)
	for n := range recorded {
		bf.active = max(bf.active, n)
	}
	if len(files) == 0 || files[len(files)-1] < bf.active {
		return bf, nil // the next file is a new one
	}
	bf.active = files[len(files)-1]
	path := bf.path(bf.active)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("storage: open body file %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: open body file %s: %w", path, err)
	}
	why := checkBodyHeader(f)
	if st := recorded[bf.active]; why == nil && st.damaged {
		why = whyBodyFileCount
	} else if why == nil && fi.Size() < st.end {
		why = whyBodyFileCut
	}
	if why != nil {
		_ = f.Close()
		if st := recorded[bf.active]; st.bodies > 0 || st.damaged {
			logf("storage: body file %s %s; it is kept as it is, and new bodies go to a new file", path, fileProblem(why))
		}
		return bf, nil
	}
	// A batch that bbolt did not commit may follow its end: new bodies
	// go after it, never over bytes on disk.
	bf.f, bf.end = f, fi.Size()
	return bf, nil
}

// sayMissing says, through logf, how many bodies the store records in
// body files that are not in dir (files): most often a store copied
// without its directory of body files. Said at a writable open, once,
// rather than only at each read of one of them.
func sayMissing(dir string, files []uint32, recorded map[uint32]bodyFileState, logf func(string, ...any)) {
	var bodies uint64
	var missing []string
	for n, st := range recorded {
		if st.bodies > 0 && !slices.Contains(files, n) {
			bodies += st.bodies
			missing = append(missing, fmt.Sprintf("%08d", n))
		}
	}
	if len(missing) == 0 {
		return
	}
	slices.Sort(missing)
	those := fmt.Sprintf("%d bodies of recorded deliveries are", bodies)
	if bodies == 1 {
		those = "1 body of a recorded delivery is"
	}
	logf("storage: %s in body files missing from %s (%s): a copy of the store needs that directory copied with it (devhook stopped); until then those deliveries read without their bodies, and the others as before",
		those, dir, strings.Join(missing, ", "))
}

// fileProblem says what is wrong with a body file whose check failed with
// why.
func fileProblem(why error) string {
	var newer errNewerBodyFile
	switch {
	case errors.As(why, &newer):
		return fmt.Sprintf("is a newer devhook's (version %d; this one reads version %d)", newer.version, bodyFileVersion)
	case errors.Is(why, whyBodyFileCut):
		return "is shorter than the bodies the store records in it"
	case errors.Is(why, whyBodyFileForeign):
		return "is no devhook body file"
	case errors.Is(why, whyBodyFileCount):
		return "has its count of bodies damaged in the store"
	}
	return "cannot be read (" + why.Error() + ")"
}

// bodyFileState is what bbolt records of a body file: how many of its
// bodies it has, and the end of the last. Its value has a checksum, as a
// body's ref does: a count that read 0 by damage would remove the file
// with the bodies still in it. damaged: the value fails its checks (or is
// a newer devhook's); the file is then never removed (but by deleteAll,
// when no body is left anywhere) nor filled on, and its count is left as
// it is.
type bodyFileState struct {
	bodies  uint64
	end     int64
	damaged bool
}

// decodeBodyFileState decodes the value v of a file in bucketBodyFiles;
// present says whether there is one.
func decodeBodyFileState(v []byte) (st bodyFileState, present bool) {
	if v == nil {
		return bodyFileState{}, false
	}
	p, checked, err := openValue(v, kindBodyFile, formatBodyFile)
	if err != nil || !checked || len(p) != 16 || int64(binary.BigEndian.Uint64(p[8:])) < 0 {
		return bodyFileState{damaged: true}, true
	}
	return bodyFileState{bodies: binary.BigEndian.Uint64(p), end: int64(binary.BigEndian.Uint64(p[8:]))}, true
}

func (st bodyFileState) append(b []byte) []byte {
	start := len(b)
	b = append(b, checkedFormat|formatBodyFile)
	b = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, st.bodies), uint64(st.end))
	return seal(b, start, kindBodyFile)
}

// removable says whether the file's bodies are all gone from bbolt.
func (st bodyFileState) removable() bool { return !st.damaged && st.bodies == 0 }

// bodyFileStates reads what bbolt records of the body files, damaged
// values included.
func bodyFileStates(tx *bolt.Tx) map[uint32]bodyFileState {
	m := map[uint32]bodyFileState{}
	if b := tx.Bucket([]byte(bucketBodyFiles)); b != nil {
		_ = b.ForEach(func(k, v []byte) error {
			if st, ok := decodeBodyFileState(v); ok && len(k) == 4 {
				m[binary.BigEndian.Uint32(k)] = st
			}
			return nil
		})
	}
	return m
}

// list returns the numbers of the body files, in order.
func (bf *bodyFiles) list() ([]uint32, error) {
	entries, err := os.ReadDir(bf.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage: list body files: %w", err)
	}
	var files []uint32
	for _, e := range entries {
		if n, ok := bodyFileNumber(e.Name()); ok && e.Type().IsRegular() {
			files = append(files, n)
		}
	}
	slices.Sort(files)
	return files, nil
}

// bodyFileNumber parses a body file's name: 8 decimal digits, not 0.
func bodyFileNumber(name string) (uint32, bool) {
	if len(name) != 8 {
		return 0, false
	}
	n, err := strconv.ParseUint(name, 10, 32)
	return uint32(n), err == nil && n > 0
}

func (bf *bodyFiles) path(n uint32) string {
	return filepath.Join(bf.dir, fmt.Sprintf("%08d", n))
}

// checkBodyHeader checks the header of the body file f.
func checkBodyHeader(f *os.File) error {
	var h [bodyFileHeaderLen]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		if errors.Is(err, io.EOF) {
			return whyBodyFileCut
		}
		return err
	}
	if string(h[:8]) != bodyFileMagic {
		return whyBodyFileForeign
	}
	if v := binary.BigEndian.Uint32(h[8:]); v != bodyFileVersion {
		if v > bodyFileVersion {
			return errNewerBodyFile{v}
		}
		return whyBodyFileForeign
	}
	return nil
}

// place returns where the next batch of bodies goes: the file being
// filled and its end, a new file when there is none or it is full.
func (bf *bodyFiles) place() (file uint32, off int64, err error) {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if bf.readOnly {
		return 0, 0, errReadOnly
	}
	if bf.f == nil || bf.end >= bf.max {
		if err := bf.startFile(); err != nil {
			return 0, 0, errBodyFiles{err}
		}
	}
	return bf.active, bf.end, nil
}

// startFile starts the file after the active one; bf.mu is held.
func (bf *bodyFiles) startFile() error {
	if err := os.MkdirAll(bf.dir, 0o700); err != nil {
		return fmt.Errorf("storage: make the body files' directory: %w", err)
	}
	n := bf.active + 1
	f, err := os.OpenFile(bf.path(n), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("storage: start a body file: %w", err)
	}
	var h [bodyFileHeaderLen]byte
	copy(h[:], bodyFileMagic)
	binary.BigEndian.PutUint32(h[8:], bodyFileVersion)
	if _, err := f.WriteAt(h[:], 0); err != nil {
		// Empty, or a torn header (the disk is full): nothing refers to
		// it, and the next try starts it again.
		_ = f.Close()
		_ = os.Remove(bf.path(n))
		return fmt.Errorf("storage: start body file %s: %w", bf.path(n), err)
	}
	if bf.f != nil {
		_ = bf.f.Close()
		bf.unsynced = append(bf.unsynced, bf.active)
	}
	bf.active, bf.f, bf.end, bf.newFile = n, f, bodyFileHeaderLen, true
	return nil
}

// write writes b at off of file, as place returned them, and moves the
// file's end after it. When bbolt does not commit the batch, unwrite
// moves it back, so that the next batch is written in its place.
func (bf *bodyFiles) write(file uint32, off int64, b []byte) error {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if bf.f == nil || file != bf.active || off != bf.end {
		return errBodyFiles{fmt.Errorf("storage: body file %d at %d: the file being filled moved on", file, off)}
	}
	if _, err := bf.f.WriteAt(b, off); err != nil {
		// A torn write on a full disk keeps the blocks it filled, which
		// nothing refers to: give them back, the journal needs them for
		// the deliveries that arrive meanwhile.
		_ = bf.f.Truncate(off)
		return errBodyFiles{fmt.Errorf("storage: write bodies to %s: %w", bf.path(file), err)}
	}
	bf.end = off + int64(len(b))
	return nil
}

// unwrite moves the end of file back from end to off, unless a batch was
// written after end meanwhile.
func (bf *bodyFiles) unwrite(file uint32, off, end int64) {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if file == bf.active && bf.end == end {
		bf.end = off
		// The bodies written there are referred to by nothing: free their
		// blocks (the commit failed most often because the disk is full).
		_ = bf.f.Truncate(off)
	}
}

// read returns the body at r.
func (bf *bodyFiles) read(r bodyRef) ([]byte, error) {
	f, err := os.Open(bf.path(r.file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, whyBodyFileMissing
	}
	if err != nil {
		return nil, fmt.Errorf("storage: read body file %s: %w", bf.path(r.file), err)
	}
	defer f.Close()
	if err := checkBodyHeader(f); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("storage: read body file %s: %w", bf.path(r.file), err)
	}
	if r.off+int64(r.n) > fi.Size() {
		return nil, whyBodyFileCut
	}
	b := make([]byte, r.n)
	if _, err := f.ReadAt(b, r.off); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, whyBodyFileCut
		}
		return nil, fmt.Errorf("storage: read body file %s: %w", bf.path(r.file), err)
	}
	return b, nil
}

// remove removes the body files files, whose bodies are all gone from
// bbolt, unless one is being filled, and returns those it removed (or
// found gone).
func (bf *bodyFiles) remove(files []uint32) (removed []uint32, err error) {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if bf.readOnly {
		return nil, nil
	}
	var errs []error
	for _, n := range files {
		if n == bf.active && bf.f != nil {
			continue
		}
		if err := os.Remove(bf.path(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, n)
	}
	return removed, errors.Join(errs...)
}

// retire stops filling the active file: the next batch starts a new one,
// and the old one can be removed once its count is 0.
func (bf *bodyFiles) retire() {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if bf.f != nil {
		_ = bf.f.Close()
		bf.f = nil
	}
}

// toZero adds refs, of bodies whose deletion bbolt committed, to those
// that tidyBodyFiles overwrites with zeros: a deleted body is gone from
// the disk, not only from the store's records.
func (bf *bodyFiles) toZero(refs []bodyRef) {
	if len(refs) == 0 {
		return
	}
	bf.mu.Lock()
	bf.zero = append(bf.zero, refs...)
	bf.mu.Unlock()
}

// zeroDeleted overwrites the bodies of toZero with zeros, where their
// file is still there. One that fails (the disk is full: a write into a
// hole of the file) is tried again at the next tidy.
func (bf *bodyFiles) zeroDeleted() {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	var left []bodyRef
	for _, r := range bf.zero {
		f, err := os.OpenFile(bf.path(r.file), os.O_RDWR, 0)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				left = append(left, r)
			}
			continue
		}
		// Only what is there, in a file of this devhook's: a file cut
		// short, foreign or newer is evidence, never written to.
		fi, err := f.Stat()
		if err == nil && checkBodyHeader(f) == nil && r.off+int64(r.n) <= fi.Size() {
			if _, err := f.WriteAt(make([]byte, r.n), r.off); err != nil {
				left = append(left, r)
			}
		}
		_ = f.Close()
	}
	bf.zero = left
}

// takeBuf returns a buffer that holds the bodies of recs that go to a
// body file, reusing the last batch's.
func (bf *bodyFiles) takeBuf(recs []jrec) []byte {
	need := 0
	for i := range recs {
		if r := &recs[i]; r.kind == recPut && len(r.put.body) >= bf.min {
			need += len(r.put.body)
		}
	}
	bf.mu.Lock()
	b := bf.buf
	bf.buf = nil
	bf.mu.Unlock()
	if cap(b) < need {
		b = make([]byte, 0, need)
	}
	return b[:0]
}

// giveBuf keeps b for the next batch, unless it is large.
func (bf *bodyFiles) giveBuf(b []byte) {
	if cap(b) > keptBuf {
		return
	}
	bf.mu.Lock()
	bf.buf = b
	bf.mu.Unlock()
}

// highest is the number of the last file started.
func (bf *bodyFiles) highest() uint32 {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	return bf.active
}

// sync makes the bodies written durable, before bbolt's refs to them
// are (Close): the file being filled, those it took over from since the
// last sync, and the directory when a file was started.
func (bf *bodyFiles) sync() error {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	for len(bf.unsynced) > 0 {
		if err := bf.syncPath(bf.path(bf.unsynced[0])); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err // removed meanwhile: none of its bodies is kept
		}
		bf.unsynced = bf.unsynced[1:]
	}
	if bf.f != nil {
		if err := bf.f.Sync(); err != nil {
			return fmt.Errorf("storage: sync body file %s: %w", bf.path(bf.active), err)
		}
		bf.note(bf.path(bf.active))
	}
	if bf.newFile {
		if err := bf.syncPath(bf.dir); err != nil {
			return err
		}
		bf.newFile = false
	}
	return nil
}

// syncPath fsyncs the file or directory at path; bf.mu is held.
func (bf *bodyFiles) syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("storage: sync %s: %w", path, err)
	}
	err = f.Sync()
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("storage: sync %s: %w", path, err)
	}
	bf.note(path)
	return nil
}

func (bf *bodyFiles) note(path string) {
	if bf.synced != nil {
		bf.synced(path)
	}
}

func (bf *bodyFiles) close() error {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if bf.f == nil {
		return nil
	}
	err := bf.f.Close()
	bf.f = nil
	return err
}

// addBodyCount adds n (which may be negative) to the count of bodies of
// file in bbolt, and records that its bodies end at end, at least. A
// damaged count is left as it is: the file is kept.
func addBodyCount(tx *bolt.Tx, file uint32, n int64, end int64) error {
	b := tx.Bucket([]byte(bucketBodyFiles))
	st, _ := decodeBodyFileState(b.Get(fileKey(file)))
	if st.damaged {
		return nil
	}
	st.bodies = uint64(max(int64(st.bodies)+n, 0))
	st.end = max(st.end, end)
	return b.Put(fileKey(file), st.append(nil))
}

// dropBodyRef removes where the body of delivery id is, if in a body file,
// counts it out of its file and adds it to zero (unless nil). A reference that fails its checks is
// removed and counts out of none: its file stays until the store is
// emptied.
func dropBodyRef(tx *bolt.Tx, id []byte, zero *[]bodyRef) error {
	refs := tx.Bucket([]byte(bucketBodyRefs))
	if refs == nil {
		return nil
	}
	v := refs.Get(id)
	if v == nil {
		return nil
	}
	if r, err := decodeBodyRef(id, v); err == nil {
		if err := addBodyCount(tx, r.file, -1, 0); err != nil {
			return err
		}
		if zero != nil {
			*zero = append(*zero, r)
		}
	}
	return refs.Delete(id)
}

// tidyBodyFiles overwrites with zeros the bodies deleted (Delete,
// DeleteMatching) that are in files kept, removes the body files that no
// delivery in bbolt has a body in, but the one being filled, and then
// their counts. While a read is under way, whose snapshot of bbolt may
// still refer to them, it is owed: the read that ends with none under
// way does it (viewUnsafe). It is done again after the next removal when
// it fails (a full disk): a file whose count is 0 is never read.
func (db *DB) tidyBodyFiles() {
	// Owed before the try: a read that holds the lock now sees it when it
	// ends.
	db.tidyOwed.Store(true)
	for db.tidyOwed.Load() && db.bodyReads.TryLock() {
		db.tidyOwed.Store(false)
		db.tidyLocked()
		db.bodyReads.Unlock()
	}
}

// tidyLocked is tidyBodyFiles with db.bodyReads held.
func (db *DB) tidyLocked() {
	db.bodies.zeroDeleted()
	var empty []uint32
	_ = db.safely(func() error {
		return db.bolt.View(func(tx *bolt.Tx) error {
			for n, st := range bodyFileStates(tx) {
				if st.removable() {
					empty = append(empty, n)
				}
			}
			return nil
		})
	})
	if len(empty) == 0 {
		return
	}
	removed, err := db.bodies.remove(empty)
	if err != nil {
		db.logf("storage: remove body files no delivery needs: %v; tried again later", err)
	}
	if len(removed) == 0 {
		return
	}
	_ = db.safely(func() error {
		return db.bolt.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bucketBodyFiles))
			for _, n := range removed {
				// Kept while it is the highest: the next file is numbered
				// after it.
				if st, ok := decodeBodyFileState(b.Get(fileKey(n))); ok && st.removable() && n != db.bodies.highest() {
					if err := b.Delete(fileKey(n)); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
}
