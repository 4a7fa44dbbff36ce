package storage_test

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

func queuedIDs(ds []*devhook.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func mustQueueLen(t *testing.T, db *storage.DB, ch string, want int) {
	t.Helper()
	if n, err := db.QueueLen(ch); err != nil || n != want {
		t.Errorf("QueueLen(%s) = %d, %v; want %d", ch, n, err, want)
	}
}

func TestQueue(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "nosync"}[noSync], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relay.db")
			db, err := storage.Open(path, storage.Config{NoSync: noSync})
			if err != nil {
				t.Fatal(err)
			}
			mustQueueLen(t, db, "ch1", 0)
			if got, err := db.Queued("ch1", "", 0); err != nil || len(got) != 0 {
				t.Errorf("Queued on an empty channel = %v, %v", got, err)
			}
			// Out of order: Queued returns id order.
			for _, i := range []int{3, 1, 2, 5, 4, 1} {
				d := newDelivery(i)
				d.Queued = true
				if i == 2 {
					d.Body = []byte{0, 0xff, '\n', 0}
					d.Header.Add("X-Repeat", "1")
					d.Header.Add("X-Repeat", "2")
				}
				if err := db.Enqueue("ch1", d); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Enqueue("ch2", newDelivery(9)); err != nil {
				t.Fatal(err)
			}
			mustQueueLen(t, db, "ch1", 5)
			mustQueueLen(t, db, "ch2", 1)

			for _, c := range []struct {
				after string
				limit int
				want  []string
			}{
				{"", 0, ids(1, 2, 3, 4, 5)},
				{"", 2, ids(1, 2)},
				{id(2), 2, ids(3, 4)},
				{id(2) + "0", 0, ids(3, 4, 5)}, // after an id not in the queue
				{id(5), 0, nil},
			} {
				got, err := db.Queued("ch1", c.after, c.limit)
				if err != nil {
					t.Fatal(err)
				}
				if g := queuedIDs(got); !slices.Equal(g, c.want) {
					t.Errorf("Queued(ch1, %q, %d) = %v, want %v", c.after, c.limit, g, c.want)
				}
			}
			got, _ := db.Queued("ch1", id(1), 1)
			want := newDelivery(2)
			want.Queued = true
			want.Body = []byte{0, 0xff, '\n', 0}
			want.Header.Add("X-Repeat", "1")
			want.Header.Add("X-Repeat", "2")
			sameDelivery(t, got[0], want)

			// Dequeue is idempotent, and per channel.
			for _, step := range []struct{ ch, id string }{
				{"ch1", id(1)}, {"ch1", id(1)}, {"ch1", id(4)}, {"ch1", id(9)}, {"ch3", id(1)},
			} {
				if err := db.Dequeue(step.ch, step.id); err != nil {
					t.Errorf("Dequeue(%s, %s): %v", step.ch, step.id, err)
				}
			}
			mustQueueLen(t, db, "ch1", 3)
			mustQueueLen(t, db, "ch2", 1)

			// A delivery dequeued can be queued again (a relay that lost the
			// agent mid-delivery).
			if err := db.Enqueue("ch1", newDelivery(1)); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			db = MustOpenPath(t, path, storage.Config{})
			got, err = db.Queued("ch1", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if g := queuedIDs(got); !slices.Equal(g, ids(1, 2, 3, 5)) {
				t.Errorf("after reopen Queued(ch1) = %v, want %v", g, ids(1, 2, 3, 5))
			}
			if !bytes.Equal(got[1].Body, []byte{0, 0xff, '\n', 0}) {
				t.Errorf("queued body = %q after reopen", got[1].Body)
			}
			mustQueueLen(t, db, "ch2", 1)
			// The relay's queue is not the agent's delivery store.
			if n, _ := db.Count(); n != 0 {
				t.Errorf("Count() = %d, queue entries counted as deliveries", n)
			}
		})
	}
}

func TestQueue_Invalid(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	for name, err := range map[string]error{
		"enqueue, no channel":   db.Enqueue("", newDelivery(1)),
		"enqueue, nil delivery": db.Enqueue("ch", nil),
		"enqueue, no id":        db.Enqueue("ch", &devhook.Delivery{}),
		"dequeue, no channel":   db.Dequeue("", id(1)),
		"dequeue, no id":        db.Dequeue("ch", ""),
	} {
		if devhook.ErrorCode(err) != devhook.EINVALID {
			t.Errorf("%s: error %v, want %s", name, err, devhook.EINVALID)
		}
	}
}

func TestChannel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	db, err := storage.Open(path, storage.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Channel("c1"); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Errorf("Channel(unknown) error = %v, want %s", err, devhook.ENOTFOUND)
	}
	if err := db.PutChannel(storage.Channel{}); devhook.ErrorCode(err) != devhook.EINVALID {
		t.Errorf("PutChannel(no id) error = %v, want %s", err, devhook.EINVALID)
	}
	want := storage.Channel{ID: "c1", TokenHash: []byte{0, 1, 0xfe}, CreatedAt: t0}
	for _, ch := range []storage.Channel{{ID: "c1", TokenHash: []byte("old")}, want, {ID: "c2"}} {
		if err := db.PutChannel(ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, storage.Config{})
	got, err := db.Channel("c1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || !bytes.Equal(got.TokenHash, want.TokenHash) || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("Channel(c1) = %+v, want %+v", got, want)
	}
	if got, err := db.Channel("c2"); err != nil || got.ID != "c2" || !got.CreatedAt.Equal(time.Time{}) {
		t.Errorf("Channel(c2) = %+v, %v", got, err)
	}
}
