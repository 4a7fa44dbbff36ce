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
// same record to a mapped file is a copy, without a system call. So a
// write appends a record to the journal and returns: from then on it
// survives the process being killed, as a NoSync bbolt commit does (the
// journal is never fsynced: a power loss may lose the last records). A
// goroutine owned by the DB applies the journal to bbolt in batches, at
// most journalDelay later. Reads never write: they read a bbolt read
// transaction plus the records still pending in memory (see pending.go).
// Open applies what a killed process left in the journal.
//
// What it saves (BenchmarkRecordDelivery: deliveries of a 1.5 KB body,
// each PutDelivery then AddAttempt): through the journal, its flushes
// included, about 20 µs of CPU and 23 allocations a delivery; as two
// bbolt commits, about 170 µs and 330. A delivery's tunnel costs about
// 130 µs of CPU end to end at concurrency 32 (journal included; go run
// ./bench), so without the journal a delivery would cost twice as much.
// Kept. TestJournal_MatchesDirectCommits holds it to the same stored
// result as those commits.
//
// Each of the journal's concerns has its file:
//
//   - journal_format.go: a journal file's header and records, as bytes
//   - journal_file.go: a file mapped, grown, written and reused in place
//   - journal_write.go: appending a record
//   - journal_flush.go: the goroutine that applies the pending records, and
//     the two files taking turns
//   - journal_apply.go: applying records to bbolt; a record bbolt refuses
//   - journal_recovery.go: what Open does with the files a killed process
//     left, damaged ones included
type journal struct {
	path [2]string

	mu       sync.Mutex
	files    [2]*journalFile // created on the first write to each
	active   int             // the file records are appended to
	seq      uint64          // of the newest record written
	pending  []jrec          // never changed in place: readers keep a copy of the slice
	bytes    int
	ids      map[string]jstate
	lastBolt []byte    // no delivery id in bbolt sorts after it
	applied  uint64    // the seq of the newest record a flush applied
	first    time.Time // when the oldest pending record was appended
	failed   error     // the last flush's error, until a flush succeeds
	closed   bool

	// overMax is set while more than journalMaxBytes are pending and bbolt
	// takes writes: a write then flushes before it returns.
	overMax atomic.Bool

	flushMu sync.Mutex // one flush at a time
	// Held with flushMu: when bbolt's mapped pages were last given back
	// (mapped_linux.go; zero: never), and the bytes applied since.
	releasedAt   time.Time
	sinceRelease int

	scratch scratch // encoding buffers (journal_format.go)

	// noSpace is Config.NoSpace; noMap writes the files with pwrite
	// rather than through a mapping (tests).
	noSpace func() error
	noMap   bool

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

func newJournal(dbPath string, noSpace func() error) *journal {
	return &journal{
		path:    [2]string{dbPath + ".journal0", dbPath + ".journal1"},
		ids:     map[string]jstate{},
		noSpace: noSpace,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// closeJournal stops the flusher, applies what is pending and removes the
// files.
func (db *DB) closeJournal() error {
	j := db.journal
	j.stopOnce.Do(func() { close(j.stop) })
	<-j.done
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	err := db.flush()
	if err == nil {
		// Commits are not fsynced; a clean close leaves the file durable
		// before the journal that also holds its last writes goes, and
		// the bodies it refers to before it.
		if err = db.bodies.sync(); err == nil {
			err = db.bolt.Sync()
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, f := range j.files {
		if f == nil {
			continue
		}
		if cerr := f.close(); cerr != nil && err == nil {
			err = cerr
		}
		j.files[i] = nil
		if err == nil {
			// Applied: the file holds nothing bbolt lacks.
			if rerr := os.Remove(f.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = rerr
			}
		}
	}
	return err
}
