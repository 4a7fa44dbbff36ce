package storage

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// journal puts PutDelivery and AddAttempt on a short path, instead of a
// bbolt commit each. A bbolt commit of one delivery rewrites a leaf and a
// branch page in five buckets and costs about 70 µs of CPU; appending the
// same record to a file is one write(2). So a write appends a record to
// the journal and returns: from then on it survives the process being
// killed, as a NoSync bbolt commit does (the journal is never fsynced: a
// power loss may lose the last records). A goroutine owned by the DB
// applies the journal to bbolt in batches, at most journalDelay later.
// Reads never write: they read a bbolt read transaction plus the records
// still pending in memory (see pending.go). Open applies what a killed
// process left in the journal.
//
// What it saves (BenchmarkRecordDelivery: 2,000 deliveries of a 1.5 KB
// body, each PutDelivery then AddAttempt): through the journal, its
// flushes included, about 26 µs of CPU and 50 allocations a delivery; as
// two bbolt commits, about 135 µs and 305. A delivery's tunnel costs about
// 80 µs of CPU end to end at concurrency 32 (journal included; go run
// ./bench), so the saving, about 110 µs, is more than a whole delivery:
// without the journal a delivery would cost more than twice as much. Kept. TestJournal_MatchesDirectCommits holds it to the same
// stored result as those commits.
//
// Each of the journal's concerns has its file:
//
//   - journal_format.go: a journal file's header and records, as bytes
//   - journal_write.go: appending a record; concurrent writes share a write(2)
//   - journal_flush.go: the goroutine that applies the pending records, and
//     the two files taking turns
//   - journal_apply.go: applying records to bbolt; a record bbolt refuses
//   - journal_recovery.go: what Open does with the files a killed process
//     left, damaged ones included
type journal struct {
	path [2]string

	mu       sync.Mutex
	files    [2]*os.File // opened on the first write
	sizes    [2]int64
	active   int
	seq      uint64
	pending  []jrec // never changed in place: readers keep a copy of the slice
	bytes    int
	ids      map[string]jstate
	lastBolt []byte    // no delivery id in bbolt sorts after it
	applied  uint64    // the seq of the newest record a flush applied
	first    time.Time // when the oldest pending record was appended
	failed   error     // the last flush's error, until a flush succeeds
	closed   bool

	// Group write: see the top of journal_write.go.
	queue     []jwrite   // records waiting for the next write, in seq order
	writing   bool       // a caller holds the write turn: it writes, or hands the turn on
	writingTo int        // the file a write is under way to, or -1
	settled   *sync.Cond // on mu; broadcast after every write
	batch     []jwrite   // the turn's: the records it is writing
	wbuf      []byte     // the turn's: those records end to end

	// overMax is set while more than journalMaxBytes are pending and bbolt
	// takes writes: a write then flushes before it returns.
	overMax atomic.Bool

	flushMu sync.Mutex // one flush at a time

	scratch scratch   // encoding buffers (journal_format.go)
	dones   doneChans // queued writes' outcome channels (journal_write.go)

	// writeAt writes records to a journal file: (*os.File).WriteAt, which
	// tests replace to hold or fail a write.
	writeAt func(f *os.File, b []byte, off int64) (int, error)

	kick     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// jrec is a journaled record that bbolt does not have yet.
type jrec struct {
	seq  uint64
	kind byte
	raw  []byte          // the record as it is in the file, header included
	key  string          // its delivery's id
	put  encodedDelivery // recPut: slices of raw
	id   []byte          // recAttempt: a slice of raw
	att  outcome         // recAttempt: the fields a summary shows
	enc  []byte          // recAttempt: the encoded attempt, a slice of raw
}

var errClosed = errors.New("the database is closed")

func newJournal(dbPath string) *journal {
	j := &journal{
		path:      [2]string{dbPath + ".journal0", dbPath + ".journal1"},
		ids:       map[string]jstate{},
		writingTo: -1,
		writeAt:   (*os.File).WriteAt,
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	j.settled = sync.NewCond(&j.mu)
	return j
}

// closeJournal stops the flusher, applies what is pending and removes the
// files.
func (db *DB) closeJournal() error {
	j := db.journal
	j.stopOnce.Do(func() { close(j.stop) })
	<-j.done
	j.mu.Lock()
	j.closed = true
	for j.writing { // records queued before Close are written first
		j.settled.Wait()
	}
	j.mu.Unlock()
	err := db.flush()
	if err == nil {
		// Commits are not fsynced; a clean close leaves the file durable
		// before the journal that also holds its last writes goes.
		err = db.bolt.Sync()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, f := range j.files {
		if f == nil {
			continue
		}
		if cerr := f.Close(); cerr != nil && err == nil {
			err = cerr
		}
		j.files[i] = nil
		if err == nil {
			// Applied: the file holds nothing bbolt lacks.
			if rerr := os.Remove(j.path[i]); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = rerr
			}
		}
	}
	return err
}
