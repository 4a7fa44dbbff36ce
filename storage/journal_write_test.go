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

// The group write of journal_write.go: concurrent records share a write(2), a
// failed write fails exactly the calls whose records it held, and leaves
// the journal as if they had never been made.

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

// gatedWrites replaces the journal's write(2): the write calls see pass to
// the file, except that the first one waits for open to be closed, and
// those for which fail returns an error write half their bytes and fail.
type gatedWrites struct {
	entered chan struct{} // closed when the first write is waiting
	open    chan struct{}
	fail    func(call int) error

	mu    sync.Mutex
	calls int
	recs  []int // records in each write
}

func gateWrites(db *DB, fail func(call int) error) *gatedWrites {
	g := &gatedWrites{entered: make(chan struct{}), open: make(chan struct{}), fail: fail}
	db.journal.mu.Lock()
	db.journal.writeAt = g.writeAt
	db.journal.mu.Unlock()
	return g
}

func (g *gatedWrites) writeAt(f *os.File, b []byte, off int64) (int, error) {
	g.mu.Lock()
	g.calls++
	call := g.calls
	g.recs = append(g.recs, len(RecordOffsets(append(appendFileHeader(nil), b...))))
	g.mu.Unlock()
	if call == 1 {
		close(g.entered)
		<-g.open
	}
	if g.fail != nil {
		if err := g.fail(call); err != nil {
			n, _ := f.WriteAt(b[:len(b)/2], off) // torn, as on a full disk
			return n, err
		}
	}
	return f.WriteAt(b, off)
}

func (g *gatedWrites) records() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.recs...)
}

// waitQueued waits until n records are queued behind the write under way.
func waitQueued(t *testing.T, db *DB, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		db.journal.mu.Lock()
		q := len(db.journal.queue)
		db.journal.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func openWriteTest(t *testing.T) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := Open(path, Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, path
}

// checkJournalFile fails unless the active journal file holds exactly
// want intact records and nothing after them.
func checkJournalFile(t *testing.T, db *DB, want int) {
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
	end := fileHeaderLen
	for _, r := range s.recs {
		end += len(r.raw)
	}
	if end != len(data) {
		t.Fatalf("journal: %d bytes after its last record, want none (a failed write is cut off)", len(data)-end)
	}
}

func TestJournalWrite_ConcurrentRecordsShareAWrite(t *testing.T) {
	db, _ := openWriteTest(t)
	release := db.HoldFlushes()
	defer release()
	g := gateWrites(db, nil)
	const n = 8
	errs := make(chan error, n+1)
	go func() { _, err := db.PutDelivery(writeTestDelivery(0)); errs <- err }()
	<-g.entered
	for i := 1; i <= n; i++ {
		go func() { _, err := db.PutDelivery(writeTestDelivery(i)); errs <- err }()
	}
	waitQueued(t, db, n)
	close(g.open)
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := g.records(); len(got) != 2 || got[0] != 1 || got[1] != n {
		t.Fatalf("records per write: %v, want [1 %d]: the queued records in one write", got, n)
	}
	if p := db.Pending(); p != n+1 {
		t.Fatalf("%d records pending, want %d", p, n+1)
	}
	checkJournalFile(t, db, n+1)
	// A lone write does not wait for anyone.
	if _, err := db.AddAttempt(writeTestDelivery(0).ID, writeTestAttempt(200)); err != nil {
		t.Fatal(err)
	}
	if got := g.records(); len(got) != 3 || got[2] != 1 {
		t.Fatalf("records per write: %v, want a third write of one record", got)
	}
}

// A write that fails fails the calls whose records it held, and only
// them: their records are not pending, the file is cut back, their
// deliveries have the state they had (an attempt lost is not counted, a
// delivery lost can be put again), and the calls after succeed.
func TestJournalWrite_FailedWriteFailsItsRecordsOnly(t *testing.T) {
	db, path := openWriteTest(t)
	var once sync.Once
	hold := db.HoldFlushes()
	release := func() { once.Do(hold) }
	defer release()
	p := writeTestDelivery(100) // recorded before, pending
	if _, err := db.PutDelivery(p); err != nil {
		t.Fatal(err)
	}
	full := fmt.Errorf("disk full: %w", syscall.ENOSPC)
	g := gateWrites(db, func(call int) error {
		if call == 2 {
			return full
		}
		return nil
	})
	first := make(chan error, 1)
	go func() { _, err := db.PutDelivery(writeTestDelivery(0)); first <- err }()
	<-g.entered
	// Queued behind it, written together, and failed together.
	type result struct {
		what string
		err  error
	}
	results := make(chan result, 3)
	go func() { _, err := db.PutDelivery(writeTestDelivery(1)); results <- result{"put 1", err} }()
	go func() { _, err := db.PutDelivery(writeTestDelivery(2)); results <- result{"put 2", err} }()
	go func() { _, err := db.AddAttempt(p.ID, writeTestAttempt(500)); results <- result{"attempt", err} }()
	waitQueued(t, db, 3)
	close(g.open)
	if err := <-first; err != nil {
		t.Fatalf("the write before the failed one: %v", err)
	}
	for range 3 {
		r := <-results
		if !errors.Is(r.err, syscall.ENOSPC) {
			t.Errorf("%s in the failed write: %v, want ENOSPC", r.what, r.err)
		}
	}
	if got := g.records(); len(got) != 2 || got[1] != 3 {
		t.Fatalf("records per write: %v, want the 3 queued in the second", got)
	}
	if n := db.Pending(); n != 2 {
		t.Errorf("%d records pending, want 2 (the two puts that were written)", n)
	}
	checkJournalFile(t, db, 2)
	if _, err := db.Delivery(writeTestDelivery(1).ID); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Errorf("a delivery whose write failed: %v, want not found", err)
	}
	if d, err := db.Delivery(p.ID); err != nil || len(d.Attempts) != 0 {
		t.Errorf("delivery with a failed attempt: %+v, %v; want no attempt", d, err)
	}

	// Later calls succeed, numbered as if the failed ones were never made.
	if created, err := db.PutDelivery(writeTestDelivery(1)); err != nil || !created {
		t.Errorf("PutDelivery again after its write failed: %v, %v; want created", created, err)
	}
	a, err := db.AddAttempt(p.ID, writeTestAttempt(200))
	if err != nil || a.Seq != 1 {
		t.Errorf("AddAttempt after a failed one: Seq %d, %v; want 1", a.Seq, err)
	}
	checkJournalFile(t, db, 4)
	release()

	// And so after the journal is replayed.
	db.journal.mu.Lock()
	db.journal.writeAt = (*os.File).WriteAt
	db.journal.mu.Unlock()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n, err := db.Count(); err != nil || n != 3 {
		t.Errorf("Count() = %d, %v; want 3", n, err)
	}
	if _, err := db.Delivery(writeTestDelivery(2).ID); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Errorf("delivery 2 after reopening: %v, want not found", err)
	}
	d, err := db.Delivery(p.ID)
	if err != nil || len(d.Attempts) != 1 || d.Attempts[0].Seq != 1 || d.Attempts[0].Status != 200 {
		t.Fatalf("after reopening: %+v, %v; want the one attempt that succeeded, Seq 1", d, err)
	}
}

// While a delivery's record is being written, its next record waits: a
// redelivery is not told "recorded already" for a record that the write
// may yet lose. When it is lost, the redelivery records it.
func TestJournalWrite_SameDeliveryWaitsForItsWrite(t *testing.T) {
	db, _ := openWriteTest(t)
	g := gateWrites(db, func(call int) error {
		if call == 1 {
			return syscall.EIO
		}
		return nil
	})
	d := writeTestDelivery(1)
	first := make(chan error, 1)
	go func() { _, err := db.PutDelivery(d); first <- err }()
	<-g.entered
	type result struct {
		created bool
		err     error
	}
	again := make(chan result, 1)
	go func() { c, err := db.PutDelivery(writeTestDelivery(1)); again <- result{c, err} }()
	select {
	case r := <-again:
		t.Fatalf("the redelivery returned (%v, %v) while the first record was being written", r.created, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.open)
	if err := <-first; !errors.Is(err, syscall.EIO) {
		t.Fatalf("first write: %v, want EIO", err)
	}
	if r := <-again; r.err != nil || !r.created {
		t.Fatalf("the redelivery after the first write failed: %v, %v; want it recorded by this call", r.created, r.err)
	}
	if _, err := db.Delivery(d.ID); err != nil {
		t.Fatal(err)
	}
}

// A delivery whose id sorts before the newest one in bbolt (late, or
// redelivered) is looked up there; one after it need not be.
func TestJournal_RedeliveryOfAnAppliedDelivery(t *testing.T) {
	db, path := openWriteTest(t)
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
