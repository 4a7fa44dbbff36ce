package storage_test

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// TestDelivery_PartlyUnreadable: a delivery whose body (a value in bbolt
// that fails its checksum) or one of whose attempts (damaged, missing)
// cannot be read reads all the same, with the rest and that part marked
// and named, not noted in Damage (which lists skip); the read's error is a
// *devhook.PartialError.
// A damaged record of the delivery itself still fails the read: there is
// nothing to show. The other deliveries read as before.
func TestDelivery_PartlyUnreadable(t *testing.T) {
	flip := func(bucket string, key []byte, at int) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bucket))
			v := append([]byte{}, b.Get(key)...)
			if len(v) == 0 {
				t.Fatalf("no value at %q in %s", key, bucket)
			}
			v[min(at, len(v)-1)] ^= 0x10
			return b.Put(key, v)
		}
	}
	attemptKey := func(i, seq int) []byte {
		return binary.BigEndian.AppendUint32(append([]byte(id(i)), 0), uint32(seq))
	}
	const broken = 3
	for _, c := range []struct {
		name string
		edit func(tx *bolt.Tx) error
		// body: the body is unreadable, saying it; attempt: attempt
		// number attempt is, saying why.
		body    string
		attempt int
		why     string
		whole   bool // the record: the read fails
	}{
		{name: "body value", edit: flip("bodies", []byte(id(broken)), 10), body: "its checksum does not match"},
		{name: "attempt damaged", edit: flip("attempts", attemptKey(broken, 2), 20), attempt: 2, why: "attempt 2 of delivery " + id(broken) + " is damaged"},
		{name: "attempt missing", edit: func(tx *bolt.Tx) error { return tx.Bucket([]byte("attempts")).Delete(attemptKey(broken, 1)) },
			attempt: 1, why: "attempt 1 of delivery " + id(broken) + " is damaged (it is missing"},
		{name: "record", edit: flip("deliveries", []byte(id(broken)), 30), whole: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "devhook.db")
			db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
			var want []*devhook.Delivery
			for i := range 5 {
				d := newDelivery(i)
				mustPut(t, db, d)
				for n := range 2 {
					a, err := db.AddAttempt(d.ID, newAttempt(10*i+n))
					if err != nil {
						t.Fatal(err)
					}
					d.Attempts = append(d.Attempts, a)
				}
				want = append(want, d)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			editBolt(t, path, c.edit)
			for _, readOnly := range []bool{true, false} {
				db := MustOpenPath(t, path, storage.Config{ReadOnly: readOnly, MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
				for i, w := range want {
					d, err := db.Delivery(w.ID)
					if i != broken {
						if err != nil || !deliveryEqual(d, w) {
							t.Errorf("delivery %d: %v, want it whole", i, err)
						}
						continue
					}
					var partial *devhook.PartialError
					switch {
					case c.whole:
						if d != nil || !errors.Is(err, storage.ErrDamaged) || errors.As(err, &partial) {
							t.Errorf("a damaged record read as %v, %v; want nothing and ErrDamaged", d, err)
						}
					case c.body != "":
						wantPartial(t, d, err, w, c.body)
						if !errors.Is(err, storage.ErrDamaged) || !strings.Contains(d.BodyError, path) {
							t.Errorf("body error %q (%v), want ErrDamaged naming %s", d.BodyError, err, path)
						}
					default:
						wantPartAttempt(t, d, err, w, c.attempt, c.why)
					}
					// A damaged part is its delivery's problem: deleting
					// that delivery does, after a copy of the file as
					// evidence; moving the file away would take every
					// other delivery with it.
					if !c.whole && (!containsAll(err.Error(), "devhook deliveries delete "+w.ID, "copy "+path+" away first", "evidence") || strings.Contains(err.Error(), "move it away")) {
						t.Errorf("%v: want it to say to copy the file as evidence and delete this delivery, not to move the file away", err)
					}
				}
				// Damage is what lists skip, with advice for a damaged
				// record of the file (move it away): a partial delivery is
				// listed, and its part is its own problem.
				dmg := db.Damage()
				if !c.whole && dmg.Any() {
					t.Errorf("Damage: %+v (%s; %s), want nothing: delivery %d is listed, and only a part of it cannot be read", dmg, dmg.Summary(), dmg.Advice(), broken)
				}
				if c.whole && (dmg.Damaged != 1 || len(dmg.IDs) != 1 || dmg.IDs[0] != id(broken)) {
					t.Errorf("Damage: %+v, want the damaged record of delivery %d noted", dmg, broken)
				}
				if list, err := db.List(devhook.Filter{Limit: 100}); !c.whole && (err != nil || len(list) != len(want)) {
					t.Errorf("List: %d rows, %v; want all %d", len(list), err, len(want))
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			// What the message says to do drops it, and only it.
			db = MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
			if removed, err := db.Delete([]string{id(broken)}); err != nil || len(removed) != 1 {
				t.Fatalf("delete of the partial delivery: %v, %v", removed, err)
			}
			for i, w := range want {
				d, err := db.Delivery(w.ID)
				if i == broken && devhook.ErrorCode(err) != devhook.ENOTFOUND || i != broken && (err != nil || !deliveryEqual(d, w)) {
					t.Errorf("delivery %d after the delete: %v", i, err)
				}
			}
		})
	}
}

// wantPartAttempt checks that d, read with err, is want but for its
// attempt seq, listed with its ReadError saying why.
func wantPartAttempt(t *testing.T, d *devhook.Delivery, err error, want *devhook.Delivery, seq int, why string) {
	t.Helper()
	var partial *devhook.PartialError
	if !errors.As(err, &partial) || len(partial.Attempts) != 1 || partial.Body != nil || d == nil {
		t.Fatalf("delivery %s: %v, %v; want it with a *devhook.PartialError of one attempt", want.ID, d, err)
	}
	if len(d.Attempts) != len(want.Attempts) {
		t.Fatalf("delivery %s: %d attempts, want %d (the unreadable one listed)", want.ID, len(d.Attempts), len(want.Attempts))
	}
	for i, a := range d.Attempts {
		if a.Seq != want.Attempts[i].Seq {
			t.Errorf("attempt %d has Seq %d", i, a.Seq)
		}
		if a.Seq == seq {
			if !strings.Contains(a.ReadError, why) || a.ReadError != partial.Attempts[0].Error() || a.Status != 0 || a.Target != "" {
				t.Errorf("attempt %d: %+v; want only its ReadError, saying %q", seq, a, why)
			}
			continue
		}
		if a.ReadError != "" || a.Status != want.Attempts[i].Status || string(a.Body) != string(want.Attempts[i].Body) {
			t.Errorf("attempt %d: %+v, want it as recorded", a.Seq, a)
		}
	}
	if string(d.Body) != string(want.Body) || d.BodyError != "" || !d.Partial() {
		t.Errorf("delivery %s: body %q (%q), Partial %v; want its body whole, and partial", want.ID, d.Body, d.BodyError, d.Partial())
	}
}

// deliveryEqual reports whether d reads back as want, attempts included.
func deliveryEqual(d, want *devhook.Delivery) bool {
	if d == nil || d.Partial() || string(d.Body) != string(want.Body) || d.Method != want.Method || len(d.Attempts) != len(want.Attempts) {
		return false
	}
	for i := range d.Attempts {
		if d.Attempts[i].Seq != want.Attempts[i].Seq || string(d.Attempts[i].Body) != string(want.Attempts[i].Body) {
			return false
		}
	}
	return true
}
