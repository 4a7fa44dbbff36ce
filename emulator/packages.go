package emulator

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Pushed packages. A package is a gzip'd tar of the application's files
// (docs/INTERFACE.md, "Pushing an application"). The emulator keeps each one
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
