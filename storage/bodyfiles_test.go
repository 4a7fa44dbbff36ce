package storage_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// bigDelivery is the i-th test delivery with a body that goes to a body
// file: bodyFixtureLen bytes, which say i.
func bigDelivery(i int) *devhook.Delivery {
	d := newDelivery(i)
	d.Body = append(d.Body, ' ')
	d.Body = append(d.Body, bytes.Repeat(fmt.Appendf(nil, "%d ", i), bodyFixtureLen)...)[:bodyFixtureLen]
	return d
}

const bodyFixtureLen = 600

// bodyFiles returns the names of the body files of the store at path.
func bodyFiles(t *testing.T, path string) []string {
	t.Helper()
	entries, err := os.ReadDir(path + ".bodies")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// wantBodies checks that every delivery of ds reads back with its body.
func wantBodies(t *testing.T, db *storage.DB, ds ...*devhook.Delivery) {
	t.Helper()
	for _, d := range ds {
		got, err := db.Delivery(d.ID)
		if err != nil {
			t.Fatalf("Delivery(%s): %v", d.ID, err)
		}
		if !bytes.Equal(got.Body, d.Body) {
			t.Fatalf("Delivery(%s): body of %d bytes, want the %d put", d.ID, len(got.Body), len(d.Body))
		}
	}
}

// TestBodyFiles_LargeBodiesOutOfBbolt: a body of storage.BodyFileMin bytes
// or more is in a body file, not in bbolt; it reads back after a reopen,
// and the file goes on filling.
func TestBodyFiles_LargeBodiesOutOfBbolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1}
	db := MustOpenPath(t, path, cfg)
	var ds []*devhook.Delivery
	for i := range 20 {
		d := newDelivery(i)
		if i%2 == 0 {
			d = bigDelivery(i)
		}
		mustPut(t, db, d)
		ds = append(ds, d)
	}
	wantBodies(t, db, ds...) // pending in the journal
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	wantBodies(t, db, ds...)
	if got := bodyFiles(t, path); !slices.Equal(got, []string{"00000001"}) {
		t.Fatalf("body files %q, want one", got)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(path+".bodies", "00000001"))
	if err != nil || fi.Size() != 16+10*bodyFixtureLen {
		t.Fatalf("body file: %v, %v bytes; want a header and 10 bodies", err, fi.Size())
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = bdb.View(func(tx *bolt.Tx) error {
		for i, d := range ds {
			inBolt := tx.Bucket([]byte("bodies")).Get([]byte(d.ID)) != nil
			if inBolt != (i%2 == 1) {
				t.Errorf("delivery %d (%d bytes of body): in bbolt's bodies %v", i, len(d.Body), inBolt)
			}
		}
		return nil
	})
	bdb.Close()

	db = MustOpenPath(t, path, cfg)
	defer db.Close()
	wantBodies(t, db, ds...)
	more := bigDelivery(20)
	mustPut(t, db, more)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	wantBodies(t, db, append(ds, more)...)
	if got := bodyFiles(t, path); !slices.Equal(got, []string{"00000001"}) {
		t.Fatalf("body files %q after reopening, want the one filled on", got)
	}
}

// TestBodyFiles_RemovedWithTheirDeliveries: retention and deletes remove
// a body file once none of its bodies is kept, but not the one being
// filled; deleting everything removes every one.
func TestBodyFiles_RemovedWithTheirDeliveries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: 30, MaxAge: -1})
	defer db.Close()
	db.SetBodyFileMax(4 * bodyFixtureLen) // full after a flush of 4 bodies
	next := 0
	put := func(n int) {
		t.Helper()
		for range n {
			mustPut(t, db, bigDelivery(next))
			next++
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		put(5) // a file each: 5 bodies of 600 bytes fill 4 × 600
	}
	if _, err := db.Prune(); err != nil {
		t.Fatal(err)
	}
	// 30 kept: deliveries 20 to 49, in files 5 to 10.
	if got, want := bodyFiles(t, path), []string{"00000005", "00000006", "00000007", "00000008", "00000009", "00000010"}; !slices.Equal(got, want) {
		t.Fatalf("body files after retention %q, want %q", got, want)
	}
	var kept []*devhook.Delivery
	for i := 20; i < 50; i++ {
		kept = append(kept, bigDelivery(i))
	}
	wantBodies(t, db, kept...)

	// File 5 holds 20 to 24: deleting them removes it, and deleting
	// the last file's leaves it, being filled.
	var ids []string
	for i := 20; i < 25; i++ {
		ids = append(ids, id(i))
	}
	ids = append(ids, id(45), id(46), id(47), id(48), id(49))
	if removed, err := db.Delete(ids); err != nil || len(removed) != len(ids) {
		t.Fatalf("Delete: %v, %v", removed, err)
	}
	if got, want := bodyFiles(t, path), []string{"00000006", "00000007", "00000008", "00000009", "00000010"}; !slices.Equal(got, want) {
		t.Fatalf("body files after Delete %q, want %q", got, want)
	}
	wantBodies(t, db, kept[5:25]...)

	if _, err := db.DeleteMatching(storage.Selection{}); err != nil {
		t.Fatal(err)
	}
	if got := bodyFiles(t, path); len(got) != 0 {
		t.Fatalf("body files after deleting everything %q, want none", got)
	}
	put(2)
	if got := bodyFiles(t, path); !slices.Equal(got, []string{"00000011"}) {
		t.Fatalf("body files %q, want a new one", got)
	}
	wantBodies(t, db, bigDelivery(50), bigDelivery(51))
}

// TestBodyFiles_DeletedBodiesZeroed: a body deleted is overwritten with
// zeros in the file that keeps others; they read as before.
func TestBodyFiles_DeletedBodiesZeroed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	defer db.Close()
	ds := []*devhook.Delivery{bigDelivery(0), bigDelivery(1), bigDelivery(2)}
	mustPut(t, db, ds...)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete([]string{id(1)}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(path+".bodies", "00000001"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 16+3*bodyFixtureLen || !bytes.Equal(b[16+bodyFixtureLen:16+2*bodyFixtureLen], make([]byte, bodyFixtureLen)) {
		t.Fatalf("body file of %d bytes: the deleted body is not zeros", len(b))
	}
	wantBodies(t, db, ds[0], ds[2])
}

// TestBodyFiles_KeptWhileARead: a body file is not removed while a read
// is under way, whose snapshot may still refer to it, but afterwards.
func TestBodyFiles_KeptWhileARead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	defer db.Close()
	db.SetBodyFileMax(bodyFixtureLen)
	for i := range 3 {
		mustPut(t, db, bigDelivery(i)) // a file each
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	release := db.HoldReads()
	if _, err := db.Delete([]string{id(0)}); err != nil {
		t.Fatal(err)
	}
	if got := bodyFiles(t, path); len(got) != 3 {
		t.Fatalf("body files %q while a read is under way, want all 3 kept", got)
	}
	release()
	if _, err := db.Delete([]string{id(1)}); err != nil {
		t.Fatal(err)
	}
	if got := bodyFiles(t, path); !slices.Equal(got, []string{"00000003"}) {
		t.Fatalf("body files %q, want the emptied ones removed", got)
	}
	wantBodies(t, db, bigDelivery(2))
}

// TestBodyFiles_FileLeftBehindIsRemovedAtOpen: a process that stopped
// after committing the removal of a file's last bodies, before removing
// the file, leaves its count at 0: the next Open removes it.
func TestBodyFiles_FileLeftBehindIsRemovedAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1}
	db := MustOpenPath(t, path, cfg)
	db.SetBodyFileMax(bodyFixtureLen)
	for i := range 2 {
		mustPut(t, db, bigDelivery(i))
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	first := filepath.Join(path+".bodies", "00000001")
	kept, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete([]string{id(0)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// As if the process had stopped before removing it: the file, and
	// bbolt's count of its bodies at 0.
	if err := os.WriteFile(first, kept, 0o600); err != nil {
		t.Fatal(err)
	}
	editBolt(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("bodyfiles")).Put([]byte{0, 0, 0, 1}, storage.BodyFileValue(0, int64(len(kept))))
	})
	db = MustOpenPath(t, path, cfg)
	defer db.Close()
	if got := bodyFiles(t, path); !slices.Equal(got, []string{"00000002"}) {
		t.Fatalf("body files %q, want the emptied one removed", got)
	}
	wantBodies(t, db, bigDelivery(1))
}

// The body file fixtures: db-bodyfiles.db is a store whose deliveries 0
// to fixtureN-1 have bodies of bodyFixtureLen bytes, all in its body file
// 00000001, which is bodies-intact.body; the others are that file
// damaged.
func bodyFileFixtures(t *testing.T) map[string][]byte {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.WithPageSize(storage.Config{MaxDeliveries: -1, MaxAge: -1}, fixturePageSize))
	release := db.HoldFlushes()
	for i := range fixtureN {
		mustPut(t, db, bigDelivery(i))
	}
	release()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	intact, err := os.ReadFile(filepath.Join(path+".bodies", "00000001"))
	if err != nil {
		t.Fatal(err)
	}
	at := func(i int) int { return 16 + i*bodyFixtureLen } // where body i starts
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(intact)) }
	return map[string][]byte{
		"db-bodyfiles.db":    store,
		"bodies-intact.body": intact,
		// Killed while writing the next batch, before bbolt committed it.
		"bodies-torn-tail.body": append(bytes.Clone(intact), intact[at(0):at(1)+100]...),
		// Cut short in the body of delivery fixtureDamaged.
		"bodies-truncated.body": intact[:at(fixtureDamaged)+bodyFixtureLen/2],
		// One bit flipped in the body of delivery fixtureDamaged.
		"bodies-damaged-middle.body": edit(func(b []byte) []byte { b[at(fixtureDamaged)+300] ^= 0x10; return b }),
		"bodies-wrong-magic.body":    edit(func(b []byte) []byte { b[0] = 'X'; return b }),
		"bodies-newer-version.body":  edit(func(b []byte) []byte { b[11] = 9; return b }),
		// Created, and killed before its header was written.
		"bodies-empty.body": {},
	}
}

// TestBodyFiles_Damaged: a body file damaged, cut short, of a newer
// devhook or missing fails the reads of the bodies it holds, each saying
// so, and no other; a start fills a new file beside it, which it leaves
// as it is: evidence.
func TestBodyFiles_Damaged(t *testing.T) {
	all := func(int) bool { return true }
	none := func(int) bool { return false }
	for _, c := range []struct {
		fixture string // "": no body file
		broken  func(i int) bool
		why     string
		newer   bool
	}{
		{fixture: "bodies-intact.body", broken: none},
		{fixture: "bodies-torn-tail.body", broken: none},
		{fixture: "bodies-truncated.body", broken: func(i int) bool { return i >= fixtureDamaged }, why: "cut short"},
		{fixture: "bodies-damaged-middle.body", broken: func(i int) bool { return i == fixtureDamaged }, why: "checksum"},
		{fixture: "bodies-wrong-magic.body", broken: all, why: "no devhook body file"},
		{fixture: "bodies-newer-version.body", broken: all, why: "newer devhook", newer: true},
		{fixture: "bodies-empty.body", broken: all, why: "cut short"},
		{fixture: "", broken: all, why: "missing"},
	} {
		t.Run(strings.TrimSuffix(c.fixture, ".body"), func(t *testing.T) {
			dir := t.TempDir()
			copyFixture(t, "db-bodyfiles.db", dir, "devhook.db")
			path := filepath.Join(dir, "devhook.db")
			file := filepath.Join(path+".bodies", "00000001")
			var evidence []byte
			if c.fixture != "" {
				if err := os.Mkdir(path+".bodies", 0o700); err != nil {
					t.Fatal(err)
				}
				evidence = copyFixture(t, c.fixture, path+".bodies", "00000001")
			}
			check := func(db *storage.DB) {
				t.Helper()
				for i := range fixtureN {
					d, err := db.Delivery(id(i))
					switch {
					case !c.broken(i) && err != nil:
						t.Errorf("delivery %d: %v, want it whole", i, err)
					case !c.broken(i) && !bytes.Equal(d.Body, bigDelivery(i).Body):
						t.Errorf("delivery %d: its body is not the one put", i)
					case c.broken(i) && err == nil:
						t.Errorf("delivery %d read, want its body's error", i)
					case c.broken(i) && c.newer && !errors.Is(err, storage.ErrNewerRecord):
						t.Errorf("delivery %d: %v, want ErrNewerRecord", i, err)
					case c.broken(i) && !c.newer && !errors.Is(err, storage.ErrDamaged):
						t.Errorf("delivery %d: %v, want ErrDamaged", i, err)
					case c.broken(i) && !strings.Contains(err.Error(), c.why):
						t.Errorf("delivery %d: %v, want it to say %q", i, err, c.why)
					case c.broken(i):
						// The rest of it reads: all but the body.
						wantPartial(t, d, err, bigDelivery(i), c.why)
					}
				}
				// Damage is what lists skip: they skip none of these.
				if d := db.Damage(); d.Any() {
					t.Errorf("Damage: %+v (%s), want nothing: a body that cannot be read is its delivery's, which lists show", d, d.Summary())
				}
				// The list does not read bodies: every row is there.
				if list, err := db.List(devhook.Filter{Limit: 100}); err != nil || len(list) != fixtureN {
					t.Errorf("List: %d rows, %v; want %d", len(list), err, fixtureN)
				}
			}
			ro, err := storage.Open(path, storage.Config{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			check(ro)
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}

			db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
			check(db)
			more := bigDelivery(fixtureN)
			mustPut(t, db, more)
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
			wantBodies(t, db, more)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if c.fixture == "" {
				return
			}
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.fixture == "bodies-intact.body" || c.fixture == "bodies-torn-tail.body" || c.fixture == "bodies-damaged-middle.body":
				// Filled on, after its end: no byte of it changed (a
				// damaged body is found when it is read).
				if !bytes.HasPrefix(got, evidence) || len(got) != len(evidence)+bodyFixtureLen {
					t.Errorf("body file: %d bytes, want the %d it had and the new body", len(got), len(evidence))
				}
			case !bytes.Equal(got, evidence):
				t.Errorf("the damaged body file was changed: evidence is kept as it is")
			}
		})
	}
}

// A damaged count of a body file's bodies (one bit flipped in its value
// in bucket bodyfiles, here the one that made 2 read 0 before the value
// had a checksum) never removes the file: the bodies of the deliveries
// still there read back, after a start and after a delete of another.
func TestBodyFiles_DamagedCountKeepsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf}
	threeInTwoFiles(t, path, cfg)
	editBolt(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("bodyfiles"))
		v := bytes.Clone(b.Get([]byte{0, 0, 0, 1}))
		v[7] ^= 0x02
		return b.Put([]byte{0, 0, 0, 1}, v)
	})

	db := MustOpenPath(t, path, cfg)
	wantBodies(t, db, bigDelivery(0), bigDelivery(1), bigDelivery(2))
	if _, err := db.Delete([]string{id(0)}); err != nil {
		t.Fatal(err)
	}
	wantBodies(t, db, bigDelivery(1), bigDelivery(2))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, cfg)
	defer db.Close()
	wantBodies(t, db, bigDelivery(1), bigDelivery(2))
	if got := bodyFiles(t, path); !slices.Contains(got, "00000001") {
		t.Fatalf("body files %q: the one whose count is damaged was removed", got)
	}
}

// A body's place (its value in bucket bodyrefs) found under another
// delivery's key, as a damaged page may show it, is that delivery's
// damage: reading it fails saying so, and deleting it neither zeroes
// the body that place holds nor counts it out of its file. Here
// deliveries 0 and 1 have each other's.
func TestBodyFiles_RefUnderAnotherKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	cfg := storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf}
	threeInTwoFiles(t, path, cfg)
	editBolt(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("bodyrefs"))
		v0, v1 := bytes.Clone(b.Get([]byte(id(0)))), bytes.Clone(b.Get([]byte(id(1))))
		if err := b.Put([]byte(id(0)), v1); err != nil {
			return err
		}
		return b.Put([]byte(id(1)), v0)
	})

	db := MustOpenPath(t, path, cfg)
	defer db.Close()
	if _, err := db.Delivery(id(0)); !errors.Is(err, storage.ErrDamaged) {
		t.Fatalf("Delivery(0) with delivery 1's place: %v, want ErrDamaged", err)
	}
	if _, err := db.Delete([]string{id(0)}); err != nil {
		t.Fatal(err)
	}
	// Delivery 1's body is where it was, not zeroed: a ref with the right
	// key would find it.
	b, err := os.ReadFile(filepath.Join(path+".bodies", "00000001"))
	if err != nil {
		t.Fatalf("body file 1: %v; want it kept with delivery 1's body", err)
	}
	if !bytes.Contains(b, bigDelivery(1).Body) {
		t.Fatalf("body file 1 no longer holds delivery 1's body: deleting delivery 0 zeroed it")
	}
	if _, err := db.Delete([]string{id(1)}); err != nil {
		t.Fatal(err)
	}
	wantBodies(t, db, bigDelivery(2))
}

// TestBodyFiles_TidiedWhenTheReadEnds: deletes while a read is under way
// leave their tidying to the end of the reads: once the last read ends,
// the file none of whose bodies is kept is gone and the deleted body in
// the file kept is zeros, without waiting for another delete or a start.
func TestBodyFiles_TidiedWhenTheReadEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	defer db.Close()
	db.SetBodyFileMax(bodyFixtureLen)
	mustPut(t, db, bigDelivery(0)) // file 1
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, bigDelivery(1), bigDelivery(2)) // file 2, one batch
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	release := db.HoldReads()
	if _, err := db.Delete([]string{id(0), id(1)}); err != nil {
		t.Fatal(err)
	}
	if got := bodyFiles(t, path); len(got) != 2 {
		t.Fatalf("body files %q while a read is under way, want both kept", got)
	}
	release()
	wantBodies(t, db, bigDelivery(2)) // a read, which ends with none under way
	if got := bodyFiles(t, path); !slices.Equal(got, []string{"00000002"}) {
		t.Fatalf("body files %q once the reads ended, want the emptied one removed", got)
	}
	b, err := os.ReadFile(filepath.Join(path+".bodies", "00000002"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 16+2*bodyFixtureLen || !bytes.Equal(b[16:16+bodyFixtureLen], make([]byte, bodyFixtureLen)) {
		t.Fatalf("body file 2 of %d bytes: the deleted body is not zeros once the reads ended", len(b))
	}
}

// TestBodyFiles_CloseSyncsEveryFileWritten: Close fsyncs bbolt, whose
// refs then survive a power loss, and removes the journal: every body
// file written since the last sync must be durable first, the ones the
// file being filled took over from included, and the directory that
// names the files started.
func TestBodyFiles_CloseSyncsEveryFileWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	db.SetBodyFileMax(bodyFixtureLen)
	var synced []string
	db.OnBodySync(func(p string) { synced = append(synced, p) })
	for i := range 3 {
		mustPut(t, db, bigDelivery(i)) // a file each
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"00000001", "00000002", "00000003", ""} {
		if p := filepath.Join(path+".bodies", want); !slices.Contains(synced, p) {
			t.Errorf("Close fsynced %q, not %s", synced, p)
		}
	}
}

// An Open that fails after opening the body file being filled (here: a
// journal of a newer devhook) closes it.
func TestBodyFiles_FailedOpenClosesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	mustPut(t, db, bigDelivery(0))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	copyFixture(t, "journal-newer-version.journal0", dir, "devhook.db.journal0")
	if db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1}); err == nil {
		db.Close()
		t.Fatal("Open with a newer devhook's journal succeeded")
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); strings.HasPrefix(target, path+".bodies") {
			t.Fatalf("fd %s still open on %s after the Open failed", fd.Name(), target)
		}
	}
}

// TestBodyFiles_DamagedSaysWhichFile: a body its body file does not hold
// whole is said with that file's path and what to do about it: a missing
// file is the directory of body files not copied with the store, and a
// damaged one is the file's fault, not the store's, which must not be
// moved away for it.
func TestBodyFiles_DamagedSaysWhichFile(t *testing.T) {
	for _, c := range []struct {
		fixture string // "": no body file
		want    []string
	}{
		{fixture: "", want: []string{"is missing", "copied too", "devhook.db.bodies"}},
		{fixture: "bodies-truncated.body", want: []string{"cut short", "evidence", "deliveries delete " + id(fixtureDamaged)}},
		{fixture: "bodies-damaged-middle.body", want: []string{"in its body file do not match its checksum", "evidence", "deliveries delete " + id(fixtureDamaged)}},
	} {
		t.Run(strings.TrimSuffix(c.fixture, ".body"), func(t *testing.T) {
			dir := t.TempDir()
			copyFixture(t, "db-bodyfiles.db", dir, "devhook.db")
			path := filepath.Join(dir, "devhook.db")
			if c.fixture != "" {
				if err := os.Mkdir(path+".bodies", 0o700); err != nil {
					t.Fatal(err)
				}
				copyFixture(t, c.fixture, path+".bodies", "00000001")
			}
			db, err := storage.Open(path, storage.Config{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			_, err = db.Delivery(id(fixtureDamaged))
			if !errors.Is(err, storage.ErrDamaged) {
				t.Fatalf("Delivery: %v, want ErrDamaged", err)
			}
			msg := err.Error()
			for _, w := range append(c.want, filepath.Join(path+".bodies", "00000001")) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, "mv "+path) {
				t.Errorf("error %q says to move the store away, which is not at fault", msg)
			}
		})
	}
}

// TestBodyFiles_MissingSaidAtOpen: a store whose body files are missing
// (copied without its .bodies directory) says so once when it is opened
// to record, naming the directory, rather than only at each read of a
// body it cannot find. A read-only open says nothing: its reads do.
func TestBodyFiles_MissingSaidAtOpen(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, "db-bodyfiles.db", dir, "devhook.db")
	path := filepath.Join(dir, "devhook.db")
	var mu sync.Mutex
	var said []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, fmt.Sprintf(format, args...))
	}
	ro, err := storage.Open(path, storage.Config{ReadOnly: true, Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	ro.Close()
	if len(said) != 0 {
		t.Errorf("a read-only open said %q", said)
	}
	MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: logf})
	mu.Lock()
	defer mu.Unlock()
	want := fmt.Sprintf("%d bodies of recorded deliveries are in body files missing from %s (00000001)", fixtureN, path+".bodies")
	n := 0
	for _, s := range said {
		if strings.Contains(s, want) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("said %q, want once %q", said, want)
	}
}

// threeInTwoFiles records deliveries 0 and 1 in body file 1 and 2 in body
// file 2, in the store at path, and closes it.
func threeInTwoFiles(t *testing.T, path string, cfg storage.Config) {
	t.Helper()
	db := MustOpenPath(t, path, cfg)
	db.SetBodyFileMax(2 * bodyFixtureLen)
	for i := range 3 {
		mustPut(t, db, bigDelivery(i))
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// editBolt changes the closed store at path with fn, as damage or a
// stopped process would have left it.
func editBolt(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// wantPartial checks that d, read with err, is want but for its body,
// which is marked unreadable saying why, as err says.
func wantPartial(t *testing.T, d *devhook.Delivery, err error, want *devhook.Delivery, why string) {
	t.Helper()
	var partial *devhook.PartialError
	if d == nil {
		t.Fatalf("delivery %s: nothing read (%v), want all but its body", want.ID, err)
	}
	switch {
	case !errors.As(err, &partial):
		t.Errorf("delivery %s: %v, want a *devhook.PartialError", want.ID, err)
	case d.Body != nil || !strings.Contains(d.BodyError, why) || partial.Body == nil || partial.Body.Error() != d.BodyError:
		t.Errorf("delivery %s: body %d bytes, BodyError %q, error %v; want no body, and the error saying %q", want.ID, len(d.Body), d.BodyError, err, why)
	case !d.Partial():
		t.Errorf("delivery %s: Partial() = false with BodyError %q", want.ID, d.BodyError)
	}
	got, w := *d, *want
	got.Body, got.BodyError, w.Body = nil, "", nil
	gj, _ := json.Marshal(&got)
	wj, _ := json.Marshal(&w)
	if !bytes.Equal(gj, wj) {
		t.Errorf("delivery %s read as\n%s\nwant\n%s", want.ID, gj, wj)
	}
}
