package storage_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// benchBody is a realistic run.status body of about 1.5 KB.
var benchBody = func() []byte {
	b := fmt.Appendf(nil, `{"event_type":"run.status","api_version":"2024-03-04","data":{"run_id":"run-0195b1c8","status":"running","status_v2":"queued","created_at":"2026-03-04T10:00:00Z","duration":0,"input_size":1432,"output_size":0,"error":null,"application_id":"app-1","application_instance_id":"latest","application_version_id":"","notes":%q}}`,
		strings.Repeat("lorem ipsum dolor sit amet ", 44))
	return b
}()

func benchDelivery(i int, verdict string) *devhook.Delivery {
	return &devhook.Delivery{
		ID:         id(i),
		Channel:    "ch1",
		ReceivedAt: time.Now(),
		Method:     http.MethodPost,
		Path:       "/hook",
		Header: http.Header{
			"Content-Type":          {"application/json"},
			"User-Agent":            {"service-webhooks/1.0"},
			"Content-Length":        {"1500"},
			devhook.SignatureHeader: {"t=1741082400000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"},
			"X-Forwarded-For":       {"203.0.113.9"},
		},
		Body:    benchBody,
		Verdict: devhook.Verdict{Result: verdict, Status: 200, Text: "ok"},
		Event:   devhook.Event{Type: "run.status", RunID: fmt.Sprintf("run-%d", i/3), StatusV2: "queued", Status: "running"},
	}
}

// benchDeliveries returns n bench deliveries, numbered from first, with
// signatures that verify.
func benchDeliveries(first, n int) []*devhook.Delivery {
	ds := make([]*devhook.Delivery, n)
	for i := range ds {
		ds[i] = benchDelivery(first+i, devhook.VerdictOK)
	}
	return ds
}

// storeBench stores bench deliveries 0 to n-1 in db, 10,000 a
// transaction.
func storeBench(b *testing.B, db *storage.DB, n int) {
	const chunk = 10_000
	for from := 0; from < n; from += chunk {
		if err := db.PutDeliveriesTx(benchDeliveries(from, min(chunk, n-from))); err != nil {
			b.Fatal(err)
		}
	}
}

// recordTimed records each of ds, put then attempt, and flushes the
// journal, on the clock (onTheClock).
func recordTimed(b *testing.B, db *storage.DB, ds []*devhook.Delivery,
	put func(*storage.DB, *devhook.Delivery) (bool, error),
	attempt func(*storage.DB, string, devhook.Attempt) (devhook.Attempt, error)) {
	a := benchAttempt()
	onTheClock(b, db, func() {
		for _, d := range ds {
			if _, err := put(db, d); err != nil {
				b.Fatal(err)
			}
			if _, err := attempt(db, d.ID, a); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// onTheClock times record, which records b.N bench deliveries in db, and
// the flush of the journal after it; it reports the process's CPU time a
// delivery (cpu-ns/op) and its system calls.
func onTheClock(b *testing.B, db *storage.DB, record func()) {
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	cpu, counts := cpuTime(b), countOS(b)
	b.ResetTimer()
	record()
	if err := db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
	counts.report(b)
}

func BenchmarkPutDelivery(b *testing.B) {
	db := MustOpenDB(b, storage.Config{MaxDeliveries: -1})
	ds := make([]*devhook.Delivery, b.N)
	for i := range ds {
		ds[i] = benchDelivery(i, devhook.VerdictOK)
	}
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if _, err := db.PutDelivery(ds[i]); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(start)
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// The alternatives to the journal, measured for the decision in
// journal.go: a bbolt commit per delivery, in today's layout (five
// buckets and a counter) and in the leanest one (one bucket, one value:
// the delivery with its body).
func BenchmarkPutDeliveryDirect(b *testing.B) {
	b.Run("layout=today", func(b *testing.B) {
		db := MustOpenDB(b, storage.Config{MaxDeliveries: -1})
		b.SetBytes(int64(len(benchBody)))
		b.ReportAllocs()
		lat := make([]time.Duration, b.N)
		for i := range b.N {
			d := benchDelivery(i, devhook.VerdictOK)
			start := time.Now()
			if err := db.PutDeliveriesTx([]*devhook.Delivery{d}); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(start)
		}
		reportPercentiles(b, lat)
	})
	b.Run("layout=one-bucket", func(b *testing.B) {
		bdb, err := bolt.Open(filepath.Join(b.TempDir(), "lean.db"), 0o600, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType})
		if err != nil {
			b.Fatal(err)
		}
		defer bdb.Close()
		name := []byte("deliveries")
		rec := storage.EncodeRecords(benchDelivery(0, devhook.VerdictOK), devhook.Attempt{})
		v := append(append(append([]byte{}, rec[0]...), rec[2]...), benchBody...)
		b.SetBytes(int64(len(benchBody)))
		b.ReportAllocs()
		lat := make([]time.Duration, b.N)
		for i := range b.N {
			start := time.Now()
			err := bdb.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists(name)
				if err != nil {
					return err
				}
				bk.FillPercent = 0.95
				return bk.Put([]byte(id(i)), v)
			})
			if err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(start)
		}
		reportPercentiles(b, lat)
	})
}

// reportPercentiles adds the median and 99th percentile of lat to the
// benchmark's output.
func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func BenchmarkPutDeliveryParallel(b *testing.B) {
	db := MustOpenDB(b, storage.Config{MaxDeliveries: -1})
	var next atomic.Int64
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	b.SetParallelism(16) // with GOMAXPROCS 2: 32 writers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d := benchDelivery(int(next.Add(1)), devhook.VerdictOK)
			if _, err := db.PutDelivery(d); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkAddAttempt(b *testing.B) {
	db := MustOpenDB(b, storage.Config{MaxDeliveries: -1})
	const n = 1000
	ds := make([]*devhook.Delivery, n)
	for i := range ds {
		ds[i] = benchDelivery(i, devhook.VerdictOK)
	}
	if err := db.PutDeliveriesTx(ds); err != nil {
		b.Fatal(err)
	}
	a := devhook.Attempt{
		Kind: devhook.AttemptForward, Target: "http://127.0.0.1:8080/hook", StartedAt: time.Now(),
		Duration: devhook.Duration(300 * time.Microsecond), Status: 200,
		Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("ok"),
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := db.AddAttempt(id(i%n), a); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkList100k(b *testing.B) {
	db := MustOpenDB(b, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	const n, chunk = 100_000, 10_000
	start := time.Now()
	for from := 0; from < n; from += chunk {
		ds := make([]*devhook.Delivery, chunk)
		for i := range ds {
			// One delivery in 100 has a bad signature.
			v := devhook.VerdictOK
			if (from+i)%100 == 0 {
				v = devhook.VerdictInvalidSignature
			}
			ds[i] = benchDelivery(from+i, v)
		}
		if err := db.PutDeliveriesTx(ds); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("built %d deliveries in %v", n, time.Since(start))
	for _, c := range []struct {
		name string
		f    devhook.Filter
	}{
		{"first page", devhook.Filter{Limit: 50}},
		{"verdict filter", devhook.Filter{Limit: 50, Verdict: devhook.VerdictInvalidSignature}},
		{"verdict filter, no match", devhook.Filter{Limit: 50, Verdict: devhook.VerdictNoSecret}},
		{"deep page", devhook.Filter{Limit: 50, Before: id(n / 2)}},
		{"run filter", devhook.Filter{Limit: 50, RunID: "run-1000"}},
		{"text filter, one page", devhook.Filter{Limit: 50, Text: "LOREM"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := db.List(c.f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchAttempt is a forward as the agent records it: a Go receiver's 200
// with the three headers net/http answers with and a short body.
func benchAttempt() devhook.Attempt {
	return devhook.Attempt{
		Kind: devhook.AttemptForward, Target: "http://127.0.0.1:8080/hook", StartedAt: time.Now(),
		Duration: devhook.Duration(300 * time.Microsecond), Status: 200,
		Header: http.Header{
			"Content-Type":   {"text/plain; charset=utf-8"},
			"Content-Length": {"2"},
			"Date":           {"Wed, 04 Mar 2026 10:00:00 GMT"},
		},
		Body: []byte("ok"),
	}
}

// cpuTime is the CPU time this process has used, every goroutine's: the
// background flush's included.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// osCounts are what the kernel counted of this process: page faults
// served from memory (a mapped page given back and touched again), and
// write system calls (write, pwrite…; Linux only, else 0).
type osCounts struct{ faults, writes int64 }

func countOS(tb testing.TB) osCounts {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	c := osCounts{faults: int64(ru.Minflt)}
	if b, err := os.ReadFile("/proc/self/io"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "syscw: "); ok {
				fmt.Sscan(v, &c.writes)
			}
		}
	}
	return c
}

// report adds to b's output the faults and write calls per op since
// start.
func (start osCounts) report(b *testing.B) {
	end := countOS(b)
	b.ReportMetric(float64(end.faults-start.faults)/float64(b.N), "faults/op")
	b.ReportMetric(float64(end.writes-start.writes)/float64(b.N), "writes/op")
}

// BenchmarkRecord is what recording one delivery costs the agent:
// PutDelivery before forwarding, AddAttempt after the receiver answered,
// and the share of the flush that applies both to bbolt (the journal is
// flushed before the clock stops). cpu-ns/op is the process's CPU time per
// delivery, every goroutine's: the flusher's and the GC's included.
func BenchmarkRecord(b *testing.B) {
	run := func(b *testing.B, parallel bool) {
		db := MustOpenDB(b, storage.Config{MaxDeliveries: -1, MaxAge: -1})
		ds := benchDeliveries(0, b.N)
		if !parallel {
			recordTimed(b, db, ds, (*storage.DB).PutDelivery, (*storage.DB).AddAttempt)
			return
		}
		a := benchAttempt()
		record := func(d *devhook.Delivery) error {
			if _, err := db.PutDelivery(d); err != nil {
				return err
			}
			_, err := db.AddAttempt(d.ID, a)
			return err
		}
		onTheClock(b, db, func() {
			var next atomic.Int64
			b.SetParallelism(16) // with GOMAXPROCS 2: 32 writers, as the profile
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := record(ds[next.Add(1)-1]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("serial", func(b *testing.B) { run(b, false) })
	b.Run("parallel", func(b *testing.B) { run(b, true) })
}

// BenchmarkRecordDelivery is what the journal saves per delivery: the
// agent's PutDelivery and AddAttempt through the journal (its flush, which
// applies both to bbolt, included: the journal is flushed before the
// clock stops), and the same two calls as a bbolt commit each
// (PutDeliveryDirect and AddAttemptDirect, which TestJournal_MatchesDirectCommits
// holds to the same stored result). cpu-ns/op is the process's CPU time
// per delivery, every goroutine's: the flusher's and the GC's included.
func BenchmarkRecordDelivery(b *testing.B) {
	for _, c := range []struct {
		name    string
		put     func(*storage.DB, *devhook.Delivery) (bool, error)
		attempt func(*storage.DB, string, devhook.Attempt) (devhook.Attempt, error)
	}{
		{"journal", (*storage.DB).PutDelivery, (*storage.DB).AddAttempt},
		{"bbolt-direct", (*storage.DB).PutDeliveryDirect, (*storage.DB).AddAttemptDirect},
	} {
		b.Run(c.name, func(b *testing.B) {
			db := MustOpenDB(b, storage.Config{MaxDeliveries: -1, MaxAge: -1})
			recordTimed(b, db, benchDeliveries(0, b.N), c.put, c.attempt)
		})
	}
}

// BenchmarkRecordAt100k is BenchmarkRecordDelivery's journal case on a
// store that holds 100,000 deliveries already, as the agent's does once
// retention keeps it at its size (the default, removing the oldest as
// new ones come): bbolt's tree is deep, its file large and no longer
// growing, so what a flush costs beyond its records (pages given back and
// read again: faults/op) shows, and retention's share.
func BenchmarkRecordAt100k(b *testing.B) {
	db := MustOpenDB(b, storage.Config{MaxDeliveries: 100_000, MaxAge: -1})
	const n = 100_000
	storeBench(b, db, n)
	next := n
	b.Run("journal", func(b *testing.B) {
		ds := benchDeliveries(next, b.N)
		next += b.N
		recordTimed(b, db, ds, (*storage.DB).PutDelivery, (*storage.DB).AddAttempt)
	})
}

// Recording a delivery, PutDelivery then AddAttempt, allocates its two
// journal records and nothing else (flushes held: the flush's allocations
// are bbolt's, and BenchmarkRecord counts them). It allocated 25 times
// before the records were encoded in place.
func TestRecord_Allocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	const want = 2
	db := MustOpenDB(t, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	const runs = 100
	ds := benchDeliveries(0, runs+1)
	a := benchAttempt()
	release := db.HoldFlushes()
	defer release()
	n := 0
	got := testing.AllocsPerRun(runs, func() {
		d := ds[n]
		n++
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
		if _, err := db.AddAttempt(d.ID, a); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%v allocations per PutDelivery and AddAttempt", got)
	if got > want+1 {
		t.Errorf("%v allocations per PutDelivery and AddAttempt, want at most %d", got, want+1)
	}
}

// Recording deliveries into a store that grows from nothing, the flushes
// that apply them to bbolt included, allocates about 21 times a delivery:
// the two records, and bbolt's. bbolt maps its file larger each time the
// file outgrows its mapping, and a commit that does copies every key and
// value of the nodes it changed: 48 to 76 allocations a delivery here,
// depending on how many records the remapping commits held, before the
// file was mapped 64 MiB at first (storage.go, initialMmap).
func TestRecordAndFlush_Allocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	const want = 26
	const n = 4000
	db := MustOpenDB(t, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	ds := benchDeliveries(0, n)
	a := benchAttempt()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for _, d := range ds {
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
		if _, err := db.AddAttempt(d.ID, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	got := float64(m1.Mallocs-m0.Mallocs) / n
	t.Logf("%.1f allocations a delivery, recorded and applied", got)
	if got > want {
		t.Errorf("%.1f allocations a delivery, recorded and applied to bbolt; want at most %d", got, want)
	}
}

// BenchmarkOpen100k measures Open of a store of 100,000 deliveries, read
// only (as deliveries list opens it): most of it is the check of every
// page of the tree that Open makes before bbolt reads one (damage.go).
func BenchmarkOpen100k(b *testing.B) {
	path := filepath.Join(b.TempDir(), "devhook.db")
	db := MustOpenPath(b, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	const n = 100_000
	storeBench(b, db, n)
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d deliveries, %d MB", n, fi.Size()>>20)
	// read-only is how deliveries list opens it; writable, how listen
	// does at its start (retention, and the scan of the records that
	// reports the damaged ones: damaged_records.go).
	for _, readOnly := range []bool{true, false} {
		name := "writable"
		if readOnly {
			name = "read-only"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				db, err := storage.Open(path, storage.Config{ReadOnly: readOnly, MaxDeliveries: -1, MaxAge: -1})
				if err != nil {
					b.Fatal(err)
				}
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
