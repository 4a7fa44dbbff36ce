// Package jsonfile keeps a small map of values in a JSON file: the few
// things a command remembers from one run to the next, such as listen's
// channel per relay (channels.json) and the webhooks listen --register
// created (webhooks.json).
//
// The file is read whole and written whole: to a temporary file beside
// it, synced, then renamed over it, so that a crash leaves the old file
// or the new one, never half of one. It is created with mode 0600, as
// what it holds (channel tokens) is no one else's to read. A file that is
// not a JSON object is never overwritten: Load returns a *CorruptError,
// and the caller says what to do with it.
package jsonfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Map is the JSON object in one file, from keys to values of type V.
// Its methods may be called from many goroutines: each read-modify-write
// is whole within this process (across processes, the caller holds the
// directory, as listen does with its data directory's lock).
type Map[V any] struct {
	path string
	mu   sync.Mutex
}

// New is the map in the file at path, which need not exist yet.
func New[V any](path string) *Map[V] {
	return &Map[V]{path: path}
}

// Path is the file's path.
func (m *Map[V]) Path() string { return m.path }

// CorruptError is a file that is not a JSON object of values of the
// map's type. It is left as it is.
type CorruptError struct {
	Path string
	Err  error // what the JSON decoder said
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s is not valid JSON (%v)", e.Path, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Load returns the whole map; empty when the file does not exist.
func (m *Map[V]) Load() (map[string]V, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.load()
}

// Get returns the value of key, and whether there is one.
func (m *Map[V]) Get(key string) (V, bool, error) {
	all, err := m.Load()
	v, ok := all[key]
	return v, ok, err
}

// Put sets key to v and writes the file.
func (m *Map[V]) Put(key string, v V) error {
	return m.Update(func(all map[string]V) bool {
		all[key] = v
		return true
	})
}

// Update reads the map, lets change modify it, and writes the file when
// change returns true.
func (m *Map[V]) Update(change func(map[string]V) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	all, err := m.load()
	if err != nil {
		return err
	}
	if !change(all) {
		return nil
	}
	return m.write(all)
}

func (m *Map[V]) load() (map[string]V, error) {
	all := map[string]V{}
	b, err := os.ReadFile(m.path)
	if errors.Is(err, fs.ErrNotExist) {
		return all, nil
	} else if err != nil {
		return nil, fmt.Errorf("jsonfile: read %s: %w", m.path, err)
	}
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, &CorruptError{Path: m.path, Err: err}
	}
	if all == nil { // the file says null
		all = map[string]V{}
	}
	return all, nil
}

// write replaces the file with all: a temporary file in the same
// directory (so that the rename stays on one file system), synced, then
// renamed over it. A temporary file a crash left is another name, and
// harmless.
func (m *Map[V]) write(all map[string]V) error {
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return fmt.Errorf("jsonfile: encode %s: %w", m.path, err)
	}
	b = append(b, '\n')
	f, err := os.CreateTemp(filepath.Dir(m.path), "."+filepath.Base(m.path)+".*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("jsonfile: write %s: %w", m.path, err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, m.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("jsonfile: write %s: %w", m.path, err)
	}
	return nil
}
