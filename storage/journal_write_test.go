package storage

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// Writing to the journal (journal_write.go, journal_file.go): a record is
// a copy into a mapped file; a write that fails fails its call alone and
// leaves the journal as if it had never been made; a copy that faults is
// written with pwrite instead.

func writeTestDelivery(i int) *devhook.Delivery {
	body := fmt.Appendf(nil, `{"event_type":"run.status","data":{"run_id":"run-%d","n":%d}}`, i%3, i)
	return &devhook.Delivery{
		ID:         fmt.Sprintf("0195b1c8-0000-7000-8000-%012x", i),
		Channel:    "ch1",
		ReceivedAt: time.Date(2026, 3, 4, 10, 0, i, 0, time.UTC),
		Method:     http.MethodPost,
		Path:       "/hook",
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       body,
		Verdict:    devhook.Verdict{Result: devhook.VerdictOK, Status: 200},
		Event:      devhook.ParseEvent(body),
	}
}

func writeTestAttempt(status int) devhook.Attempt {
	return devhook.Attempt{Kind: devhook.AttemptForward, Target: "http://127.0.0.1:8080/hook",
		StartedAt: time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC), Status: status, Body: []byte("ok")}
}

func openWriteTest(t *testing.T, noMap bool) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := Open(path, Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	db.journal.noMap = noMap
	t.Cleanup(func() { _ = db.Close() })
	return db, path
}

// checkJournalFile fails unless the active journal file's last round holds
// exactly want intact records, numbered one after the other, and returns
// their seqs.
func checkJournalFile(t *testing.T, db *DB, want int) []uint64 {
	t.Helper()
	db.journal.mu.Lock()
	path := db.journal.path[db.journal.active]
	db.journal.mu.Unlock()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := scanJournal(data)
	if err != nil || s.damaged != "" || s.foreign != "" || len(s.recs) != want {
		t.Fatalf("journal: %d records, %q %q, %v; want %d intact", len(s.recs), s.damaged, s.foreign, err, want)
	}
	var seqs []uint64
	for _, r := range s.recs {
		seqs = append(seqs, r.seq)
	}
	return seqs
}

// failingWrites fails the pwrite calls for which fail returns an error,
// after writing half their bytes, as a full disk does.
func failingWrites(fail func(call int) error) func(f *os.File, b []byte, off int64) (int, error) {
	var mu sync.Mutex
	calls := 0
	return func(f *os.File, b []byte, off int64) (int, error) {
		mu.Lock()
		calls++
		call := calls
		mu.Unlock()
		if err := fail(call); err != nil {
			n, _ := f.WriteAt(b[:len(b)/2], off)
			return n, err
		}
		return f.WriteAt(b, off)
	}
}

// A write that fails fails its call, and only it: its record is not
// pending, its seq is not taken (the records in the file stay numbered one
// after the other), its delivery has the state it had (an attempt lost is
// not counted, a delivery lost can be put again), and the calls after
// succeed; the half record it left is written over, and what a reopen
// reads is what was acknowledged. Written with pwrite (noMap), the only
// way a write fails but for a fault in the mapping, which ends in pwrite
// too (TestJournalWrite_FaultEndsInWrite); the failure is injected, as a
// disk that refuses exactly one write cannot be made.
func TestJournalWrite_FailedWriteFailsItsCallOnly(t *testing.T) {
	db, path := openWriteTest(t, true)
	hold := db.HoldFlushes()
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release()
	p := writeTestDelivery(100) // recorded before, pending
	if _, err := db.PutDelivery(p); err != nil {
		t.Fatal(err)
	}
	full := fmt.Errorf("disk full: %w", syscall.ENOSPC)
	failing := true
	db.journal.mu.Lock()
	db.journal.files[db.journal.active].writeAt = failingWrites(func(int) error {
		if failing {
			return full
		}
		return nil
	})
	db.journal.mu.Unlock()
	if _, err := db.PutDelivery(writeTestDelivery(1)); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("put on a full disk: %v, want ENOSPC", err)
	}
	if _, err := db.AddAttempt(p.ID, writeTestAttempt(500)); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("attempt on a full disk: %v, want ENOSPC", err)
	}
	if n := db.Pending(); n != 1 {
		t.Errorf("%d records pending, want 1 (the put before)", n)
	}
	if _, err := db.Delivery(writeTestDelivery(1).ID); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Errorf("a delivery whose write failed: %v, want not found", err)
	}
	if d, err := db.Delivery(p.ID); err != nil || len(d.Attempts) != 0 {
		t.Errorf("delivery with a failed attempt: %+v, %v; want no attempt", d, err)
	}
	// The file: the one record, then half of the attempt, not damage.
	checkJournalFile(t, db, 1)

	// Later calls succeed, numbered as if the failed ones were never made.
	failing = false
	if created, err := db.PutDelivery(writeTestDelivery(1)); err != nil || !created {
		t.Errorf("PutDelivery again after its write failed: %v, %v; want created", created, err)
	}
	a, err := db.AddAttempt(p.ID, writeTestAttempt(200))
	if err != nil || a.Seq != 1 {
		t.Errorf("AddAttempt after a failed one: Seq %d, %v; want 1", a.Seq, err)
	}
	if seqs := checkJournalFile(t, db, 3); seqs[0]+1 != seqs[1] || seqs[1]+1 != seqs[2] {
		t.Errorf("seqs in the file: %v, want one after the other", seqs)
	}
	release()

	// And so after the journal is replayed.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n, err := db.Count(); err != nil || n != 2 {
		t.Errorf("Count() = %d, %v; want 2", n, err)
	}
	d, err := db.Delivery(p.ID)
	if err != nil || len(d.Attempts) != 1 || d.Attempts[0].Seq != 1 || d.Attempts[0].Status != 200 {
		t.Fatalf("after reopening: %+v, %v; want the one attempt that succeeded, Seq 1", d, err)
	}
}

// A copy into the mapping that faults (here: the file cut short under it
// by someone else, at a page boundary after its records) does not crash
// the process: the record is written with pwrite, and a reopen reads
// every record acknowledged. A full disk faults the same way
// (TestJournal_DiskFull, on a real tmpfs).
func TestJournalWrite_FaultEndsInWrite(t *testing.T) {
	db, path := openWriteTest(t, false)
	hold := db.HoldFlushes()
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release()
	if _, err := db.PutDelivery(writeTestDelivery(0)); err != nil {
		t.Fatal(err)
	}
	db.journal.mu.Lock()
	jf := db.journal.files[db.journal.active]
	mapped, end := jf.mem != nil, jf.off
	var writes int
	writeAt := jf.writeAt
	jf.writeAt = func(f *os.File, b []byte, off int64) (int, error) { writes++; return writeAt(f, b, off) }
	db.journal.mu.Unlock()
	if !mapped {
		t.Skip("the journal is not mapped on this system")
	}
	page := int64(os.Getpagesize())
	if err := os.Truncate(jf.path, (end+page-1)/page*page); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := 1; i <= n; i++ {
		if _, err := db.PutDelivery(writeTestDelivery(i)); err != nil {
			t.Fatal(err)
		}
	}
	db.journal.mu.Lock()
	w := writes
	db.journal.mu.Unlock()
	if w == 0 {
		t.Fatal("no copy faulted: the test cut nothing")
	}
	checkJournalFile(t, db, n+1)
	release()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if c, err := db.Count(); err != nil || c != n+1 {
		t.Errorf("Count() = %d, %v; want %d", c, err, n+1)
	}
}

// Written with pwrite (noMap: as where the file cannot be mapped), the
// journal holds the same records, and reuses its files the same way.
func TestJournalWrite_Unmapped(t *testing.T) {
	db, path := openWriteTest(t, true)
	for round := range 3 {
		for i := round * 10; i < round*10+10; i++ {
			if _, err := db.PutDelivery(writeTestDelivery(i)); err != nil {
				t.Fatal(err)
			}
			if _, err := db.AddAttempt(writeTestDelivery(i).ID, writeTestAttempt(200+i)); err != nil {
				t.Fatal(err)
			}
		}
		if round < 2 {
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	db.journal.mu.Lock()
	for _, f := range db.journal.files {
		if f != nil && f.mem != nil {
			t.Errorf("%s is mapped", f.path)
		}
	}
	db.journal.mu.Unlock()
	checkJournalFile(t, db, 20)
	// Killed now: a copy of the files loses nothing.
	killed := filepath.Join(t.TempDir(), "devhook.db")
	for _, suffix := range []string{"", ".journal0", ".journal1"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(killed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kdb, err := Open(killed, Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer kdb.Close()
	if c, err := kdb.Count(); err != nil || c != 30 {
		t.Errorf("after a kill: Count() = %d, %v; want 30", c, err)
	}
	if d, err := kdb.Delivery(writeTestDelivery(25).ID); err != nil || len(d.Attempts) != 1 || d.Attempts[0].Status != 225 {
		t.Errorf("after a kill: %+v, %v; want delivery 25 with its attempt", d, err)
	}
}

// A delivery whose id sorts before the newest one in bbolt (late, or
// redelivered) is looked up there; one after it need not be.
func TestJournal_RedeliveryOfAnAppliedDelivery(t *testing.T) {
	db, path := openWriteTest(t, false)
	for _, i := range []int{5, 1} {
		if created, err := db.PutDelivery(writeTestDelivery(i)); err != nil || !created {
			t.Fatalf("put %d: %v, %v", i, created, err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		i       int
		created bool
	}{{5, false}, {1, false}, {3, true}, {3, false}, {9, true}} {
		if created, err := db.PutDelivery(writeTestDelivery(c.i)); err != nil || created != c.created {
			t.Errorf("put %d: created %v, %v; want %v", c.i, created, err, c.created)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, i := range []int{9, 5, 3, 1} {
		if created, err := db.PutDelivery(writeTestDelivery(i)); err != nil || created {
			t.Errorf("after reopening, put %d: created %v, %v; want false", i, created, err)
		}
	}
	if n, err := db.Count(); err != nil || n != 4 {
		t.Errorf("Count() = %d, %v; want 4", n, err)
	}
}
