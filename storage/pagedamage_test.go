package storage_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// The damaged-page fixtures: a small deliveries file (1 KiB pages), and
// copies of it with 64 bytes from a seeded generator written over one page
// of each kind bbolt has. fixtures (recovery_test.go) writes them with
// -update-fixtures. The store's bytes vary from run to run (bbolt writes
// the buckets of a transaction in map order), so the damaged copies are
// made from db-intact-pages.db as committed, and TestFixtures checks that
// each is exactly that damage of it.

const fixturePageSize = 1024

// pageKinds are the damaged-page fixtures, by the kind of page damaged.
var pageKinds = []string{"meta0", "meta1", "freelist", "branch", "leaf", "overflow"}

// pageStoreFixture returns a deliveries file of fixturePageDeliveries deliveries, one of them
// with a body that spans several pages.
func pageStoreFixture(t *testing.T) []byte {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.WithBodiesInBbolt(storage.WithPageSize(storage.Config{MaxDeliveries: -1, MaxAge: -1,
		Now: func() time.Time { return t0 }}, fixturePageSize)))
	if err != nil {
		t.Fatal(err)
	}
	var ds []*devhook.Delivery
	for i := range fixturePageDeliveries {
		d := newDelivery(i)
		if i == largeBody {
			d.Body = bytes.Repeat([]byte(`{"padding":"0123456789abcdef"}`), 120)
		}
		ds = append(ds, d)
	}
	if err := db.PutDeliveriesTx(ds); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// largeBody is the fixture's delivery whose body spans overflow pages.
const largeBody = 12

// fixturePageDeliveries is how many deliveries the page fixtures hold.
const fixturePageDeliveries = 24

// pageOf returns the id of a page of the given kind in the store file b:
// one the tree uses, never a free one.
func pageOf(t *testing.T, b []byte, kind string) uint64 {
	switch kind {
	case "meta0":
		return 0
	case "meta1":
		return 1
	case "freelist":
		// The freelist of the newer meta page (txid at byte 64, the
		// freelist's page at byte 48 of a meta page).
		le := binary.NativeEndian
		m := 0
		if le.Uint64(b[fixturePageSize+64:]) > le.Uint64(b[64:]) {
			m = fixturePageSize
		}
		return le.Uint64(b[m+48:])
	}
	path := filepath.Join(t.TempDir(), "devhook.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	var found uint64
	err = bdb.View(func(tx *bolt.Tx) error {
		for id := 2; id < int(tx.Size())/fixturePageSize; id++ {
			p, err := tx.Page(id)
			if err != nil || p == nil {
				continue
			}
			switch {
			case kind == "freelist" && p.Type == "freelist",
				kind == "branch" && p.Type == "branch",
				kind == "leaf" && p.Type == "leaf" && p.OverflowCount == 0 && p.Count > 1,
				kind == "overflow" && p.Type == "leaf" && p.OverflowCount > 0:
				found = uint64(id)
				if kind == "overflow" {
					found++ // the page after the first: the value's bytes alone
				}
				return nil
			}
		}
		return errors.New("none")
	})
	if err != nil {
		t.Fatalf("no %s page in the fixture store: %v", kind, err)
	}
	return found
}

// damagedPage returns b with 64 bytes from a generator seeded by the kind
// written over the page of that kind, from its start (for an overflow
// page, which has no header: from its middle).
func damagedPage(t *testing.T, b []byte, kind string) []byte {
	id := pageOf(t, b, kind)
	off := int(id) * fixturePageSize
	if kind == "overflow" {
		off += fixturePageSize / 2
	}
	var seed [8]byte
	copy(seed[:], kind)
	r := rand.New(rand.NewPCG(29, binary.BigEndian.Uint64(seed[:])))
	out := bytes.Clone(b)
	for i := range 64 {
		out[off+i] = byte(r.Uint32())
	}
	return out
}

func pageFixtures(t *testing.T) map[string][]byte {
	store, err := os.ReadFile(filepath.Join("testdata", "db-intact-pages.db"))
	if *updateFixtures || err != nil {
		store = pageStoreFixture(t)
	}
	m := map[string][]byte{"db-intact-pages.db": store}
	for _, kind := range pageKinds {
		m["db-damaged-"+kind+".db"] = damagedPage(t, store, kind)
	}
	return m
}

// Every damaged page kind, opened as devhook listen opens the store: a
// clear error naming the file, the file set aside as it was, the journal
// beside it untouched and applied to the new file the next Open makes;
// and as deliveries list opens it: the same error, nothing touched.
func TestOpen_DamagedPages(t *testing.T) {
	intact, err := os.ReadFile(filepath.Join("testdata", "db-intact-pages.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range pageKinds {
		name := "db-damaged-" + kind + ".db"
		t.Run(kind, func(t *testing.T) {
			if kind == "overflow" {
				damagedValue(t, name)
				return
			}
			dir := t.TempDir()
			fixture := copyFixture(t, name, dir, "devhook.db")
			if bytes.Equal(fixture, intact) {
				t.Fatalf("%s is not damaged", name)
			}
			path := filepath.Join(dir, "devhook.db")
			journal := copyFixture(t, "journal-intact.journal0", dir, "devhook.db.journal0")
			cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1, Now: func() time.Time { return t0 }}

			ro := cfg
			ro.ReadOnly = true
			_, err := storage.Open(path, ro)
			if err == nil {
				t.Fatal("read-only Open of a damaged file succeeded")
			}
			if !errors.Is(err, storage.ErrDamaged) || !containsAll(err.Error(), path, "damaged", "move it away") {
				t.Errorf("read-only Open: %q, want it to name the file, say it is damaged and what to do", err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, fixture) {
				t.Fatal("a read-only Open changed the file")
			}
			if got, _ := os.ReadFile(path + ".journal0"); !bytes.Equal(got, journal) {
				t.Fatal("a read-only Open changed the journal")
			}

			if err := os.Mkdir(path+".bodies", 0o700); err != nil {
				t.Fatal(err)
			}
			bodies := copyFixture(t, "bodies-intact.body", path+".bodies", "00000001")
			logs := newLogRecorder()
			cfg.Logf = logs.logf
			_, err = storage.Open(path, cfg)
			wantSetAside(t, err, path, fixture)
			// Its body files go with it.
			moved, _ := filepath.Glob(path + ".damaged-*.bodies")
			if got, err := os.ReadFile(filepath.Join(append(moved, "none")[0], "00000001")); err != nil || !bytes.Equal(got, bodies) {
				t.Errorf("body files set aside %q: %v; want the store's beside it", moved, err)
			}
			if _, err := os.Stat(path + ".bodies"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the body files of the damaged store stayed: %v", err)
			}
			if got, _ := os.ReadFile(path + ".journal0"); !bytes.Equal(got, journal) {
				t.Fatal("Open changed the journal beside the damaged file")
			}

			// Nothing else lost: the next Open makes a new file and applies
			// the journal to it.
			db, err := storage.Open(path, cfg)
			if err != nil {
				t.Fatalf("Open after the file was set aside: %v", err)
			}
			defer db.Close()
			if n, err := db.Count(); err != nil || n != fixtureN {
				t.Errorf("Count() = %d, %v; want the journal's %d deliveries", n, err, fixtureN)
			}
		})
	}
}

// The intact fixture opens, and every delivery reads back.
func TestOpen_IntactPagesFixture(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, "db-intact-pages.db", dir, "devhook.db")
	db := MustOpenPath(t, filepath.Join(dir, "devhook.db"), storage.Config{MaxDeliveries: -1, MaxAge: -1, ReadOnly: true})
	for i := range fixturePageDeliveries {
		d, err := db.Delivery(id(i))
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if i == largeBody && !strings.HasPrefix(string(d.Body), `{"padding"`) {
			t.Errorf("delivery %d: body %.40q", i, d.Body)
		}
	}
}

// damagedValue checks the fixture whose damage is in a value's bytes, on
// an overflow page, where no page check can see it: the file opens, the
// list shows every delivery, and reading the damaged one fails naming it,
// the file and what to do, while the others read as before.
func damagedValue(t *testing.T, name string) {
	for _, readOnly := range []bool{true, false} {
		dir := t.TempDir()
		fixture := copyFixture(t, name, dir, "devhook.db")
		path := filepath.Join(dir, "devhook.db")
		db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1, ReadOnly: readOnly})
		if err != nil {
			t.Fatalf("Open (read-only %v): %v", readOnly, err)
		}
		if list, err := db.List(devhook.Filter{Limit: 100}); err != nil || len(list) != fixturePageDeliveries {
			t.Errorf("List: %d, %v; want the %d deliveries", len(list), err, fixturePageDeliveries)
		}
		_, err = db.Delivery(id(largeBody))
		if !errors.Is(err, storage.ErrDamaged) || !containsAll(err.Error(), path, id(largeBody), "body", "checksum", "devhook deliveries delete "+id(largeBody), "evidence") {
			t.Errorf("Delivery of the damaged body: %v; want ErrDamaged naming the delivery, the file and what to do", err)
		}
		for i := range fixturePageDeliveries {
			if i == largeBody {
				continue
			}
			if _, err := db.Delivery(id(i)); err != nil {
				t.Errorf("delivery %d: %v", i, err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); readOnly && !bytes.Equal(got, fixture) {
			t.Error("a read-only Open changed the file")
		}
	}
}

// Pages damaged while the store is open (bbolt maps the file, so it reads
// the damage): every read fails with ErrDamaged naming the file, and
// nothing panics or faults out of the store, however the garbage makes
// bbolt fail.
func TestRead_PagesDamagedWhileOpen(t *testing.T) {
	for _, readOnly := range []bool{true, false} {
		dir := t.TempDir()
		copyFixture(t, "db-intact-pages.db", dir, "devhook.db")
		path := filepath.Join(dir, "devhook.db")
		db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1, ReadOnly: readOnly, Logf: t.Logf})
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		r := rand.New(rand.NewPCG(29, 1))
		junk := make([]byte, fixturePageSize)
		for off := int64(2 * fixturePageSize); off < fi.Size(); off += fixturePageSize {
			for i := range junk {
				junk[i] = byte(r.Uint32())
			}
			if _, err := f.WriteAt(junk, off); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		if _, err := db.List(devhook.Filter{}); !errors.Is(err, storage.ErrDamaged) || !strings.Contains(err.Error(), path) {
			t.Errorf("List of a damaged file (read-only %v): %v; want ErrDamaged naming the file", readOnly, err)
		}
		if _, err := db.Delivery(id(3)); !errors.Is(err, storage.ErrDamaged) || !strings.Contains(err.Error(), path) {
			t.Errorf("Delivery of a damaged file (read-only %v): %v; want ErrDamaged naming the file", readOnly, err)
		}
		if _, err := db.Count(); !errors.Is(err, storage.ErrDamaged) {
			t.Errorf("Count of a damaged file (read-only %v): %v; want ErrDamaged", readOnly, err)
		}
	}
}
