package storage_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// killedChildEnv makes the test binary act as a process that records
// deliveries and is then killed, for TestJournal_KilledProcessLosesNothing.
const killedChildEnv = "DEVHOOK_STORAGE_KILLED_CHILD"

const killedN = 300

// killedHeld is how many of the last deliveries killedChild records with
// flushes held: their records are in the journal alone when it dies.
const killedHeld = 100

func TestMain(m *testing.M) {
	if path := os.Getenv(killedChildEnv); path != "" {
		killedChild(path)
		return
	}
	if path := os.Getenv(deleteChildEnv); path != "" {
		deleteChild(path)
		return
	}
	if env := os.Getenv(bodyKillChildEnv); env != "" {
		bodyKillChild(env)
		return
	}
	os.Exit(m.Run())
}

// killedChild records killedN deliveries, each with two attempts, then
// kills itself without closing the store: whatever the journal holds and
// bbolt does not must survive.
func killedChild(path string) {
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for i := range killedN {
		if i == killedN-killedHeld {
			db.HoldFlushes() // never released: the process dies holding it
		}
		if _, err := db.PutDelivery(newDelivery(i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for k := range 2 {
			if _, err := db.AddAttempt(id(i), newAttempt(i*10+k)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// runKilledChild runs killedChild on a store at a fresh path and returns
// the path. It fails the test unless the journal holds the records of at
// least the last killedHeld deliveries: bbolt alone must not be what
// makes the test pass.
func runKilledChild(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devhook.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killedChildEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed; stderr: %s", err, stderr.Bytes())
	}
	held := 0
	for _, suffix := range []string{".journal0", ".journal1"} {
		n, problem, err := storage.JournalRecords(path + suffix)
		if err != nil && !os.IsNotExist(err) || problem != "" {
			t.Fatalf("journal%s after the kill: %v %s", suffix, err, problem)
		}
		held += n
	}
	if held < killedHeld*3 {
		t.Fatalf("the journal held %d records at the kill, want at least %d", held, killedHeld*3)
	}
	return path
}

func checkKilledN(t *testing.T, db *storage.DB) {
	t.Helper()
	n, err := db.Count()
	if err != nil || n != killedN {
		t.Fatalf("Count = %d, %v; want %d", n, err, killedN)
	}
	for _, i := range []int{0, 1, killedN / 2, killedN - 1} {
		d, err := db.Delivery(id(i))
		if err != nil {
			t.Fatal(err)
		}
		sameDelivery(t, &devhook.Delivery{ID: d.ID, Channel: d.Channel, ReceivedAt: d.ReceivedAt,
			Method: d.Method, Path: d.Path, Header: d.Header, Body: d.Body, Verdict: d.Verdict, Event: d.Event,
		}, newDelivery(i))
		if len(d.Attempts) != 2 {
			t.Fatalf("delivery %d has %d attempts, want 2", i, len(d.Attempts))
		}
		for k, a := range d.Attempts {
			want := newAttempt(i*10 + k)
			want.Seq = k + 1
			sameAttempt(t, a, want)
		}
	}
	list, err := db.List(devhook.Filter{Limit: 1})
	if err != nil || len(list) != 1 || list[0].Attempts != 2 || list[0].Status != newAttempt((killedN-1)*10+1).Status {
		t.Fatalf("List = %+v, %v; want the last delivery with its second attempt", list, err)
	}
}

func TestJournal_KilledProcessLosesNothing(t *testing.T) {
	path := runKilledChild(t)
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	checkKilledN(t, db)
	for _, suffix := range []string{".journal0", ".journal1"} {
		if _, err := os.Stat(path + suffix); !os.IsNotExist(err) {
			t.Errorf("%s: %v after Open applied it, want it removed", suffix, err)
		}
	}
}

// A torn record at the end (a process killed in the middle of a write)
// and a journal applied twice (a crash between a commit and the emptying
// of its file) change nothing, and a torn tail is not reported as damage.
func TestJournal_TornTailAndReplayTwice(t *testing.T) {
	path := runKilledChild(t)
	saved := map[string][]byte{}
	for _, suffix := range []string{".journal0", ".journal1"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			continue
		}
		saved[suffix] = b
	}
	for suffix, b := range saved {
		offs := storage.RecordOffsets(b)
		if len(offs) < 2 {
			continue
		}
		// The start of a copy of its first record, cut off.
		torn := append(append([]byte{}, b...), b[offs[0]:offs[1]-5]...)
		if err := os.WriteFile(path+suffix, torn, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logs := &logRecorder{}
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: logs.logf})
	if err != nil {
		t.Fatal(err)
	}
	checkKilledN(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if l := logs.lines(); len(l) != 0 {
		t.Errorf("a torn tail was reported: %q", l)
	}
	if m, _ := filepath.Glob(path + "*.damaged-*"); len(m) != 0 {
		t.Errorf("a torn tail was set aside as damage: %v", m)
	}
	for suffix, b := range saved {
		if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db = MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	checkKilledN(t, db)
}

// The journal keeps its own copy: a caller may reuse its buffers once
// PutDelivery and AddAttempt return.
func TestJournal_CallerMayReuseBuffers(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	d := newDelivery(1)
	want := newDelivery(1)
	mustPut(t, db, d)
	a := newAttempt(1)
	if _, err := db.AddAttempt(d.ID, a); err != nil {
		t.Fatal(err)
	}
	for i := range d.Body {
		d.Body[i] = 'x'
	}
	for i := range a.Body {
		a.Body[i] = 'x'
	}
	got, err := db.Delivery(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Body, want.Body) || !bytes.Equal(got.Attempts[0].Body, newAttempt(1).Body) {
		t.Fatalf("stored bodies changed with the caller's buffers: %q, %q", got.Body, got.Attempts[0].Body)
	}
}

// Writers and readers at once: every attempt gets its own Seq and readers
// always see a whole delivery.
func TestJournal_ConcurrentWritersAndReaders(t *testing.T) {
	for range 2 {
		t.Run("run", func(t *testing.T) {
			db := MustOpenDB(t, storage.Config{MaxDeliveries: -1, MaxAge: -1})
			const writers, each, attempts = 6, 40, 3
			var wg sync.WaitGroup
			stop := make(chan struct{})
			errs := make(chan error, writers+1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					list, err := db.List(devhook.Filter{Limit: 20})
					if err != nil {
						errs <- err
						return
					}
					for _, s := range list {
						if _, err := db.Delivery(s.ID); err != nil {
							errs <- fmt.Errorf("listed %s, then: %w", s.ID, err)
							return
						}
					}
				}
			}()
			var ww sync.WaitGroup
			for w := range writers {
				ww.Add(1)
				go func() {
					defer ww.Done()
					for k := range each {
						i := w*each + k
						if _, err := db.PutDelivery(newDelivery(i)); err != nil {
							errs <- err
							return
						}
						for n := range attempts {
							a, err := db.AddAttempt(id(i), newAttempt(n))
							if err != nil {
								errs <- err
								return
							}
							if a.Seq != n+1 {
								errs <- fmt.Errorf("delivery %d: attempt %d got Seq %d", i, n, a.Seq)
								return
							}
						}
					}
				}()
			}
			ww.Wait()
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			n, err := db.Count()
			if err != nil || n != writers*each {
				t.Fatalf("Count = %d, %v; want %d", n, err, writers*each)
			}
			for i := range writers * each {
				d, err := db.Delivery(id(i))
				if err != nil || len(d.Attempts) != attempts {
					t.Fatalf("delivery %d: %v, %d attempts", i, err, len(d.Attempts))
				}
			}
		})
	}
}

func TestJournal_WriteAfterClose(t *testing.T) {
	db, err := storage.Open(filepath.Join(t.TempDir(), "devhook.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, newDelivery(1))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PutDelivery(newDelivery(2)); err == nil {
		t.Fatal("PutDelivery after Close succeeded")
	}
	if _, err := db.AddAttempt(id(1), newAttempt(1)); err == nil {
		t.Fatal("AddAttempt after Close succeeded")
	}
}

// syscw returns how many write system calls (write, pwrite, writev…) this
// process has made, from /proc/self/io.
func syscw(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no write counts here: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no syscw in /proc/self/io")
	return 0
}

// Recording makes no system call per record: a record is a copy into the
// mapped journal file (journal_file.go). Each was a pwrite before (a
// delivery, its put and its attempt, two of them alone).
func TestJournal_NoWriteCallPerRecord(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the journal is mapped on unix; write calls are counted on Linux")
	}
	db := MustOpenDB(t, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	release := db.HoldFlushes() // bbolt's commits are write calls: not now
	defer release()
	mustPut(t, db, newDelivery(0)) // the file is created
	const n = 500
	before := syscw(t)
	for i := 1; i <= n; i++ {
		mustPut(t, db, newDelivery(i))
		if _, err := db.AddAttempt(id(i), newAttempt(i)); err != nil {
			t.Fatal(err)
		}
	}
	if w := syscw(t) - before; w > n/50 {
		t.Errorf("%d write calls to record %d deliveries and their attempts, want at most %d", w, n, n/50)
	}
	if c, err := db.Count(); err != nil || c != n+1 {
		t.Errorf("Count() = %d, %v; want %d", c, err, n+1)
	}
}

// A journal file is reused in place once bbolt has its records, the
// earlier round's records left after the new ones: a process killed then
// replays none of them, and a delivery deleted meanwhile stays deleted.
func TestJournal_ReusedFileReplaysItsLastRoundOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	for round := range 4 {
		for i := round * 50; i < round*50+50; i++ {
			mustPut(t, db, newDelivery(i))
			if _, err := db.AddAttempt(id(i), newAttempt(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Delete([]string{id(7), id(120)}); err != nil {
		t.Fatal(err)
	}
	release := db.HoldFlushes()
	defer release()
	for i := 1000; i < 1003; i++ {
		mustPut(t, db, newDelivery(i))
	}
	// Killed now: a copy of the files. Both journal files were reused;
	// their last rounds hold three records, the rounds before many more.
	killed := filepath.Join(t.TempDir(), "devhook.db")
	held, size := 0, 0
	for _, suffix := range []string{"", ".journal0", ".journal1"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if suffix != "" {
			held += len(storage.RecordOffsets(b))
			size += len(bytes.TrimRight(b, "\x00"))
		}
		if err := os.WriteFile(killed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if held != 3 || size < 20<<10 {
		t.Fatalf("the journal files hold %d records of their last rounds in %d bytes, want 3 after earlier rounds' records", held, size)
	}
	var logs []string
	kdb := MustOpenPath(t, killed, storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	gone(t, kdb, 7)
	gone(t, kdb, 120)
	if n, err := kdb.Count(); err != nil || n != 200-2+3 {
		t.Errorf("after the kill: Count() = %d, %v; want %d", n, err, 200-2+3)
	}
	if len(logs) != 0 {
		t.Errorf("Open said %q, want nothing", logs)
	}
	// Only the last round is read: with an empty store beside them, the
	// files give the three deliveries recorded last, and nothing else.
	empty := filepath.Join(t.TempDir(), "devhook.db")
	for _, suffix := range []string{".journal0", ".journal1"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(empty+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edb := MustOpenPath(t, empty, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if n, err := edb.Count(); err != nil || n != 3 {
		t.Errorf("the journal files alone: Count() = %d, %v; want the 3 of their last rounds", n, err)
	}
}
