package agent_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
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

// A delivery the agent recorded and the receiver took, whose ack the
// relay never got, comes again while some parts of its record cannot be
// read: its readable attempts show it was taken, so it is answered from
// the record, not forwarded twice. Before, any error of the read (the
// record partial) made it forwarded again. When the attempt that shows it
// taken is the one that cannot be read, nothing says it was: it is
// forwarded again, from the relay's copy, rather than never.
func TestPartialRedeliveryAnsweredFromTheRecord(t *testing.T) {
	for _, c := range []struct {
		name    string
		damage  func(id string) (bucket string, key []byte)
		forward bool // forwarded again, not answered from the record
	}{
		{name: "refused attempt unreadable", damage: func(id string) (string, []byte) { return "attempts", attemptKey(id, 1) }},
		{name: "body unreadable", damage: func(id string) (string, []byte) { return "bodies", []byte(id) }},
		{name: "taking attempt unreadable", damage: func(id string) (string, []byte) { return "attempts", attemptKey(id, 2) }, forward: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, recv := newRecorder(t)
			tn := newTunnel(t, recv.URL, nil)
			body := []byte(`{"type":"run.status","data":{"run_id":"r1","status_v2":"running"}}`)
			resp, _ := tn.post("/again", body, nil)
			id := resp.Header.Get("Devhook-Delivery")
			queued, err := tn.relayDB.Queued(tn.creds.Channel, "", 10)
			if err != nil || len(queued) != 1 {
				t.Fatalf("queue: %v %d", err, len(queued))
			}
			// As if an earlier agent had forwarded it (refused), retried
			// it (taken) and died before its ack.
			if _, err := tn.db.PutDelivery(queued[0]); err != nil {
				t.Fatal(err)
			}
			for _, a := range []devhook.Attempt{
				{Kind: devhook.AttemptForward, Status: 503, Target: recv.URL, Body: []byte(strings.Repeat("busy ", 20))},
				{Kind: devhook.AttemptRetry, Status: 204, Target: recv.URL, Header: http.Header{"X-Taken": {"yes"}}},
			} {
				if _, err := tn.db.AddAttempt(id, a); err != nil {
					t.Fatal(err)
				}
			}
			tn.damageStore(t, func(path string) {
				bucket, key := c.damage(id)
				damageValue(t, path, bucket, key)
			})
			if d, err := tn.db.Delivery(id); err == nil || d == nil {
				t.Fatalf("delivery %+v, %v: want it partial", d, err)
			}
			tn.startAgent()
			waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
			tn.waitResults(1)
			r := tn.resultsCopy()[0]
			if c.forward {
				if got := rec.waitFor(t, 1); string(got[0].Body) != string(body) || r.Duplicate || r.Status != http.StatusOK {
					t.Errorf("result %+v, receiver got %q: want it forwarded again as it arrived", r, got[0].Body)
				}
				return
			}
			if !r.Duplicate || r.Status != http.StatusNoContent || r.Attempt == nil || r.Attempt.Seq != 2 {
				t.Errorf("result %+v, want a duplicate answered from its taken attempt (204)", r)
			}
			tn.stopAgent()
			d, _ := tn.db.Delivery(id)
			if n := len(rec.requests()); n != 0 || d == nil || len(d.Attempts) != 2 {
				t.Errorf("the receiver got it %d more times; recorded %+v: want no new attempt", n, d)
			}
		})
	}
}

// An owed delivery, never answered, that comes again while its last
// attempt cannot be read is answered from the record with its last
// attempt that can be (its error said), not with the unreadable one
// (which says nothing), and is not forwarded for it: the agent's retries
// take it.
func TestPartialOwedRedeliveryAnsweredWithItsLastReadableAttempt(t *testing.T) {
	var mu sync.Mutex
	var got int
	// The retry the agent resumes with is held at the receiver until the
	// redelivery is answered, so that its attempt is not the last one.
	release := make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got++
		mu.Unlock()
		<-release
		w.WriteHeader(http.StatusServiceUnavailable) // still owed
	}))
	t.Cleanup(recv.Close)
	t.Cleanup(releaseAll)
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		c.RetryMinBackoff, c.RetryMaxBackoff = time.Hour, time.Hour
	})
	resp, _ := tn.post("/owed", []byte(`{"n":1}`), nil)
	id := resp.Header.Get("Devhook-Delivery")
	queued, err := tn.relayDB.Queued(tn.creds.Channel, "", 10)
	if err != nil || len(queued) != 1 {
		t.Fatalf("queue: %v %d", err, len(queued))
	}
	// As if an earlier agent had forwarded it, retried it (both refused),
	// owed it, and died before its ack.
	if _, err := tn.db.PutDelivery(queued[0]); err != nil {
		t.Fatal(err)
	}
	for _, a := range []devhook.Attempt{
		{Kind: devhook.AttemptForward, Target: recv.URL, Error: "connection refused"},
		{Kind: devhook.AttemptRetry, Status: 503, Target: recv.URL, Body: []byte(strings.Repeat("second ", 20))},
	} {
		if _, err := tn.db.AddAttempt(id, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := tn.db.PutRetry(id, devhook.RetryState{State: devhook.RetryOwed, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tn.damageStore(t, func(path string) { damageValue(t, path, "attempts", attemptKey(id, 2)) })
	tn.startAgent()
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	var dup *agent.Result
	eventually(t, "the redelivery's result", func() bool {
		for _, r := range tn.resultsCopy() {
			if r.Duplicate {
				dup = &r
				return true
			}
		}
		return false
	})
	releaseAll()
	if dup.Attempt == nil || dup.Attempt.Seq != 1 || dup.Status != http.StatusBadGateway {
		t.Errorf("result %+v (attempt %+v), want it answered with its first attempt, 502", dup, dup.Attempt)
	}
	tn.stopAgent()
	// The resumed retry may have tried it once; the redelivery did not.
	mu.Lock()
	defer mu.Unlock()
	if got > 1 {
		t.Errorf("the receiver got it %d times, want at most the one retry", got)
	}
}
