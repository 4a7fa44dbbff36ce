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

// maxPackageEntries bounds the entries of one package.
const maxPackageEntries = 100_000

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
	root string
	temp bool // root was made by openPackages and goes with close
}

func openPackages(dataDir string) (*packageStore, error) {
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
	return &packageStore{root: root, temp: temp}, nil
}

func (p *packageStore) close() error {
	if p.temp {
		return os.RemoveAll(p.root)
	}
	return nil
}

// dir is where the package with digest is unpacked.
func (p *packageStore) dir(digest string) string { return filepath.Join(p.root, "packages", digest) }

// packageInfo is what the emulator keeps of an unpacked package.
type packageInfo struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`  // bytes of the gzip'd tar
	Files  int    `json:"files"` // regular files in it
	// Executables are the executable names (main.py, main, main.jar) at
	// the package's top.
	Executables []string `json:"executables"`
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
// not a gzip'd tar of files, or lacks every executable.
func (p *packageStore) receive(r io.Reader, maxBytes, maxUnpacked int64) (*packageInfo, error) {
	f, err := os.CreateTemp(filepath.Join(p.root, "incoming"), "package-*")
	if err != nil {
		return nil, fmt.Errorf("emulator: keeping the package: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, maxBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, packageTooLarge(maxBytes)
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
	tmp, err := os.MkdirTemp(filepath.Join(p.root, "incoming"), "unpack-*")
	if err != nil {
		return nil, fmt.Errorf("emulator: unpacking the package: %w", err)
	}
	defer os.RemoveAll(tmp)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("emulator: reading the package back: %w", err)
	}
	if err := unpack(bufio.NewReader(f), tmp, maxUnpacked, info); err != nil {
		return nil, err
	}
	if len(info.Executables) == 0 {
		return nil, errorf(http.StatusBadRequest, "the package has no executable: it needs main.py (python), main (go) or main.jar (java) at its top")
	}
	if _, err := os.Stat(final); err == nil {
		return info, nil // the same bytes were pushed before
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return info, nil // a concurrent PUT of the same bytes won
		}
		return nil, fmt.Errorf("emulator: keeping the unpacked package: %w", err)
	}
	return info, nil
}

func packageTooLarge(limit int64) error {
	return errorf(http.StatusRequestEntityTooLarge, "the package is larger than %d bytes, the largest the emulator takes (devhook emulate --max-package)", limit)
}

// unpack writes the gzip'd tar r into dir, filling info.
func unpack(r io.Reader, dir string, maxUnpacked int64, info *packageInfo) error {
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
			if err := os.MkdirAll(target, 0o700); err != nil {
				return errorf(http.StatusBadRequest, "the package's directory %q cannot be made: %v", hdr.Name, err)
			}
		case tar.TypeReg, tar.TypeRegA:
			if hdr.Size < 0 || total+hdr.Size > maxUnpacked {
				return errorf(http.StatusBadRequest, "the package unpacks to more than %d bytes", maxUnpacked)
			}
			total += hdr.Size
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return errorf(http.StatusBadRequest, "the package's entry %q cannot be written: %v", hdr.Name, err)
			}
			mode := fs.FileMode(hdr.Mode&0o755) | 0o600
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return errorf(http.StatusBadRequest, "the package's entry %q cannot be written: %v", hdr.Name, err)
			}
			_, err = io.Copy(out, io.LimitReader(tr, hdr.Size))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
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
// work/ and returns it; the caller removes it.
func (p *packageStore) workingCopy(digest, runID string) (string, error) {
	src := p.dir(digest)
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("the pushed package %s is gone from %s: push the application again", digest[:12], src)
	}
	dst, err := os.MkdirTemp(filepath.Join(p.root, "work"), "run-"+safeName(runID)+"-*")
	if err != nil {
		return "", fmt.Errorf("making the run's working copy: %w", err)
	}
	err = filepath.WalkDir(src, func(pth string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, pth)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return copyFile(pth, target, fi.Mode().Perm())
	})
	if err != nil {
		os.RemoveAll(dst)
		return "", fmt.Errorf("making the run's working copy: %w", err)
	}
	return dst, nil
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
