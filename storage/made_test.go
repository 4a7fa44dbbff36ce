package storage_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// How an attempt was made is kept with it, through the journal and bbolt
// and across a restart; an attempt recorded before it was kept reads as
// before (no Made), and a devhook from before it reads the rest of a new
// record unchanged.
func TestAttemptMade(t *testing.T) {
	a := newAttempt(1)
	a.Seq = 1
	a.Made = devhook.MadeEdited
	a.Request = &devhook.Request{Method: "POST", Path: "/hook", Header: http.Header{"Content-Length": {"15"}}, Body: []byte(`{"edited":true}`)}
	enc := storage.EncodeAttempt(&a)
	got, err := storage.DecodeAttempt(enc)
	if err != nil {
		t.Fatal(err)
	}
	sameAttempt(t, got, a)

	// Without Made, the encoding is the one from before Made was kept,
	// and a new record begins with it: an older devhook, which stops
	// there, reads every other field.
	// (Both end with their checksum: compared without it.)
	old := a
	old.Made = ""
	oldEnc := storage.EncodeAttempt(&old)
	if !bytes.HasPrefix(unsealed(enc), unsealed(oldEnc)) || len(enc) == len(oldEnc) {
		t.Fatalf("a record with Made does not extend the one without")
	}
	got, err = storage.DecodeAttempt(oldEnc)
	if err != nil {
		t.Fatalf("an attempt recorded before Made: %v", err)
	}
	sameAttempt(t, got, old)
	// A field a later devhook adds is skipped.
	later := binary.AppendUvarint(bytes.Clone(unsealed(enc)), 99)
	later = binary.AppendUvarint(later, 3)
	later = append(later, "new"...)
	got, err = storage.DecodeAttempt(sealed(later))
	if err != nil {
		t.Fatalf("a record with a field unknown here: %v", err)
	}
	sameAttempt(t, got, a)
	// A cut one fails.
	if _, err := storage.DecodeAttempt(sealed(later[:len(later)-1])); err == nil {
		t.Fatalf("a cut optional field decoded")
	}

	// Through the store, pending and applied, and after a restart.
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{})
	d := newDelivery(1)
	mustPut(t, db, d)
	made := []string{devhook.MadeAsArrived, devhook.MadeResigned, devhook.MadeEdited, ""}
	for _, m := range made {
		at := newAttempt(1)
		at.Made = m
		if _, err := db.AddAttempt(d.ID, at); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		got, err := db.Delivery(d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Attempts) != len(made) {
			t.Fatalf("%s: %d attempts", when, len(got.Attempts))
		}
		for i, m := range made {
			if got.Attempts[i].Made != m {
				t.Errorf("%s: attempt %d made %q, want %q", when, i+1, got.Attempts[i].Made, m)
			}
		}
	}
	check("recorded")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, storage.Config{})
	check("after a restart")
}

// unsealed is an attempt's value without its checksum; sealed gives it
// one again (storage/codec.go: the CRC-32C of "A", continued over the
// bytes before it).
func unsealed(b []byte) []byte { return b[:len(b)-4] }

func sealed(b []byte) []byte {
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	sum := crc32.Update(crc32.Checksum([]byte("A"), castagnoli), castagnoli, b)
	return binary.BigEndian.AppendUint32(bytes.Clone(b), sum)
}
