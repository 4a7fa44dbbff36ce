package storage_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// Damage inside the records of a leaf page (codec.go's envelope,
// damaged_records.go): a damaged record is that record's problem.

// format1N deliveries are in db-format1.db.
const format1N = 30

// format1Content returns the deliveries of db-format1.db, and the attempts
// of each (by index): deliveries with no attempt, one, and two (the second
// a replay with its request); a body and an answer longer than half a
// page (on overflow pages, with a checksum in the checks bucket).
// db-format1.db was written by devhook before record checksums, from this
// same function (then in a test of that version); it is never written
// again: it is what an older devhook left.
func format1Content() ([]*devhook.Delivery, map[int][]devhook.Attempt) {
	var ds []*devhook.Delivery
	atts := map[int][]devhook.Attempt{}
	for i := range format1N {
		d := newDelivery(i)
		if i == 12 {
			d.Body = bytes.Repeat([]byte(`{"padding":"0123456789abcdef"}`), 120)
		}
		ds = append(ds, d)
		switch i % 3 {
		case 0:
			a := newAttempt(i)
			a.Seq = 1
			r := newAttempt(i + 100)
			r.Seq, r.Kind = 2, devhook.AttemptReplay
			r.Request = &devhook.Request{Method: "POST", Path: "/hook", RawQuery: "x=1", Header: http.Header{"A": {"1", "2"}}, Body: []byte("edited"), Resigned: true}
			atts[i] = []devhook.Attempt{a, r}
		case 1:
			a := newAttempt(i)
			a.Seq = 1
			if i == 7 {
				a.Body = bytes.Repeat([]byte("long answer "), 100)
			}
			atts[i] = []devhook.Attempt{a}
		}
	}
	return ds, atts
}

// withAttempts returns d with atts, as Delivery reads it back.
func withAttempts(d *devhook.Delivery, atts []devhook.Attempt) *devhook.Delivery {
	c := *d
	c.Attempts = atts
	return &c
}

// equalDelivery reports whether got is want, byte for byte, times as
// instants.
func equalDelivery(got, want *devhook.Delivery) bool {
	g, w := *got, *want
	g.ReceivedAt, w.ReceivedAt = g.ReceivedAt.UTC(), w.ReceivedAt.UTC()
	if len(w.Body) == 0 && len(g.Body) == 0 {
		g.Body, w.Body = nil, nil
	}
	norm := func(as []devhook.Attempt) []devhook.Attempt {
		out := make([]devhook.Attempt, len(as))
		for i, a := range as {
			a.StartedAt = a.StartedAt.UTC()
			out[i] = a
		}
		return out
	}
	g.Attempts, w.Attempts = norm(g.Attempts), norm(w.Attempts)
	return reflect.DeepEqual(g, w)
}

// equalSummary reports whether got is want's list row.
func equalSummary(got devhook.Summary, want *devhook.Delivery) bool {
	w := want.Summarize()
	got.ReceivedAt, w.ReceivedAt = got.ReceivedAt.UTC(), w.ReceivedAt.UTC()
	return reflect.DeepEqual(got, w)
}

// listAll lists every delivery of db, page by page.
func listAll(t *testing.T, db *storage.DB) []devhook.Summary {
	t.Helper()
	var all []devhook.Summary
	before := ""
	for {
		page, err := db.List(devhook.Filter{Limit: storage.MaxListLimit, Before: before})
		if err != nil {
			t.Fatalf("List: %v; want the intact deliveries, the damaged ones skipped", err)
		}
		all = append(all, page...)
		if len(page) < storage.MaxListLimit {
			return all
		}
		before = page[len(page)-1].ID
	}
}

// plainText reports whether s has no control character and no invalid
// UTF-8: an error text never dumps a record's raw bytes.
func plainText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// A store written by devhook before record checksums reads as it did:
// every list row, delivery, body and attempt as written (summaries that
// end with their last attempt's key, as that journal wrote them, among
// them); nothing is taken for damage; an attempt added now gives its
// summary a checksum. Its journal (journal-format1.journal0) replays.
func TestFormat1_StillReads(t *testing.T) {
	ds, atts := format1Content()
	for _, readOnly := range []bool{true, false} {
		dir := t.TempDir()
		copyFixture(t, "db-format1.db", dir, "devhook.db")
		path := filepath.Join(dir, "devhook.db")
		logs := newLogRecorder()
		db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1, ReadOnly: readOnly, Logf: logs.logf})
		list := listAll(t, db)
		if len(list) != format1N {
			t.Fatalf("listed %d deliveries, want %d", len(list), format1N)
		}
		for i, s := range list {
			n := format1N - 1 - i
			if !equalSummary(s, withAttempts(ds[n], atts[n])) {
				t.Errorf("list row %d: %+v, want delivery %d's", i, s, n)
			}
		}
		for i, d := range ds {
			got, err := db.Delivery(d.ID)
			if err != nil {
				t.Fatalf("delivery %d: %v", i, err)
			}
			if !equalDelivery(got, withAttempts(d, atts[i])) {
				t.Errorf("delivery %d:\n%+v\nwant\n%+v", i, got, withAttempts(d, atts[i]))
			}
		}
		if rs, err := db.RunDeliveries("run-3"); err != nil || len(rs) != 4 {
			t.Errorf("run-3: %d deliveries, %v; want 4", len(rs), err)
		}
		if d := db.Damage(); d.Any() {
			t.Errorf("Damage() = %+v on an intact older store; logged %q", d, logs.lines())
		}
		if readOnly {
			continue
		}
		a := newAttempt(50)
		if a, err := db.AddAttempt(ds[1].ID, a); err != nil || a.Seq != 2 {
			t.Fatalf("AddAttempt to an older delivery: %+v, %v", a, err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		a.Seq = 2
		want := withAttempts(ds[1], append(append([]devhook.Attempt{}, atts[1]...), a))
		if got, err := db.Delivery(ds[1].ID); err != nil || !equalDelivery(got, want) {
			t.Errorf("after an attempt: %+v, %v", got, err)
		}
		if l := listAll(t, db); len(l) != format1N || !equalSummary(l[format1N-2], want) {
			t.Errorf("after an attempt: list row %+v", l[format1N-2])
		}
	}

	// The summaries of the fixture do end with their last attempt's key:
	// the case above read them.
	b, err := bolt.Open(filepath.Join("testdata", "db-format1.db"), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	trailing := 0
	_ = b.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("summaries")).ForEach(func(k, v []byte) error {
			if v[0] != 1 {
				t.Errorf("summary %s has format byte %#x, want 1", k, v[0])
			}
			if bytes.Contains(v, append(append([]byte{}, k...), 0)) {
				trailing++
			}
			return nil
		})
	})
	if trailing == 0 {
		t.Error("no summary of db-format1.db ends with an attempt's key: the fixture does not hold what it says")
	}

	// Its journal replays into a new file.
	dir := t.TempDir()
	copyFixture(t, "journal-format1.journal0", dir, "devhook.db.journal0")
	db := MustOpenPath(t, filepath.Join(dir, "devhook.db"), storage.Config{MaxDeliveries: -1, MaxAge: -1})
	for i := range fixtureN {
		a := newAttempt(i)
		a.Seq = 1
		got, err := db.Delivery(id(i))
		if err != nil || !equalDelivery(got, withAttempts(newDelivery(i), []devhook.Attempt{a})) {
			t.Errorf("delivery %d from an older journal: %+v, %v", i, got, err)
		}
	}
}

// A body longer than half a page damaged in a store written before record
// checksums: found by the checks bucket's, as it was.
func TestFormat1_DamagedOverflowBody(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, "db-format1-damaged-overflow.db", dir, "devhook.db")
	path := filepath.Join(dir, "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1, ReadOnly: true})
	_, err := db.Delivery(id(largeBody))
	if !errors.Is(err, storage.ErrDamaged) || !containsAll(err.Error(), path, id(largeBody), "body", "checksum", "devhook deliveries delete "+id(largeBody), "evidence") {
		t.Errorf("Delivery of the damaged body: %v; want ErrDamaged naming the delivery, the file and what to do", err)
	}
	if l := listAll(t, db); len(l) != fixturePageDeliveries {
		t.Errorf("listed %d, want %d", len(l), fixturePageDeliveries)
	}
}

// The record fixtures: db-records.db holds format1Content written by this
// devhook (1 KiB pages); the others are it with one kind of damage to the
// records inside its leaf pages, which Open's page checks do not read.
// As with the page fixtures, they are made from db-records.db as
// committed (a store's bytes vary from run to run).
const (
	damagedRecord = 14 // db-record-damaged.db: random bytes over its list row and its record
	cutRecord     = 17 // db-record-truncated.db: its list row cut short by 9 bytes
	newerRecord   = 20 // db-record-newer.db: its list row in a format a newer devhook would write
)

var recordKinds = []string{"damaged", "truncated", "newer"}

func recordStoreFixture(t *testing.T) []byte {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.WithPageSize(storage.Config{MaxDeliveries: -1, MaxAge: -1,
		Now: func() time.Time { return t0 }}, fixturePageSize))
	if err != nil {
		t.Fatal(err)
	}
	ds, atts := format1Content()
	for i, d := range ds {
		mustPut(t, db, d)
		for _, a := range atts[i] {
			if _, err := db.AddAttempt(d.ID, a); err != nil {
				t.Fatal(err)
			}
		}
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

// storedValue returns where the value of key in bucket lies in the store
// file b, and the value.
func storedValue(t *testing.T, b []byte, bucket, key string) (int, []byte) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	var v []byte
	_ = bdb.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket([]byte(bucket)).Get([]byte(key)))
		return nil
	})
	off := bytes.Index(b, append([]byte(key), v...)) // a leaf keeps a key and its value together
	if v == nil || off < 0 || bytes.Index(b[off+1:], append([]byte(key), v...)) >= 0 {
		t.Fatalf("the value of %s in %s is not once in the store file", key, bucket)
	}
	return off + len(key), v
}

func recordFixtures(t *testing.T, store []byte) map[string][]byte {
	m := map[string][]byte{}
	// Seeded random bytes over the middle of the list row and of the
	// record of a delivery: the page headers and element arrays intact.
	out := bytes.Clone(store)
	r := rand.New(rand.NewPCG(36, 1))
	for _, bucket := range []string{"summaries", "deliveries"} {
		off, v := storedValue(t, store, bucket, id(damagedRecord))
		for i := off + len(v)/2 - 16; i < off+len(v)/2+16; i++ {
			out[i] = byte(r.Uint32())
		}
	}
	m["db-record-damaged.db"] = out

	// A list row cut short: its element's value size made 9 bytes less.
	out = bytes.Clone(store)
	off, v := storedValue(t, store, "summaries", id(cutRecord))
	page := off / fixturePageSize * fixturePageSize
	count := int(binary.NativeEndian.Uint16(out[page+10:]))
	found := false
	for i := range count {
		e := page + 16 + 16*i // flags, pos, ksize, vsize
		pos, ksize := int(binary.NativeEndian.Uint32(out[e+4:])), int(binary.NativeEndian.Uint32(out[e+8:]))
		if e+pos+ksize == off {
			binary.NativeEndian.PutUint32(out[e+12:], uint32(len(v)-9))
			found = true
		}
	}
	if !found {
		t.Fatalf("no element of page %d holds the list row of delivery %d", page/fixturePageSize, cutRecord)
	}
	m["db-record-truncated.db"] = out

	// A list row of format 9, its checksum right: a newer devhook's.
	out = bytes.Clone(store)
	off, v = storedValue(t, store, "summaries", id(newerRecord))
	copy(out[off:], storage.SealSummary(v, 9))
	m["db-record-newer.db"] = out
	return m
}

func recordFixturesAll(t *testing.T) map[string][]byte {
	store, err := os.ReadFile(filepath.Join("testdata", "db-records.db"))
	if *updateFixtures || err != nil {
		store = recordStoreFixture(t)
	}
	m := recordFixtures(t, store)
	m["db-records.db"] = store
	return m
}

// Each record fixture, read-only (deliveries list) and writable (listen):
// Open succeeds and leaves the file in place; the list skips the damaged
// row, shows every other as written, and Damage counts it, naming the
// file; the delivery whose record is damaged fails to read, saying so and
// naming the file; the others read as written; a newer devhook's record is
// said to be one, garbage never is; no error shows raw bytes.
func TestRecordFixtures(t *testing.T) {
	ds, atts := format1Content()
	for _, kind := range recordKinds {
		name := "db-record-" + kind + ".db"
		for _, readOnly := range []bool{true, false} {
			t.Run(name+map[bool]string{true: "/read-only", false: "/writable"}[readOnly], func(t *testing.T) {
				dir := t.TempDir()
				fixture := copyFixture(t, name, dir, "devhook.db")
				path := filepath.Join(dir, "devhook.db")
				logs := newLogRecorder()
				db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1, ReadOnly: readOnly, Logf: logs.logf})
				bad := map[string]int{"damaged": damagedRecord, "truncated": cutRecord, "newer": newerRecord}[kind]
				if !readOnly {
					// Open's scan found it, and said so.
					if !containsAll(strings.Join(logs.lines(), "\n"), path, id(bad), "lists skip") {
						t.Errorf("Open logged %q, want the damaged record reported with the file", logs.lines())
					}
				}
				list := listAll(t, db)
				if len(list) != format1N-1 {
					t.Errorf("listed %d deliveries, want the %d intact ones", len(list), format1N-1)
				}
				for _, s := range list {
					var n int
					for n = range ds {
						if ds[n].ID == s.ID {
							break
						}
					}
					if s.ID == id(bad) || !equalSummary(s, withAttempts(ds[n], atts[n])) {
						t.Errorf("list row %+v is not delivery %d as written", s, n)
					}
				}
				checkDamage := func(want devhook.Damage) {
					t.Helper()
					dmg := db.Damage()
					if !reflect.DeepEqual(dmg, want) {
						t.Errorf("Damage() = %+v, want %+v", dmg, want)
					}
					if kind == "newer" && !containsAll(dmg.Summary()+dmg.Advice(), "newer devhook", "upgrade devhook") ||
						kind != "newer" && (strings.Contains(dmg.Summary()+dmg.Advice(), "newer") || !containsAll(dmg.Advice(), "move it away", path)) {
						t.Errorf("Damage says %q; %q", dmg.Summary(), dmg.Advice())
					}
				}
				want := devhook.Damage{File: path, Damaged: 1, IDs: []string{id(bad)}}
				if kind == "newer" {
					want.Damaged, want.Newer = 0, 1
				}
				if kind == "damaged" && !readOnly {
					want.Damaged = 2 // Open's scan read its record too
				}
				checkDamage(want)
				for i, d := range ds {
					got, err := db.Delivery(d.ID)
					if i == damagedRecord && kind == "damaged" {
						if !errors.Is(err, storage.ErrDamaged) || !containsAll(err.Error(), path, id(i), "damaged", "move it away") || !plainText(err.Error()) {
							t.Errorf("Delivery of the damaged record: %v; want ErrDamaged naming it, the file and what to do", err)
						}
						continue
					}
					if err != nil || !equalDelivery(got, withAttempts(d, atts[i])) {
						t.Errorf("delivery %d: %+v, %v; want it as written", i, got, err)
					}
				}
				if kind == "damaged" {
					want.Damaged = 2 // its list row and its record, each once
					checkDamage(want)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				if got, _ := os.ReadFile(path); readOnly && !bytes.Equal(got, fixture) {
					t.Error("a read-only Open changed the file")
				}
				if asides, _ := filepath.Glob(path + ".damaged-*"); len(asides) != 0 {
					t.Errorf("the file was set aside (%v): a damaged record is that record's problem", asides)
				}
			})
		}
	}
}

// recordPages returns the leaf pages of the store file b that hold
// records (every leaf but the root's, whose elements are the buckets),
// each with where its records' bytes lie: after its element array, to the
// end of its overflow pages.
func recordPages(t *testing.T, path string, ps int) [][2]int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.NativeEndian
	m := 0
	if le.Uint64(b[ps+64:]) > le.Uint64(b[64:]) {
		m = ps
	}
	root := le.Uint64(b[m+32:])
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	var spans [][2]int
	_ = bdb.View(func(tx *bolt.Tx) error {
		for id := 2; id < int(tx.Size())/ps; id++ {
			p, err := tx.Page(id)
			if err != nil || p == nil || p.Type != "leaf" || uint64(id) == root {
				continue
			}
			if from, to := id*ps+16+16*p.Count, (id+1+p.OverflowCount)*ps; from < to {
				spans = append(spans, [2]int{from, to})
			}
		}
		return nil
	})
	return spans
}

// Random spans of random bytes written over the records of a leaf page of
// a store of a few hundred deliveries, round after round (seeded): nothing
// panics, Open never refuses the file, the list never fails whole, a
// record is never taken for a newer devhook's, and every delivery either
// reads back exactly as written (its list row too) or is reported
// damaged: none changes silently. Errors never show raw bytes.
func TestDamagedLeaves_Fuzz(t *testing.T) {
	const n, ps = 300, 1024
	base := filepath.Join(t.TempDir(), "base.db")
	db, err := storage.Open(base, storage.WithPageSize(storage.Config{MaxDeliveries: -1, MaxAge: -1,
		Now: func() time.Time { return t0 }}, ps))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*devhook.Delivery{}
	var ids []string
	for i := range n {
		d := newDelivery(i)
		if i%37 == 5 {
			d.Body = bytes.Repeat([]byte(`{"padding":"0123456789abcdef"}`), 40+i%50)
		}
		mustPut(t, db, d)
		var as []devhook.Attempt
		for k := range i % 3 {
			a := newAttempt(i*10 + k)
			if i%41 == 7 {
				a.Body = bytes.Repeat([]byte("long answer "), 80)
			}
			if a, err = db.AddAttempt(d.ID, a); err != nil {
				t.Fatal(err)
			}
			as = append(as, a)
		}
		want[d.ID] = withAttempts(d, as)
		ids = append(ids, d.ID)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	pristine, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	pages := recordPages(t, base, ps)
	rounds := 60
	if testing.Short() {
		rounds = 10
	}
	r := rand.New(rand.NewPCG(36, 2))
	damagedSeen := 0
	for round := range rounds {
		dir := t.TempDir()
		path := filepath.Join(dir, "devhook.db")
		b := bytes.Clone(pristine)
		pg := pages[r.IntN(len(pages))]
		size := 1 + r.IntN(min(256, pg[1]-pg[0]))
		at := pg[0] + r.IntN(pg[1]-pg[0]-size+1)
		fill := r.IntN(3) // random bytes, 0xff (as in the probe), zeros
		for i := at; i < at+size; i++ {
			switch fill {
			case 0:
				b[i] = byte(r.Uint32())
			case 1:
				b[i] = 0xff
			case 2:
				b[i] = 0
			}
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		readOnly := round%2 == 0
		db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1, ReadOnly: readOnly, Logf: func(string, ...any) {}})
		if err != nil {
			t.Fatalf("round %d (%d bytes at %d): Open: %v", round, size, at, err)
		}
		list := listAll(t, db)
		listed := map[string]bool{}
		for _, s := range list {
			w, ok := want[s.ID]
			if !ok || listed[s.ID] || !equalSummary(s, w) {
				t.Errorf("round %d (%d bytes at %d): list row %+v changed silently", round, size, at, s)
			}
			listed[s.ID] = true
		}
		dmg := db.Damage()
		if missing := n - len(listed); missing > dmg.Damaged {
			var not []string
			for _, id := range ids {
				if !listed[id] {
					not = append(not, id)
				}
			}
			t.Errorf("round %d (%d bytes at %d, fill %d): %d deliveries not listed (%v), %d reported damaged (%+v)", round, size, at, fill, missing, not, dmg.Damaged, dmg)
		}
		if dmg.Newer != 0 {
			t.Errorf("round %d: %d records taken for a newer devhook's", round, dmg.Newer)
		}
		for _, id := range ids {
			got, err := db.Delivery(id)
			switch {
			case err == nil && !equalDelivery(got, want[id]):
				t.Errorf("round %d (%d bytes at %d): delivery %s changed silently", round, size, at, id)
			case err != nil && !errors.Is(err, storage.ErrDamaged):
				t.Errorf("round %d (%d bytes at %d): delivery %s: %v; want it as written, or ErrDamaged", round, size, at, id, err)
			case err != nil && (!plainText(err.Error()) || !strings.Contains(err.Error(), path)):
				t.Errorf("round %d: %q shows raw bytes, or names no file", round, err)
			case err != nil:
				damagedSeen++
			}
		}
		for run := range 7 {
			rs, err := db.RunDeliveries("run-" + string(rune('0'+run)))
			if err != nil {
				t.Errorf("round %d: run-%d: %v", round, run, err)
			}
			for _, s := range rs {
				if w, ok := want[s.ID]; !ok || !equalSummary(s, w) || s.Event.RunID != "run-"+string(rune('0'+run)) {
					t.Errorf("round %d: run-%d lists %+v, changed silently", round, run, s)
				}
			}
		}
		if d := db.Damage(); d.Any() && (!plainText(d.Summary()+d.Advice()) || !strings.Contains(d.Summary(), path)) {
			t.Errorf("round %d: Damage says %q", round, d.Summary())
		}
		if err := db.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
	}
	if damagedSeen == 0 {
		t.Error("no round damaged a delivery that a read then reported: the test damages nothing")
	}
}
