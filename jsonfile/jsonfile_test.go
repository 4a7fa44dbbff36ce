package jsonfile_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/devhook/devhook/jsonfile"
)

type creds struct {
	Channel string `json:"channel"`
	Token   string `json:"token"`
}

func TestMissingFileIsEmptyAndPutCreatesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "channels.json")
	m := jsonfile.New[creds](path)
	if _, ok, err := m.Get("local"); ok || err != nil {
		t.Fatalf("Get on no file = %v, %v", ok, err)
	}
	want := creds{"abc", "secret"}
	if err := m.Put("local", want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode %v, want 0600", perm)
	}
	// Another Map on the same file (the next run) reads it back.
	got, ok, err := jsonfile.New[creds](path).Get("local")
	if err != nil || !ok || got != want {
		t.Fatalf("Get after Put = %+v, %v, %v", got, ok, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("files beside it after a write: %v", entries)
	}
}

// A file that is not a JSON object of the map's values is reported with
// its path and never overwritten: it is the evidence, and may name
// something (a webhook) only it remembers.
func TestCorruptFilesAreLeftAlone(t *testing.T) {
	for _, name := range []string{"truncated.json", "array.json", "wrongtype.json", "empty.json"} {
		t.Run(name, func(t *testing.T) {
			orig, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(path, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			m := jsonfile.New[creds](path)
			_, _, err = m.Get("local")
			var ce *jsonfile.CorruptError
			if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), path) {
				t.Fatalf("Get = %v, want a CorruptError naming %s", err, path)
			}
			if err := m.Put("local", creds{Channel: "new"}); !errors.As(err, &ce) {
				t.Fatalf("Put over a corrupt file = %v, want a CorruptError", err)
			}
			if b, _ := os.ReadFile(path); string(b) != string(orig) {
				t.Errorf("the corrupt file was changed to %q", b)
			}
		})
	}
}

// A file holding null is an empty map (it is valid JSON, and nothing in
// it can be lost).
func TestNullIsEmpty(t *testing.T) {
	b, err := os.ReadFile("testdata/null.json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "webhooks.json")
	os.WriteFile(path, b, 0o600)
	m := jsonfile.New[string](path)
	if all, err := m.Load(); err != nil || len(all) != 0 {
		t.Fatalf("Load = %v, %v", all, err)
	}
	if err := m.Put("k", "v"); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := m.Get("k"); v != "v" || !ok || err != nil {
		t.Fatalf("Get = %q, %v, %v", v, ok, err)
	}
}

// A temporary file a crash left beside the file changes nothing: the
// file is whole, and the next write goes through.
func TestLeftoverTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "webhooks.json")
	m := jsonfile.New[string](path)
	if err := m.Put("a", "1"); err != nil {
		t.Fatal(err)
	}
	for _, stale := range []string{path + ".tmp", filepath.Join(dir, ".webhooks.json.123.tmp")} {
		if err := os.WriteFile(stale, []byte(`{"half`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Put("b", "2"); err != nil {
		t.Fatal(err)
	}
	all, err := jsonfile.New[string](path).Load()
	if err != nil || all["a"] != "1" || all["b"] != "2" {
		t.Fatalf("Load = %v, %v", all, err)
	}
}

// Update writes only when told to, and only what it was given.
func TestUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "webhooks.json")
	m := jsonfile.New[string](path)
	if err := m.Update(func(map[string]string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an Update that changed nothing wrote the file: %v", err)
	}
	m.Put("team", "devhook-1")
	// Forget the key only when it still names the same value.
	forget := func(id string) func(map[string]string) bool {
		return func(all map[string]string) bool {
			if all["team"] != id {
				return false
			}
			delete(all, "team")
			return true
		}
	}
	if err := m.Update(forget("devhook-other")); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := m.Get("team"); v != "devhook-1" {
		t.Fatalf("another id removed the key: %q", v)
	}
	if err := m.Update(forget("devhook-1")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.Get("team"); ok {
		t.Fatal("the key is still there")
	}
}

// A directory that cannot take the file: the error names it, and no
// temporary file is left.
func TestWriteFails(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, nil, 0o600)
	m := jsonfile.New[string](filepath.Join(notDir, "webhooks.json"))
	if err := m.Put("k", "v"); err == nil || !strings.Contains(err.Error(), notDir) {
		t.Fatalf("Put under a file = %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// Writes from many goroutines each read, change and write the whole map:
// none is lost.
func TestConcurrentPuts(t *testing.T) {
	m := jsonfile.New[int](filepath.Join(t.TempDir(), "n.json"))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Put(fmt.Sprint(i), i); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	all, err := m.Load()
	if err != nil || len(all) != 20 {
		t.Fatalf("Load = %d keys, %v", len(all), err)
	}
}
