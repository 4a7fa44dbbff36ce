package storage_test

import (
	"hash/crc32"
	"net/http"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

func sampleRecords() [][]byte {
	d := newDelivery(1)
	d.Header["Set-Cookie"] = []string{"a", "b", ""}
	a := newAttempt(1)
	a.Request = &devhook.Request{Method: "POST", Header: http.Header{"A": {"1"}}, Body: []byte("x")}
	return storage.EncodeRecords(d, a)
}

// A damaged record is an error, never a panic or a short read taken for
// data.
func TestDecode_Truncated(t *testing.T) {
	for r, rec := range sampleRecords() {
		for n := range len(rec) {
			// Record r is read as its own kind: meta (0, 1), summary (2), attempt (3).
			errs := storage.DecodeRecords(rec[:n])
			kind := map[int]int{0: 0, 1: 0, 2: 1, 3: 2}[r]
			if errs[kind] == nil {
				t.Errorf("record %d cut to %d of %d bytes decoded without error", r, n, len(rec))
			}
			if kind == 0 && storage.CheckMeta(nil, rec[:n]) == nil {
				t.Errorf("record %d cut to %d of %d bytes passed Open's scan", r, n, len(rec))
			}
		}
		if errs := storage.DecodeRecords(rec); errs[map[int]int{0: 0, 1: 0, 2: 1, 3: 2}[r]] != nil {
			t.Errorf("record %d: %v", r, errs)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, rec := range sampleRecords() {
		f.Add(rec)
	}
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		errs := storage.DecodeRecords(b) // must not panic
		// Open's scan, which does not allocate, agrees with the decoder.
		if scan := storage.CheckMeta(nil, b); (scan == nil) != (errs[0] == nil) {
			t.Errorf("CheckMeta: %v, decodeMeta: %v", scan, errs[0])
		}
	})
}

// A value's checksum starts from its kind's letter's, so that a value of
// one kind never passes for another's.
func TestValueKinds(t *testing.T) {
	for letter, seed := range storage.ValueKinds {
		if want := crc32.Checksum([]byte(letter), crc32.MakeTable(crc32.Castagnoli)); seed != want {
			t.Errorf("kind %s starts from %#x, want the checksum of %q, %#x", letter, seed, letter, want)
		}
	}
	recs := sampleRecords()
	// A delivery's record (0), a summary (2) and an attempt (3), each read
	// as the others: refused, though each is intact.
	for _, r := range []int{0, 2, 3} {
		errs := storage.DecodeRecords(recs[r])
		for kind, err := range errs {
			if own := map[int]int{0: 0, 2: 1, 3: 2}[r]; (kind == own) != (err == nil) {
				t.Errorf("record %d read as kind %d: %v", r, kind, err)
			}
		}
	}
}
