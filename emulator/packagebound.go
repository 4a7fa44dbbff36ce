package emulator

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
)

// The bound of all pushed packages (packages.go says what counts): room
// reserved before each byte is written, the least recently used unpinned
// package evicted when there is none.

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
