package storage_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// bodyKillChildEnv makes the test binary a process that records
// deliveries with bodies of 300 bytes to 8 KB, deletes some and prunes
// others, until it is killed: TestBodyFiles_KilledAnywhere.
const bodyKillChildEnv = "DEVHOOK_STORAGE_BODYKILL_CHILD"

// bodyKillConfig: retention removes body files while the child writes.
var bodyKillConfig = storage.Config{MaxDeliveries: 300, MaxAge: -1}

// bodyKillFileMax makes body files full at 64 KB: a new one every few
// batches, so that the kill also falls while one is started.
const bodyKillFileMax = 64 << 10

// killBody is the body of delivery i of TestBodyFiles_KilledAnywhere:
// 300 to 8300 bytes, which say i.
func killBody(i int) []byte {
	n := 300 + (i*7919)%8000
	return bytes.Repeat(fmt.Appendf(nil, "%d.", i), n)[:n]
}

func killDelivery(i int) *devhook.Delivery {
	d := newDelivery(i)
	d.Body = killBody(i)
	d.Event = devhook.ParseEvent(d.Body)
	return d
}

// bodyKillChild records deliveries from start on, printing "put i" once
// each is acknowledged and "del i" once its delete returned, until killed.
func bodyKillChild(env string) {
	path, startText, _ := strings.Cut(env, ",")
	start, _ := strconv.Atoi(startText)
	db, err := storage.Open(path, bodyKillConfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	db.SetBodyFileMax(bodyKillFileMax)
	// Readers at once: a read holds back the removal of body files and
	// the zeroing of deleted bodies, and reads race them.
	var newest atomic.Int64
	newest.Store(int64(start))
	for r := range 2 {
		go func() {
			for k := r; ; k++ {
				i := int(newest.Load()) - k%120
				d, err := db.Delivery(id(i))
				switch {
				case devhook.ErrorCode(err) == devhook.ENOTFOUND:
				case err != nil:
					fmt.Fprintf(os.Stderr, "reading delivery %d: %v\n", i, err)
					os.Exit(3)
				case !bytes.Equal(d.Body, killBody(i)):
					fmt.Fprintf(os.Stderr, "delivery %d read back %d bytes, want %d\n", i, len(d.Body), len(killBody(i)))
					os.Exit(3)
				}
			}
		}()
	}
	out := bufio.NewWriter(os.Stdout)
	for i := start; ; i++ {
		if _, err := db.PutDelivery(killDelivery(i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		newest.Store(int64(i))
		fmt.Fprintf(out, "put %d\n", i)
		if i%25 == 24 && i-start > 40 {
			// Bodies zeroed in files still in use.
			if _, err := db.Delete([]string{id(i - 40), id(i - 37)}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			fmt.Fprintf(out, "del %d\ndel %d\n", i-40, i-37)
		}
		if err := out.Flush(); err != nil {
			os.Exit(2)
		}
	}
}

// A process killed with SIGKILL anywhere while it records deliveries with
// large bodies, deletes some and retention removes body files, several
// times over on one store: after each kill, every delivery acknowledged
// and neither deleted nor past retention is there, and every delivery
// there reads back with its body, byte for byte.
func TestBodyFiles_KilledAnywhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	next := 0
	for round, kills := range []int{700, 230, 1500, 410, 90} {
		acked, deleted := runBodyKillChild(t, path, next, kills)
		last := next + acked - 1
		db := MustOpenPath(t, path, bodyKillConfig)
		list, err := db.List(devhook.Filter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, s := range list {
			have[s.ID] = true
			d, err := db.Delivery(s.ID)
			if err != nil {
				t.Fatalf("round %d: Delivery(%s): %v", round, s.ID, err)
			}
			i, _ := strconv.ParseInt(s.ID[len(s.ID)-12:], 16, 64)
			if want := killBody(int(i)); !bytes.Equal(d.Body, want) {
				t.Fatalf("round %d: delivery %d read back %d bytes (%.40q), want its %d (%.40q)", round, i, len(d.Body), d.Body, len(want), want)
			}
		}
		// Retention keeps the last 300 recorded: the last 200 acknowledged
		// are there unless deleted.
		var missing []int
		for i := max(next, last-200); i <= last; i++ {
			if !have[id(i)] && !deleted[i] {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("round %d: deliveries %v acknowledged (of %d to %d), not deleted, missing; count %d", round, missing, next, last, len(list))
		}
		if dmg := db.Damage(); dmg.Damaged > 0 || dmg.Newer > 0 {
			t.Fatalf("round %d: %+v", round, dmg)
		}
		t.Logf("round %d: %d to %d acknowledged, %d there after the kill, body files %v", round, next, last, len(list), bodyFiles(t, path))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		next = last + 2 // the one being put at the kill may be there
	}
	if names := bodyFiles(t, path); len(names) < 2 {
		t.Fatalf("body files at the end: %v; want several (the test would not rotate files)", names)
	}
}

// runBodyKillChild runs bodyKillChild on path from delivery start on and
// kills it once it acknowledged kills deliveries; it returns how many it
// acknowledged and which it deleted (or was deleting).
func runBodyKillChild(t *testing.T, path string, start, kills int) (acked int, deleted map[int]bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), bodyKillChildEnv+"="+path+","+strconv.Itoa(start))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deleted = map[int]bool{}
	last := start - 1
	read := func(line string) {
		verb, n, _ := strings.Cut(line, " ")
		i, _ := strconv.Atoi(n)
		switch verb {
		case "put":
			last = i
			if i%25 == 24 && i-start > 40 {
				// Its delete may be done at the kill.
				deleted[i-40], deleted[i-37] = true, true
			}
		case "del":
			deleted[i] = true
		}
	}
	sc := bufio.NewScanner(stdout)
	for last-start+1 < kills && sc.Scan() {
		read(sc.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // acknowledged before the kill too
		read(sc.Text())
	}
	// The put after the last may be done, its delete too: its line is
	// printed after the delete.
	if i := last + 1; i%25 == 24 && i-start > 40 {
		deleted[i-40], deleted[i-37] = true, true
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed; stderr: %s", err, stderr.Bytes())
	}
	if acked = last - start + 1; acked < kills {
		t.Fatalf("child acknowledged %d deliveries, want %d; stderr: %s", acked, kills, stderr.Bytes())
	}
	return acked, deleted
}
