package storage_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/storage"
)

// journalFixture returns a journal file as devhook writes it, holding the
// records of fixtureN deliveries and their attempts, without the zeros
// after them.
func journalFixture(t *testing.T) []byte {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	release := db.HoldFlushes()
	for i := range fixtureN {
		mustPut(t, db, newDelivery(i))
		if _, err := db.AddAttempt(id(i), newAttempt(i)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path + ".journal0")
	release()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return data[:storage.JournalEnd(data)]
}

// staleFixture returns a journal file reused in place: its round before
// held the records of fixtureN deliveries, its last round those of
// deliveries fixtureN and fixtureN+1, written over the start of the
// others, which follow them.
func staleFixture(t *testing.T) []byte {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range fixtureN {
		mustPut(t, db, newDelivery(i))
		if _, err := db.AddAttempt(id(i), newAttempt(i)); err != nil {
			t.Fatal(err)
		}
	}
	before, err := os.ReadFile(path + ".journal0")
	if err != nil {
		t.Fatal(err)
	}
	// Applied, journal0 is reused; then a record in journal1, applied
	// too, makes journal0 the file written to again.
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddAttempt(id(0), newAttempt(100)); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	release := db.HoldFlushes()
	defer release()
	for i := fixtureN; i < fixtureN+2; i++ {
		mustPut(t, db, newDelivery(i))
		if _, err := db.AddAttempt(id(i), newAttempt(i)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path + ".journal0")
	if err != nil {
		t.Fatal(err)
	}
	end := storage.JournalEnd(before)
	if storage.JournalEnd(data) >= end || !bytes.Equal(data[end-100:end], before[end-100:end]) {
		t.Fatalf("journal0 was not reused in place: its last round ends at %d, the one before at %d", storage.JournalEnd(data), end)
	}
	return data[:end]
}

// format1 returns the format 1 journal file that holds the records of the
// format 2 file j.
func format1(j []byte) []byte {
	h := append([]byte("devhookJ"), 0, 0, 0, 1)
	h = binary.BigEndian.AppendUint32(h, crc32.Checksum(h, crc32.MakeTable(crc32.Castagnoli)))
	return append(h, j[storage.JournalHeaderLen2:]...)
}

// storeFixture returns a deliveries file holding 200 deliveries.
func storeFixture(t *testing.T) []byte {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		mustPut(t, db, newDelivery(i))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// fixtures builds every fixture of testdata/ from a fresh journal and
// store. Run `go test ./storage -run TestFixtures -update-fixtures` to
// write them again after a format change. Those named format1 are what
// devhook wrote before record checksums: nothing makes them again
// (TestFormat1_StillReads).
func fixtures(t *testing.T) map[string][]byte {
	j2 := journalFixture(t)
	j := format1(j2)
	stale := staleFixture(t)
	offs := storage.RecordOffsets(j)
	if len(offs) != 2*fixtureN || len(storage.RecordOffsets(j2)) != 2*fixtureN {
		t.Fatalf("the fixture journal has %d records, want %d", len(offs), 2*fixtureN)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(j)) }
	rec := offs[2*fixtureDamaged] // the record of the damaged delivery
	newer := func(j []byte, version uint32) []byte {
		b := bytes.Clone(j)
		binary.BigEndian.PutUint32(b[8:], version)
		binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	shift := storage.JournalHeaderLen2 - storage.JournalHeaderLen // from j's offsets to j2's
	edit2 := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(j2)) }
	db := storeFixture(t)
	m := pageFixtures(t)
	for k, v := range recordFixturesAll(t) {
		m[k] = v
	}
	for k, v := range map[string][]byte{
		// Format 1, as devhook wrote it before format 2.
		"journal-intact.journal0": j,
		// A process killed in the middle of its last write.
		"journal-torn-tail.journal0": append(bytes.Clone(j), j[offs[0]:offs[1]-7]...),
		// One bit flipped in the body of a record.
		"journal-damaged-middle.journal0": edit(func(b []byte) []byte { b[rec+storage.RecordHeaderLen+20] ^= 0x10; return b }),
		// One bit flipped in the length of a record: found again by its marker.
		"journal-damaged-length.journal0": edit(func(b []byte) []byte { b[rec+5] ^= 0x40; return b }),
		"journal-wrong-magic.journal0":    edit(func(b []byte) []byte { b[0] = 'X'; return b }),
		"journal-newer-version.journal0":  newer(j, 99),

		// Format 2, as devhook writes it now (the zeros after the
		// records left out, but for a few).
		"journal2-intact.journal0": j2,
		// Killed in the middle of a copy into the mapping: the start of
		// a record, then the zeros of a file that was grown.
		// Its high-water mark raised over the torn record, as the
		// writer raises it before copying a record.
		"journal2-torn-tail.journal0": storage.WithHighWater(append(append(bytes.Clone(j2), j2[offs[0]+shift:offs[1]+shift-7]...), make([]byte, 100)...),
			len(j2)+offs[1]-offs[0]),
		// Cut short in the middle of the record of delivery 4.
		"journal2-truncated.journal0":      j2[:offs[8]+shift+40],
		"journal2-damaged-middle.journal0": edit2(func(b []byte) []byte { b[rec+shift+storage.RecordHeaderLen+20] ^= 0x10; return b }),
		// Its start sequence number damaged: every intact record is read.
		"journal2-damaged-start.journal0": edit2(func(b []byte) []byte { b[20] ^= 0x01; return b }),
		// Reused in place: the last round's records, then the round
		// before's, intact, numbered below the header's start.
		"journal2-stale-tail.journal0": stale,
		// One bit flipped in the body of the earlier round's last record.
		"journal2-damaged-stale.journal0": func() []byte { b := bytes.Clone(stale); b[len(b)-10] ^= 0x04; return b }(),
		// A byte that is not zero after the high-water mark.
		"journal2-junk-after.journal0": func() []byte { b := append(bytes.Clone(j2), make([]byte, 4096)...); b[len(j2)+2000] = 0x20; return b }(),
		// Created, killed before its header was written.
		"journal2-zeros.journal0":         make([]byte, 4096),
		"journal2-empty.journal0":         {},
		"journal2-newer-version.journal0": newer(j2, 3),

		"db-truncated.db": db[:16<<10],
		"db-empty.db":     {},
	} {
		m[k] = v
	}
	for k, v := range bodyFileFixtures(t) {
		m[k] = v
	}
	return m
}

// TestFixtures checks that testdata/ holds what fixtures builds, so that
// the fixtures stay what their names say.
func TestFixtures(t *testing.T) {
	for name, want := range fixtures(t) {
		path := filepath.Join("testdata", name)
		if *updateFixtures {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./storage -run TestFixtures -update-fixtures)", err)
		}
		// A store file holds free pages that differ from run to run;
		// journals, and the page fixtures made in one transaction, are
		// byte for byte what devhook writes.
		if (strings.HasPrefix(name, "journal-") || strings.HasPrefix(name, "bodies-") || strings.Contains(name, "pages") || strings.HasPrefix(name, "db-damaged-") ||
			strings.HasPrefix(name, "db-record-")) && !bytes.Equal(got, want) {
			t.Errorf("%s differs from what devhook writes now (run with -update-fixtures after a format change)", path)
		}
	}
}

// copyFixture copies testdata/name into dir as file: evidence is never
// changed in place.
func copyFixture(t *testing.T, name, dir, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

var updateFixtures = flag.Bool("update-fixtures", false, "rewrite the damaged-file fixtures in testdata/")

// fixtureN deliveries, each with one attempt, are in the journal fixtures:
// record 2i is delivery i, record 2i+1 its attempt.
const fixtureN = 12

// fixtureDamaged is the delivery whose record the damaged fixtures break.
const fixtureDamaged = 5
