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
	db, err := Open(path, Config{MaxDeliveries: -1, MaxAge: -1})
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
