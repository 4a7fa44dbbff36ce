package agent_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/storage"
)

// attemptKey is the key of attempt seq of delivery id in the store's
// attempts bucket.
func attemptKey(id string, seq uint32) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(id), 0), seq)
}

// damageValue flips a bit in the middle of the value at key in bucket of
// the closed store path, as a disk or a hand would: it fails its check.
func damageValue(t *testing.T, path, bucket string, key []byte) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		v := append([]byte{}, b.Get(key)...)
		if len(v) < 8 {
			t.Fatalf("%s %q: %d bytes", bucket, key, len(v))
		}
		v[len(v)/2] ^= 0x10
		return b.Put(key, v)
	})
	if cerr := bdb.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
}

// damageStore stops tn's agent, closes its store, lets damage edit the
// file and opens it again for the next agent.
func (tn *tunnel) damageStore(t *testing.T, damage func(path string)) {
	t.Helper()
	tn.stopAgent()
	path := filepath.Join(tn.dir, "deliveries.db")
	if err := tn.db.Close(); err != nil {
		t.Fatal(err)
	}
	damage(path)
	db, err := storage.Open(path, storage.Config{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	tn.db, tn.cfg.Store = db, db
	t.Cleanup(func() {
		tn.stopAgent()
		db.Close()
	})
}

// A delivery one of whose attempts cannot be read (its value damaged),
// its request whole, is replayed as it arrived: the unreadable attempt is
// its history, not what is sent. Before, the replay was refused as for a
// delivery whose body cannot be read. One whose body cannot be read is
// still refused, nothing sent.
func TestReplayWithAnUnreadableAttempt(t *testing.T) {
	rec, recv := newRecorder(t)
	path := filepath.Join(t.TempDir(), "d.db")
	db, err := storage.Open(path, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"event_type":"run.status","data":{"run_id":"r1","status_v2":"running"}}`)
	newD := func() *devhook.Delivery {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: time.Now(), Method: "POST", Path: "/hook",
			Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"1", "2"}}, Body: body}
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
		for _, st := range []int{500, 502} {
			if _, err := db.AddAttempt(d.ID, devhook.Attempt{Kind: devhook.AttemptForward, Target: recv.URL, Status: st, Body: []byte(strings.Repeat("e", 100))}); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	attemptBroken, bodyBroken := newD(), newD()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	damageValue(t, path, "attempts", attemptKey(attemptBroken.ID, 1))
	damageValue(t, path, "bodies", []byte(bodyBroken.ID))
	db, err = storage.Open(path, storage.Config{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Delivery(attemptBroken.ID); err == nil {
		t.Fatal("the damaged attempt reads")
	}
	ag, err := agent.New(agent.Config{Store: db, Forward: []string{recv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	at, err := ag.Replay(context.Background(), attemptBroken.ID, devhook.ReplayOptions{})
	if err != nil {
		t.Fatalf("replay of a delivery with an unreadable attempt: %v", err)
	}
	got := rec.waitFor(t, 1)[0]
	if string(got.Body) != string(body) || got.RequestURI != "/hook" || len(got.Header["X-Multi"]) != 2 {
		t.Errorf("the receiver got %s %q with %v, want the delivery as it arrived", got.RequestURI, got.Body, got.Header)
	}
	d, _ := db.Delivery(attemptBroken.ID)
	if at.Status != 200 || d == nil || len(d.Attempts) != 3 || d.Attempts[0].ReadError == "" || d.Attempts[2].Seq != at.Seq || d.Attempts[2].Status != 200 {
		t.Errorf("replay %+v, recorded %+v: want it recorded after the unreadable attempt, which stays as it is", at, d)
	}

	for _, opt := range []devhook.ReplayOptions{{}, {SetHeader: http.Header{"X-Edit": {"1"}}}} {
		_, err = ag.Replay(context.Background(), bodyBroken.ID, opt)
		if pe := (*devhook.PartialError)(nil); !errors.As(err, &pe) || pe.Body == nil {
			t.Errorf("replay of a delivery whose body cannot be read: %v, want it refused saying why", err)
		}
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("the receiver got %d requests, want 1: none of the delivery whose body cannot be read", n)
	}
}
