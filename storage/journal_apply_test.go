package storage

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// Applying records to bbolt (journal_apply.go): a summary changed in place
// as decoding it would, and the bound that spares new ids a lookup.

// appendWithAttempt gives the bytes that decoding, changing and encoding
// the summary again gives.
func TestAppendWithAttempt(t *testing.T) {
	summaries := []devhook.Summary{
		{},
		{ID: "x", Verdict: "ok", Status: 200, Attempts: 3, Duration: 5, Error: "e"},
		{ID: writeTestDelivery(1).ID, ReceivedAt: time.Unix(1741082400, 123), Method: "POST", Path: "/hook",
			RawQuery: "a=1", Verdict: "invalid_signature", Event: devhook.Event{Type: "t", RunID: "run-1", Status: "s", StatusV2: "v2"},
			BodySize: 1 << 20, Queued: true, Attempts: 300, Status: -1, Duration: devhook.Duration(time.Hour), Error: string(make([]byte, 300))},
	}
	outcomes := []outcome{{seq: 1, status: 200}, {seq: 4, status: 502, duration: 7, err: "refused"}, {seq: 301}, {seq: 1 << 20, status: 999, err: "x"}}
	for i, s := range summaries {
		enc := appendSummary(nil, &s)
		for _, o := range outcomes {
			want := s
			changed := o.seq > s.Attempts
			if changed {
				want.Attempts, want.Status, want.Duration, want.Error = o.seq, o.status, o.duration, o.err
			}
			got, ok, err := appendWithAttempt([]byte("prefix"), []byte(s.ID), enc, &o)
			if err != nil || ok != changed {
				t.Fatalf("summary %d, attempt %d: %v, %v; want %v", i, o.seq, ok, err, changed)
			}
			if !changed {
				if string(got) != "prefix" {
					t.Errorf("summary %d, attempt %d: appended %q, want nothing", i, o.seq, got[6:])
				}
				continue
			}
			if w := appendSummary([]byte("prefix"), &want); string(got) != string(w) {
				t.Errorf("summary %d, attempt %d:\n got %x\nwant %x", i, o.seq, got, w)
			}
		}
		for n := range len(enc) {
			if _, _, err := appendWithAttempt(nil, []byte(s.ID), enc[:n], &outcomes[0]); err == nil {
				t.Errorf("summary %d cut to %d bytes: no error", i, n)
			}
		}
	}
}

// apply skips the lookup of a put whose id sorts after every id in bbolt,
// but not of one the same batch put already, nor of one at or below the
// bound: each delivery is created once.
func TestApply_KnownBoundStillFindsRecordedDeliveries(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "devhook.db"), Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	put := func(id string) jrec {
		return db.journal.putRecord(&devhook.Delivery{ID: id, Channel: "ch", ReceivedAt: time.Now(), Method: "POST", Path: "/", Body: []byte(id)})
	}
	first := []jrec{put("0195b1c8-0000-7000-8000-000000000001"), put("0195b1c8-0000-7000-8000-000000000002")}
	res, err := db.apply(first, nil)
	if err != nil || res.created != 2 {
		t.Fatalf("first batch: created %d, %v", res.created, err)
	}
	known := maxPutID(first)
	// A redelivery of a recorded id, a new id twice in one batch, and a
	// new one.
	second := []jrec{put("0195b1c8-0000-7000-8000-000000000001"), put("0195b1c8-0000-7000-8000-000000000003"),
		put("0195b1c8-0000-7000-8000-000000000003"), put("0195b1c8-0000-7000-8000-000000000004")}
	res, err = db.apply(second, known)
	if err != nil || res.created != 2 {
		t.Fatalf("second batch: created %d, want 2 (ids 3 and 4): %v", res.created, err)
	}
	if n, err := db.Count(); err != nil || n != 4 {
		t.Fatalf("count %d, want 4: %v", n, err)
	}
}
