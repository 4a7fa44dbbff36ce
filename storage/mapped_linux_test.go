package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// mappedKiB returns how much of the file at path is resident in this
// process's mappings, from /proc/self/smaps.
func mappedKiB(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	kib, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			in = len(fields) >= 6 && fields[5] == path
		case in && len(fields) >= 2 && fields[0] == "Rss:":
			n, _ := strconv.Atoi(fields[1])
			kib += n
		}
	}
	return kib
}

func TestReleaseMapped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := Open(path, Config{MaxDeliveries: -1, MaxAge: -1, bodyFileMin: -1}) // bbolt's own pages
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 3000
	body := bytes.Repeat([]byte("x"), 4000)
	for i := range n {
		d := &devhook.Delivery{
			ID: fmt.Sprintf("0195b1c8-0000-7000-8000-%012x", i), ReceivedAt: time.Now(),
			Method: "POST", Path: "/", Body: append(fmt.Appendf(nil, "%06d", i), body...),
		}
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.settle(); err != nil {
		t.Fatal(err)
	}
	// A body search reads every page of the file through the mapping.
	if _, err := db.List(devhook.Filter{Text: "not there", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	before := mappedKiB(t, path)
	db.releaseMapped()
	after := mappedKiB(t, path)
	t.Logf("resident pages of the file: %d KiB, then %d KiB", before, after)
	if before < n*4 || after > before/10 {
		t.Fatalf("resident pages of the file: %d KiB before release, %d KiB after; want ≥ %d, then a tenth at most", before, after, n*4)
	}
	// The pages come back from the page cache, intact.
	got, err := db.Delivery(fmt.Sprintf("0195b1c8-0000-7000-8000-%012x", n/2))
	if err != nil || !bytes.Equal(got.Body, append(fmt.Appendf(nil, "%06d", n/2), body...)) {
		t.Fatalf("after release: %v, body intact: %v", err, err == nil && bytes.Equal(got.Body, append(fmt.Appendf(nil, "%06d", n/2), body...)))
	}
}

// Opening a large store reads little of it: no page walk at open (as
// bbolt does to rebuild an unsynced freelist), so the agent does not start
// with the whole file in its RSS.
func TestOpen_ReadsLittle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	db, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	body := bytes.Repeat([]byte("x"), 4000)
	for i := range n {
		d := &devhook.Delivery{
			ID: fmt.Sprintf("0195b1c8-0000-7000-8000-%012x", i), ReceivedAt: time.Now(),
			Method: "POST", Path: "/", Body: body,
		}
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if kib := mappedKiB(t, path); kib > int(fi.Size()>>10)/10 {
		t.Fatalf("after Open, %d KiB of the %d KiB file are mapped in; want a tenth at most", kib, fi.Size()>>10)
	}
}

// bbolt's mapped pages are given back on a cadence, not after every flush
// (each page given back that the next transaction reads again is a page
// fault): once releaseBytes of records were applied since the last time,
// or at the first flush releaseEvery after it.
func TestReleaseMapped_OnACadence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devhook.db")
	now := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	db, err := Open(path, Config{MaxDeliveries: -1, MaxAge: -1, Now: func() time.Time { return now }, bodyFileMin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	body := bytes.Repeat([]byte("x"), 4000)
	next := 0
	// put records n deliveries and applies them in one flush: the
	// background flusher waits on flushMu meanwhile, and finds nothing.
	put := func(n int) {
		t.Helper()
		db.journal.flushMu.Lock()
		defer db.journal.flushMu.Unlock()
		for range n {
			d := &devhook.Delivery{
				ID: fmt.Sprintf("0195b1c8-0000-7000-8000-%012x", next), ReceivedAt: now,
				Method: "POST", Path: "/", Body: append(fmt.Appendf(nil, "%06d", next), body...),
			}
			next++
			if _, err := db.PutDelivery(d); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.flushLocked(); err != nil {
			t.Fatal(err)
		}
	}
	touch := func() int {
		t.Helper()
		// A body search reads every page of the file through the mapping.
		if _, err := db.List(devhook.Filter{Text: "not there", Limit: 1}); err != nil {
			t.Fatal(err)
		}
		return mappedKiB(t, path)
	}
	put(500)
	before := touch()
	if before < 500*4 {
		t.Fatalf("%d KiB of the file resident after reading all of it, want at least %d", before, 500*4)
	}
	put(10)
	if after := mappedKiB(t, path); after < before*9/10 {
		t.Errorf("a flush gave back the mapped pages: %d KiB resident, %d before; want them kept until the cadence says", after, before)
	}
	now = now.Add(releaseEvery)
	put(1)
	if after := mappedKiB(t, path); after > before/10 {
		t.Errorf("%d KiB resident after a flush %v after the last release, %d before; want a tenth at most", after, releaseEvery, before)
	}
	before = touch()
	// Within the same second. Kept, the pages would be those read before
	// and the new ones; given back after the commit, what the flush
	// touched after it (a few pages) is left.
	put(releaseBytes/len(body) + 100)
	if after := mappedKiB(t, path); after > before/4 {
		t.Errorf("%d KiB resident after %d MiB applied, %d before; want a quarter at most", after, releaseBytes>>20, before)
	}
}
