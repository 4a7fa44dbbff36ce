package storage_test

import (
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
			kind := map[int]int{0: 0, 1: 0, 2: 1, 3: 3}[r]
			if errs[kind] == nil {
				t.Errorf("record %d cut to %d of %d bytes decoded without error", r, n, len(rec))
			}
		}
		if errs := storage.DecodeRecords(rec); errs[map[int]int{0: 0, 1: 0, 2: 1, 3: 3}[r]] != nil {
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
		storage.DecodeRecords(b) // must not panic
	})
}
