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
	"strings"
	"syscall"
	"time"
)

// A package received and unpacked: its bytes hashed as they arrive, each
// entry checked (names that stay inside, regular files and directories
// only, counted against the bound), and what it holds described.

// maxPackageEntries bounds the entries of one package.
const maxPackageEntries = 100_000

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
		return nil, errorf(http.StatusBadRequest, "reading the package: %w", err)
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
		return errorf(http.StatusInsufficientStorage, "%s: the emulator's disk is full (%w): free some room there, or lower devhook emulate --max-pushed below what the disk holds", doing, err)
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
		return errorf(http.StatusBadRequest, "the package is not gzip-compressed (%w); PUT a gzip'd tar of the application's files", err)
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
			return errorf(http.StatusBadRequest, "the package is not a valid tar archive after %d entries: %w", entries, err)
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
				return errorf(http.StatusBadRequest, "the package's directory %q cannot be made: %w", hdr.Name, err)
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
				return errorf(http.StatusBadRequest, "the package's entry %q cannot be written: %w", hdr.Name, err)
			}
			mode := fs.FileMode(hdr.Mode&0o755) | 0o600
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return errorf(http.StatusBadRequest, "the package's entry %q cannot be written: %w", hdr.Name, err)
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
				return errorf(http.StatusBadRequest, "the package's file %q is cut short: %w", hdr.Name, err)
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
