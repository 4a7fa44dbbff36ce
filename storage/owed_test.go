package storage_test

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// Retry states are kept across a reopen, replaced, deleted, and read by id.
func TestRetryStates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	db, err := storage.Open(path, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	a := devhook.RetryState{State: devhook.RetryOwed, Since: since}
	b := devhook.RetryState{State: devhook.RetryFailed, Since: since, Reason: "gave up after 3 attempts over 1h: connection refused"}
	// A file without the bucket reads as empty.
	if ids, _, err := db.AllRetries(); err != nil || len(ids) != 0 {
		t.Fatalf("AllRetries on a new file: %v %v", ids, err)
	}
	if rs, err := db.Retries([]string{"x"}); err != nil || len(rs) != 0 {
		t.Fatalf("Retries on a new file: %v %v", rs, err)
	}
	if err := db.DeleteRetry("x"); err != nil {
		t.Fatalf("DeleteRetry on a new file: %v", err)
	}
	for id, st := range map[string]devhook.RetryState{"id-1": a, "id-2": a, "id-3": a} {
		if err := db.PutRetry(id, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutRetry("id-2", b); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteRetry("id-3"); err != nil {
		t.Fatal(err)
	}
	if err := db.PutRetry("", a); devhook.ErrorCode(err) != devhook.EINVALID {
		t.Fatalf("empty id: %v", err)
	}
	db.Close()

	db, err = storage.Open(path, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ids, states, err := db.AllRetries()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids, []string{"id-1", "id-2"}) || !reflect.DeepEqual(states, []devhook.RetryState{a, b}) {
		t.Fatalf("after reopen: %v %+v", ids, states)
	}
	rs, err := db.Retries([]string{"id-2", "id-3", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || !reflect.DeepEqual(rs["id-2"], b) {
		t.Fatalf("Retries: %+v", rs)
	}
}
