package emulator

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Pushed packages. A package is a gzip'd tar of the application's files
// (DECISIONS.md, "Pushing an application"). The emulator keeps each one
// unpacked in a directory named after the SHA-256 of the package's bytes,
// under <root>/packages/; a run executes in a fresh copy of it under
// <root>/work/, removed when the run ends. The root is <DataDir>/pushed
// with a data directory, else a temporary directory Close removes.
//
// An unpacked package holds only regular files and directories whose
// names stay inside it: an absolute name, a "..", a link or a device is
// refused with the reason, as are more than MaxUnpackedBytes or
// maxPackageEntries entries, so that a hostile package can neither escape
// its directory nor fill the disk.
//
// All of it together is bounded: the unpacked packages, the runs' working
// copies, and the uploads being received (the gzip'd tar as it arrives,
// then what it unpacks to) count toward MaxPushedBytes, each file its size
// rounded up to 4 KiB and each directory 4 KiB, as a disk counts them.
// Every byte is counted before it is written, so an upload that would
// pass the bound stops there, not after. When room is needed, the
// packages that nothing pins go first, the least recently used first: a
// package is pinned while it is active on an application's instance or
// the package of a queued or running run; an uploaded package not yet
// activated is not. When there is still no room, the upload (or the run's
// working copy) is refused with 413. An upload never activated goes when
// its upload URL has been expired for UploadTTL (push.go). At start, the
// accounting is rebuilt from what is on disk, a package's last use being
// its directory's modification time.

// maxPackageEntries bounds the entries of one package.
const maxPackageEntries = 100_000

// blockSize is the unit in which files and directories count toward the
// bound.
const blockSize = 4096

// diskCost is what a file of size bytes, or a directory (size -1), counts.
func diskCost(size int64) int64 {
	if size <= 0 {
		return blockSize
	}
	return (size + blockSize - 1) / blockSize * blockSize
}

// executable returns the executable of an executable_type, and whether
// there is such a type.
func executable(typ string) (string, bool) {
	switch typ {
	case "python":
		return "main.py", true
	case "go":
		return "main", true
	case "java":
		return "main.jar", true
	}
	return "", false
}

// executableTypes lists the executable types in a stable order.
func executableTypes() []string { return []string{"python", "go", "java"} }

type packageStore struct {
	root  string
	temp  bool  // root was made by openPackages and goes with close
	limit int64 // MaxPushedBytes
	now   func() time.Time
	// pinned returns the digests that must stay, and holds them so (the
	// emulator's lock) until release is called. It is called without mu.
	pinned func() (digests map[string]bool, release func())

	mu       sync.Mutex
	used     int64                     // everything counted: packages, working copies, reservations
	packages map[string]*storedPackage // by digest
}

// storedPackage is an unpacked package's place in the bound.
type storedPackage struct {
	cost     int64
	lastUsed time.Time
}

// openPackages prepares the root, removes what a killed emulator left
// half done, and counts what is kept.
func openPackages(dataDir string, limit int64, now func() time.Time) (*packageStore, error) {
	var root string
	temp := dataDir == ""
	if temp {
		d, err := os.MkdirTemp("", "devhook-emulator-")
		if err != nil {
			return nil, fmt.Errorf("emulator: creating a directory for pushed packages: %w", err)
		}
		root = d
	} else {
		root = filepath.Join(dataDir, "pushed")
	}
	for _, d := range []string{"packages", "incoming", "work"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return nil, fmt.Errorf("emulator: creating %s: %w", filepath.Join(root, d), err)
		}
	}
	// What a killed emulator left half done: uploads being received and
	// working copies of runs. Nothing else uses them.
	for _, d := range []string{"incoming", "work"} {
		entries, _ := os.ReadDir(filepath.Join(root, d))
		for _, en := range entries {
			os.RemoveAll(filepath.Join(root, d, en.Name()))
		}
	}
	p := &packageStore{root: root, temp: temp, limit: limit, now: now, packages: map[string]*storedPackage{},
		pinned: func() (map[string]bool, func()) { return nil, func() {} }}
	entries, err := os.ReadDir(filepath.Join(root, "packages"))
	if err != nil {
		return nil, fmt.Errorf("emulator: reading %s: %w", filepath.Join(root, "packages"), err)
	}
	for _, en := range entries {
		dir := filepath.Join(root, "packages", en.Name())
		if !en.IsDir() || !isDigest(en.Name()) {
			os.RemoveAll(dir) // not a package: nothing of the emulator's makes such a thing
			continue
		}
		cost, err := treeCost(dir)
		if err != nil {
			return nil, fmt.Errorf("emulator: counting the pushed package %s: %w", dir, err)
		}
		fi, err := en.Info()
		if err != nil {
			return nil, fmt.Errorf("emulator: counting the pushed package %s: %w", dir, err)
		}
		p.packages[en.Name()] = &storedPackage{cost: cost, lastUsed: fi.ModTime()}
		p.used += cost
	}
	return p, nil
}

func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// treeCost is what the files and directories under dir count.
func treeCost(dir string) (int64, error) {
	var cost int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			cost += diskCost(-1)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		cost += diskCost(fi.Size())
		return nil
	})
	return cost, err
}

func (p *packageStore) close() error {
	if p.temp {
		return os.RemoveAll(p.root)
	}
	return nil
}

// dir is where the package with digest is unpacked.
func (p *packageStore) dir(digest string) string { return filepath.Join(p.root, "packages", digest) }

// has says whether the package with digest is kept.
func (p *packageStore) has(digest string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.packages[digest] != nil
}

// touch makes the package the most recently used one.
func (p *packageStore) touch(digest string) {
	now := p.now()
	p.mu.Lock()
	if sp := p.packages[digest]; sp != nil {
		sp.lastUsed = now
	}
	p.mu.Unlock()
	os.Chtimes(p.dir(digest), now, now) // its last use, for the next start
}

// reservation is room taken in the bound for something being written.
type reservation struct {
	p    *packageStore
	what string // "the package", "the run's working copy"
	n    int64
}

func (p *packageStore) reserve(what string) *reservation { return &reservation{p: p, what: what} }

// add takes n more bytes of room, making room when there is none: 413
// when it cannot.
func (r *reservation) add(n int64) error {
	p := r.p
	p.mu.Lock()
	if p.used+n <= p.limit {
		p.used += n
		r.n += n
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	// Room is needed: the packages nothing pins go, least recently used
	// first. The pins hold while they are evicted, so that an activation
	// cannot take a package that is going.
	pinned, release := p.pinned()
	p.mu.Lock()
	var trash []string
	var candidates []string
	for d := range p.packages {
		if !pinned[d] {
			candidates = append(candidates, d)
		}
	}
	sort.Slice(candidates, func(i, j int) bool {
		return p.packages[candidates[i]].lastUsed.Before(p.packages[candidates[j]].lastUsed)
	})
	for _, d := range candidates {
		if p.used+n <= p.limit {
			break
		}
		if dir, ok := p.evict(d); ok {
			trash = append(trash, dir)
		}
	}
	var err error
	if p.used+n <= p.limit {
		p.used += n
		r.n += n
	} else {
		var pinnedCost int64
		for d, sp := range p.packages {
			if pinned[d] {
				pinnedCost += sp.cost
			}
		}
		err = noRoom(r.what, p.used, p.limit, pinnedCost)
	}
	p.mu.Unlock()
	release()
	for _, dir := range trash {
		os.RemoveAll(dir)
	}
	return err
}

// evict takes the package out of the store and renames its directory
// aside, for the caller to remove outside the lock. The caller holds mu.
func (p *packageStore) evict(digest string) (string, bool) {
	sp := p.packages[digest]
	if sp == nil {
		return "", false
	}
	delete(p.packages, digest)
	p.used -= sp.cost
	trash, err := os.MkdirTemp(filepath.Join(p.root, "incoming"), "evicted-*")
	if err != nil {
		return p.dir(digest), true // removed where it is
	}
	if err := os.Rename(p.dir(digest), filepath.Join(trash, "package")); err != nil {
		os.RemoveAll(trash)
		return p.dir(digest), true
	}
	return trash, true
}

// evictOne takes the package with digest out, when it is kept, and
// returns its directory renamed aside for the caller to remove. The caller
// holds the pins (e.mu).
func (p *packageStore) evictOne(digest string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evict(digest)
}

func noRoom(what string, used, limit, pinned int64) error {
	return errorf(http.StatusRequestEntityTooLarge,
		"no room for %s: the emulator keeps at most %d bytes of pushed packages and their runs' working copies "+
			"(devhook emulate --max-pushed); %d are taken, %d of them by packages in use (active on an instance, "+
			"or the package of a queued or running run) and the rest by uploads and runs in progress; "+
			"raise --max-pushed, or push a smaller package",
		what, limit, used, pinned)
}

// release gives the room back.
func (r *reservation) release() {
	r.p.mu.Lock()
	r.p.used -= r.n
	r.n = 0
	r.p.mu.Unlock()
}

// shrink gives back n bytes of the room.
func (r *reservation) shrink(n int64) {
	r.p.mu.Lock()
	r.p.used -= n
	r.n -= n
	r.p.mu.Unlock()
}

// commit makes the room the package's with digest, now kept at its dir.
func (r *reservation) commit(digest string) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.packages[digest]; sp != nil { // a concurrent upload of the same bytes came first
		p.used -= r.n
		r.n = 0
		sp.lastUsed = p.now()
		return
	}
	p.packages[digest] = &storedPackage{cost: r.n, lastUsed: p.now()}
	r.n = 0
}

// reservingWriter counts what it writes toward a reservation, before
// writing it.
type reservingWriter struct {
	w io.Writer
	r *reservation
}

func (rw reservingWriter) Write(b []byte) (int, error) {
	if err := rw.r.add(int64(len(b))); err != nil {
		return 0, err
	}
	return rw.w.Write(b)
}

// packageInfo is what the emulator keeps of an unpacked package.
type packageInfo struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`  // bytes of the gzip'd tar
	Files  int    `json:"files"` // regular files in it
	// Executables are the executable names (main.py, main, main.jar) at
	// the package's top.
	Executables []string `json:"executables"`
	// ActivateBy is when an application's package that was never
	// activated is removed; zero once active.
	ActivateBy time.Time `json:"activate_by,omitzero"`
}

func (pi *packageInfo) has(name string) bool {
	for _, n := range pi.Executables {
		if n == name {
			return true
		}
	}
	return false
}

// receive reads a package from r (at most maxBytes, else 413), checks and
// unpacks it, and returns what it holds: 400 with the reason when it is
// not a gzip'd tar of files, or lacks every executable; 413 when the
// bound has no room for it.
func (p *packageStore) receive(r io.Reader, maxBytes, maxUnpacked int64) (*packageInfo, error) {
	f, err := os.CreateTemp(filepath.Join(p.root, "incoming"), "package-*")
	if err != nil {
		return nil, fmt.Errorf("emulator: keeping the package: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	gzRoom := p.reserve("the package")
	defer gzRoom.release()
	if err := gzRoom.add(blockSize); err != nil { // the file itself
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(writeTagged{reservingWriter{f, gzRoom}}, h), io.LimitReader(r, maxBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		var ae *apiError
		var we errWriting
		switch {
		case errors.As(err, &mbe):
			return nil, packageTooLarge(maxBytes)
		case errors.As(err, &ae):
			return nil, ae
		case errors.As(err, &we):
			return nil, diskError("keeping the package", we.err)
		}
		return nil, errorf(http.StatusBadRequest, "reading the package: %v", err)
	}
	if n > maxBytes {
		return nil, packageTooLarge(maxBytes)
	}
	if n == 0 {
		return nil, errorf(http.StatusBadRequest, "the package is empty; PUT the application's files as a gzip'd tar (Content-Type: application/gzip)")
	}
	info := &packageInfo{Digest: hex.EncodeToString(h.Sum(nil)), Size: n}
	final := p.dir(info.Digest)
	if p.has(info.Digest) {
		// The same bytes were pushed before: what they unpack to is there.
		if err := describe(final, info); err == nil {
			p.touch(info.Digest)
			return info, nil
		}
		info.Files, info.Executables = 0, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(p.root, "incoming"), "unpack-*")
	if err != nil {
		return nil, fmt.Errorf("emulator: unpacking the package: %w", err)
	}
	defer os.RemoveAll(tmp)
	room := p.reserve("the package")
	defer room.release()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("emulator: reading the package back: %w", err)
	}
	if err := unpack(bufio.NewReader(f), tmp, maxUnpacked, info, room); err != nil {
		return nil, err
	}
	if len(info.Executables) == 0 {
		return nil, errorf(http.StatusBadRequest, "the package has no executable: it needs main.py (python), main (go) or main.jar (java) at its top")
	}
	// The room taken is made exactly what the tree counts, as the next
	// start counts it (directories made for files' parents too).
	cost, err := treeCost(tmp)
	if err != nil {
		return nil, fmt.Errorf("emulator: counting the unpacked package: %w", err)
	}
	if cost > room.n {
		if err := room.add(cost - room.n); err != nil {
			return nil, err
		}
	} else {
		room.shrink(room.n - cost)
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			p.touch(info.Digest)
			return info, nil // a concurrent PUT of the same bytes won
		}
		return nil, fmt.Errorf("emulator: keeping the unpacked package: %w", err)
	}
	room.commit(info.Digest)
	p.touch(info.Digest)
	return info, nil
}

// errWriting is an error of the writer io.Copy wrote to, told apart from
// one of the reader.
type errWriting struct{ err error }

func (w errWriting) Error() string { return w.err.Error() }
func (w errWriting) Unwrap() error { return w.err }

// writeTagged wraps its writer's errors in errWriting, except a refusal
// (*apiError), which stays what it is.
type writeTagged struct{ w io.Writer }

func (t writeTagged) Write(b []byte) (int, error) {
	n, err := t.w.Write(b)
	var ae *apiError
	if err != nil && !errors.As(err, &ae) {
		err = errWriting{err}
	}
	return n, err
}

// diskError is a failed write of the emulator's own: 507 when its disk
// is full (the bound is larger than the room there is), else 500.
func diskError(doing string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return errorf(http.StatusInsufficientStorage, "%s: the emulator's disk is full (%v): free some room there, or lower devhook emulate --max-pushed below what the disk holds", doing, err)
	}
	return fmt.Errorf("emulator: %s: %w", doing, err)
}

// describe fills info from a package already unpacked in dir.
func describe(dir string, info *packageInfo) error {
	err := filepath.WalkDir(dir, func(pth string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info.Files++
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, typ := range executableTypes() {
		exe, _ := executable(typ)
		if fi, err := os.Stat(filepath.Join(dir, exe)); err == nil && fi.Mode().IsRegular() {
			info.Executables = append(info.Executables, exe)
		}
	}
	return nil
}

func packageTooLarge(limit int64) error {
	return errorf(http.StatusRequestEntityTooLarge, "the package is larger than %d bytes, the largest the emulator takes (devhook emulate --max-package)", limit)
}

// unpack writes the gzip'd tar r into dir, filling info; each entry's
// room is taken from room before it is written.
func unpack(r io.Reader, dir string, maxUnpacked int64, info *packageInfo, room *reservation) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return errorf(http.StatusBadRequest, "the package is not gzip-compressed (%v); PUT a gzip'd tar of the application's files", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var total int64
	entries := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errorf(http.StatusBadRequest, "the package is not a valid tar archive after %d entries: %v", entries, err)
		}
		entries++
		if entries > maxPackageEntries {
			return errorf(http.StatusBadRequest, "the package has more than %d entries", maxPackageEntries)
		}
		name, ok := entryName(hdr.Name)
		if !ok {
			return errorf(http.StatusBadRequest, "the package's entry %q leaves the package (an absolute name or ..); entries are relative paths inside it", hdr.Name)
		}
		if name == "" {
			continue // "." or "./"
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := room.add(diskCost(-1)); err != nil {
				return err
			}
			if err := os.MkdirAll(target, 0o700); err != nil {
				return errorf(http.StatusBadRequest, "the package's directory %q cannot be made: %v", hdr.Name, err)
			}
		case tar.TypeReg, tar.TypeRegA:
			if hdr.Size < 0 || total+hdr.Size > maxUnpacked {
				return errorf(http.StatusBadRequest, "the package unpacks to more than %d bytes", maxUnpacked)
			}
			total += hdr.Size
			if err := room.add(diskCost(hdr.Size)); err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return errorf(http.StatusBadRequest, "the package's entry %q cannot be written: %v", hdr.Name, err)
			}
			mode := fs.FileMode(hdr.Mode&0o755) | 0o600
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return errorf(http.StatusBadRequest, "the package's entry %q cannot be written: %v", hdr.Name, err)
			}
			_, err = io.Copy(writeTagged{out}, io.LimitReader(tr, hdr.Size))
			if cerr := out.Close(); err == nil && cerr != nil {
				err = errWriting{cerr}
			}
			var we errWriting
			switch {
			case errors.As(err, &we):
				return diskError("unpacking the package", we.err)
			case err != nil:
				return errorf(http.StatusBadRequest, "the package's file %q is cut short: %v", hdr.Name, err)
			}
			info.Files++
			for _, typ := range executableTypes() {
				if exe, _ := executable(typ); name == exe && !info.has(name) {
					info.Executables = append(info.Executables, name)
				}
			}
		case tar.TypeXGlobalHeader:
		default:
			return errorf(http.StatusBadRequest, "the package's entry %q is not a regular file or directory (tar type %q): links and devices are not taken", hdr.Name, string(hdr.Typeflag))
		}
	}
	if entries == 0 {
		return errorf(http.StatusBadRequest, "the package is a tar archive with no entries")
	}
	return nil
}

// entryName cleans a tar entry's name; ok is false when it is absolute or
// climbs out with "..".
func entryName(n string) (string, bool) {
	n = strings.ReplaceAll(n, "\\", "/")
	if strings.HasPrefix(n, "/") || (len(n) > 1 && n[1] == ':') {
		return "", false
	}
	c := path.Clean(n)
	if c == "." {
		return "", true
	}
	if c == ".." || strings.HasPrefix(c, "../") || bytes.IndexByte([]byte(c), 0) >= 0 {
		return "", false
	}
	return c, true
}

// workingCopy copies the package with digest into a fresh directory under
// work/, each file's room taken from the bound before it is written, and
// returns it with what removes it and gives the room back.
func (p *packageStore) workingCopy(digest, runID string) (string, func(), error) {
	src := p.dir(digest)
	if !p.has(digest) {
		return "", nil, fmt.Errorf("the pushed package %s is gone from %s: push the application again", digest[:12], src)
	}
	p.touch(digest)
	room := p.reserve("the run's working copy")
	dst, err := os.MkdirTemp(filepath.Join(p.root, "work"), "run-"+safeName(runID)+"-*")
	if err != nil {
		return "", nil, fmt.Errorf("making the run's working copy: %w", err)
	}
	remove := func() {
		os.RemoveAll(dst)
		room.release()
	}
	err = filepath.WalkDir(src, func(pth string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, pth)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if err := room.add(diskCost(-1)); err != nil {
				return err
			}
			return os.MkdirAll(target, 0o700)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if err := room.add(diskCost(fi.Size())); err != nil {
			return err
		}
		return copyFile(pth, target, fi.Mode().Perm())
	})
	if err != nil {
		remove()
		var ae *apiError
		if errors.As(err, &ae) {
			return "", nil, errors.New(ae.msg)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil, fmt.Errorf("the pushed package %s is gone from %s: push the application again", digest[:12], src)
		}
		return "", nil, fmt.Errorf("making the run's working copy: %w", err)
	}
	return dst, remove, nil
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// safeName keeps letters, digits and dashes of s, for a directory name.
func safeName(s string) string {
	b := []byte(s)
	out := b[:0]
	for _, c := range b {
		if c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
			out = append(out, c)
		}
	}
	if len(out) > 40 {
		out = out[:40]
	}
	return string(out)
}
