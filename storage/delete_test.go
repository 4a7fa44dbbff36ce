package storage_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// recordEach records deliveries from..to-1, each with an attempt of
// status 200+i%5.
func recordEach(t *testing.T, db *storage.DB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		mustPut(t, db, newDelivery(i))
		if _, err := db.AddAttempt(id(i), newAttempt(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// gone fails the test unless delivery i is nowhere to be read.
func gone(t *testing.T, db *storage.DB, i int) {
	t.Helper()
	if _, err := db.Delivery(id(i)); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Errorf("delivery %d after its delete: %v, want not found", i, err)
	}
	if _, err := db.AddAttempt(id(i), newAttempt(i)); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Errorf("an attempt added to deleted delivery %d: %v, want not found", i, err)
	}
	list, err := db.List(devhook.Filter{Limit: storage.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == id(i) {
			t.Errorf("deleted delivery %d is still listed", i)
		}
	}
	run, err := db.RunDeliveries(newDelivery(i).Event.RunID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range run {
		if s.ID == id(i) {
			t.Errorf("deleted delivery %d is still in its run", i)
		}
	}
}

// A delete removes the delivery and everything kept of it: its body,
// list row, attempts, run index entry and retry state; the others stay,
// and the count follows.
func TestDelete_RemovesWhatIsKeptOfIt(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	recordEach(t, db, 0, 10)
	if err := db.PutRetry(id(5), devhook.RetryState{State: devhook.RetryOwed, Since: t0}); err != nil {
		t.Fatal(err)
	}
	removed, err := db.Delete([]string{id(2), id(5), id(2), id(99), "not-an-id"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{id(2), id(5)}; !slices.Equal(removed, want) {
		t.Fatalf("Delete removed %v, want %v (once each, the missing left out)", removed, want)
	}
	gone(t, db, 2)
	gone(t, db, 5)
	if rs, err := db.Retries([]string{id(5)}); err != nil || len(rs) != 0 {
		t.Errorf("retry state of a deleted delivery: %v, %v", rs, err)
	}
	if n, err := db.Count(); err != nil || n != 8 {
		t.Errorf("Count = %d, %v; want 8", n, err)
	}
	lens := db.BucketLens()
	for bucket, want := range map[string]int{"deliveries": 8, "bodies": 8, "summaries": 8, "attempts": 8, "runs": 8} {
		if lens[bucket] != want {
			t.Errorf("%s holds %d keys, want %d: %v", bucket, lens[bucket], want, lens)
		}
	}
	for _, i := range []int{0, 1, 3, 9} {
		if d, err := db.Delivery(id(i)); err != nil || len(d.Attempts) != 1 {
			t.Errorf("delivery %d, not deleted: %v", i, err)
		}
	}
}

// A delivery recorded a moment ago is in the journal alone: a delete
// applies it first and removes it, and it does not come back when the
// store is opened again.
func TestDelete_WinsOverThePendingJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := storage.Open(path, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	recordEach(t, db, 0, 3)
	release := db.HoldFlushes()
	recordEach(t, db, 3, 6)
	if _, err := db.AddAttempt(id(0), newAttempt(50)); err != nil {
		t.Fatal(err)
	}
	if db.Pending() < 7 {
		t.Fatalf("%d records pending, want those of 3 deliveries and 4 attempts", db.Pending())
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.Delete([]string{id(0), id(4)})
		done <- err
	}()
	release() // the delete, or the flusher, applies them
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	gone(t, db, 0)
	gone(t, db, 4)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = MustOpenPath(t, path, storage.Config{})
	gone(t, db, 0)
	gone(t, db, 4)
	if n, err := db.Count(); err != nil || n != 4 {
		t.Errorf("Count after reopening = %d, %v; want 4", n, err)
	}
}

// deleteChildEnv makes the test binary record deliveries, delete some of
// them (some still in the journal alone when the delete is asked), record
// an attempt more, and kill itself: TestDelete_SurvivesAKill.
const deleteChildEnv = "DEVHOOK_STORAGE_DELETE_CHILD"

const deleteChildN = 40

// deleted is the deliveries deleteChild deletes.
func deletedByChild() []string { return []string{id(1), id(10), id(38), id(39)} }

func deleteChild(path string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		fail(err)
	}
	var release func()
	for i := range deleteChildN {
		if i == deleteChildN-10 {
			release = db.HoldFlushes()
		}
		if _, err := db.PutDelivery(newDelivery(i)); err != nil {
			fail(err)
		}
		if _, err := db.AddAttempt(id(i), newAttempt(i)); err != nil {
			fail(err)
		}
	}
	if db.Pending() < 20 {
		fail(fmt.Errorf("%d records pending before the delete, want 20", db.Pending()))
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.Delete(deletedByChild())
		done <- err
	}()
	release()
	if err := <-done; err != nil {
		fail(err)
	}
	// Journaled after the delete, applied only by the next Open.
	db.HoldFlushes()
	if _, err := db.AddAttempt(id(20), newAttempt(77)); err != nil {
		fail(err)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// A delete survives the process being killed right after it, with the
// journal holding what came after: the deliveries deleted stay deleted,
// the others and their later attempts are there.
func TestDelete_SurvivesAKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), deleteChildEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed; stderr: %s", err, stderr.Bytes())
	}
	var logs []string
	db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	for _, i := range []int{1, 10, 38, 39} {
		gone(t, db, i)
	}
	if n, err := db.Count(); err != nil || n != deleteChildN-4 {
		t.Errorf("Count after the kill = %d, %v; want %d", n, err, deleteChildN-4)
	}
	d, err := db.Delivery(id(20))
	if err != nil || len(d.Attempts) != 2 || d.Attempts[1].Status != newAttempt(77).Status {
		t.Fatalf("delivery 20 and the attempt journaled after the delete: %+v, %v", d, err)
	}
	if len(logs) != 0 {
		t.Errorf("Open said %q, want nothing", logs)
	}
}

// DeleteMatching removes what a selection chooses, oldest first: by age,
// receiver status and run; a damaged list row cannot be matched and is
// kept, unless all are deleted.
func TestDeleteMatching(t *testing.T) {
	db := MustOpenDB(t, storage.Config{})
	recordEach(t, db, 0, 20)
	// Age: deliveries 0-4 were received before t0+5s.
	out, err := db.DeleteMatching(storage.Selection{ReceivedBefore: t0.Add(5 * time.Second)})
	if err != nil || !slices.Equal(out.IDs, ids(0, 1, 2, 3, 4)) || out.Kept != nil {
		t.Fatalf("ReceivedBefore: %+v, %v", out, err)
	}
	// Status 202: i%5 == 2.
	out, err = db.DeleteMatching(storage.Selection{Filter: devhook.Filter{Status: 202}})
	if err != nil || !slices.Equal(out.IDs, ids(7, 12, 17)) {
		t.Fatalf("Status 202: %+v, %v", out, err)
	}
	// Both, and a run: run-%d is i%7.
	out, err = db.DeleteMatching(storage.Selection{Filter: devhook.Filter{RunID: "run-3"}, ReceivedBefore: t0.Add(15 * time.Second)})
	if err != nil || !slices.Equal(out.IDs, ids(10)) {
		t.Fatalf("run-3 before t0+15s: %+v, %v", out, err)
	}
	for _, i := range []int{0, 4, 7, 10, 12, 17} {
		gone(t, db, i)
	}
	if n, _ := db.Count(); n != 11 {
		t.Fatalf("Count = %d, want 11", n)
	}
	if _, err := db.DeleteMatching(storage.Selection{Filter: devhook.Filter{Text: "x"}}); devhook.ErrorCode(err) != devhook.EINVALID {
		t.Errorf("a text selection: %v, want refused", err)
	}

	// A damaged list row: kept by a selection, and said (Kept), so that
	// the command can say why it is still there; gone with all.
	if err := db.CorruptSummary(id(19)); err != nil {
		t.Fatal(err)
	}
	out, err = db.DeleteMatching(storage.Selection{ReceivedBefore: t0.Add(time.Hour)})
	if err != nil || slices.Contains(out.IDs, id(19)) || len(out.IDs) != 10 || !slices.Equal(out.Kept, ids(19)) {
		t.Fatalf("a selection with a damaged row: %+v, %v; want 10 deleted, %s kept", out, err, id(19))
	}
	if err := db.PutRetry(id(19), devhook.RetryState{State: devhook.RetryOwed, Since: t0}); err != nil {
		t.Fatal(err)
	}
	out, err = db.DeleteMatching(storage.Selection{})
	if err != nil || !slices.Equal(out.IDs, ids(19)) || out.Kept != nil {
		t.Fatalf("all: %+v, %v", out, err)
	}
	if n, _ := db.Count(); n != 0 {
		t.Errorf("Count after deleting all = %d", n)
	}
	for bucket, n := range db.BucketLens() {
		if n != 0 {
			t.Errorf("%s holds %d keys after deleting all", bucket, n)
		}
	}
	if ids, _, err := db.AllRetries(); err != nil || len(ids) != 0 {
		t.Errorf("retry states after deleting all: %v, %v", ids, err)
	}
	if d := db.Damage(); d.Any() {
		t.Errorf("damage after deleting all: %+v", d)
	}
	// The store goes on.
	recordEach(t, db, 30, 32)
	if n, _ := db.Count(); n != 2 {
		t.Errorf("Count after recording again = %d", n)
	}
}

// A read-only store deletes nothing.
func TestDelete_ReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db := MustOpenPath(t, path, storage.Config{})
	recordEach(t, db, 0, 2)
	db.Close()
	ro := MustOpenPath(t, path, storage.Config{ReadOnly: true})
	if _, err := ro.Delete([]string{id(0)}); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("Delete on a read-only store: %v", err)
	}
	if _, err := ro.DeleteMatching(storage.Selection{}); err == nil {
		t.Error("DeleteMatching on a read-only store succeeded")
	}
}

// Resolve takes a whole id or a prefix only one id has, as typed, without
// its dashes or in upper case; an ambiguous prefix names some of the ids
// it starts, with their times; a missing one names the data directory.
func TestResolve(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "deliveries.db")
	db := MustOpenPath(t, path, storage.Config{})
	// ids: 0195b1c8-0000-7000-8000-00000000000N; and one that differs early.
	recordEach(t, db, 1, 4)
	other := newDelivery(5)
	other.ID = "0195b1c9-0000-7000-8000-000000000005"
	mustPut(t, db, other)
	release := db.HoldFlushes() // one in the journal alone
	mustPut(t, db, newDelivery(0x1234))
	release()

	for ref, want := range map[string]string{
		id(2):                                  id(2),
		"0195b1c9":                             other.ID,
		"0195B1C9-00":                          other.ID,
		"0195b1c90000":                         other.ID,
		"0195b1c8000070008000":                 "", // ambiguous
		"0195b1c8-0000-7000-8000-000000000003": id(3),
		"0195b1c8000070008000000000000002":     id(2),
		"0195b1c8-0000-7000-8000-000000001":    id(0x1234),
		"  " + id(1) + " ":                     id(1),
	} {
		got, err := db.Resolve(ref)
		if want == "" {
			if devhook.ErrorCode(err) != devhook.ECONFLICT {
				t.Errorf("Resolve(%q) = %q, %v; want ambiguous", ref, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}

	_, err := db.Resolve("0195b1c8")
	msg := fmt.Sprint(err)
	if devhook.ErrorCode(err) != devhook.ECONFLICT || !strings.Contains(msg, `"0195b1c8" starts the ids of 4 deliveries`) ||
		!strings.Contains(msg, id(1)+"  "+newDelivery(1).ReceivedAt.Local().Format(time.DateTime)+"  POST /hook") ||
		!strings.Contains(msg, id(0x1234)) || !strings.Contains(msg, "give more of the id") {
		t.Errorf("an ambiguous prefix: %v", err)
	}
	_, err = db.Resolve("0195b1c7")
	if devhook.ErrorCode(err) != devhook.ENOTFOUND || !strings.Contains(err.Error(), `no delivery with id or prefix "0195b1c7" in `+filepath.Dir(path)) {
		t.Errorf("a missing prefix: %v", err)
	}
	if _, err := db.Resolve(" "); devhook.ErrorCode(err) != devhook.EINVALID {
		t.Errorf("an empty id: %v", err)
	}
}
