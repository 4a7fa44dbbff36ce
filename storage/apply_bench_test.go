package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// applyBenchRecs returns the journal records of deliveries from, from+1, …
// (n records: each delivery and its attempt), as replay decodes them: a
// 1.5 KB body with the headers a signed sender sends, and a receiver's 200.
func applyBenchRecs(b *testing.B, from, n int, seq *uint64) []jrec {
	return applyBenchRecsOf(b, from, n, seq, applyBenchBody)
}

// applyBenchBody is the 1.5 KB run.status body of the load harness.
var applyBenchBody = []byte(`{"event_type":"run.status","data":{"run_id":"run-1","notes":"` + strings.Repeat("lorem ipsum dolor sit amet ", 54) + `"}}`)

// applyBenchRecsOf is applyBenchRecs with each delivery's body.
func applyBenchRecsOf(b *testing.B, from, n int, seq *uint64, body []byte) []jrec {
	recs := make([]jrec, 0, n)
	for i := from; len(recs) < n; i++ {
		d := &devhook.Delivery{
			ID: fmt.Sprintf("0195b1c8-%04x-7000-8000-%012x", i>>16, i), Channel: "ch1", ReceivedAt: time.Now(),
			Method: http.MethodPost, Path: "/hook",
			Header: http.Header{
				"Content-Type": {"application/json"}, "User-Agent": {"service-webhooks/1.0"}, "Content-Length": {"1500"},
				devhook.SignatureHeader: {"t=1741082400000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"},
				"X-Forwarded-For":       {"203.0.113.9"},
			},
			Body:    body,
			Verdict: devhook.Verdict{Result: devhook.VerdictOK, Status: 200, Text: "ok"},
			Event:   devhook.Event{Type: "run.status", RunID: fmt.Sprintf("run-%d", i/3), StatusV2: "queued", Status: "running"},
		}
		a := devhook.Attempt{Seq: 1, Kind: devhook.AttemptForward, Target: "http://127.0.0.1:8080/hook", StartedAt: time.Now(),
			Duration: devhook.Duration(300 * time.Microsecond), Status: 200,
			Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Content-Length": {"2"},
				"Date": {"Wed, 04 Mar 2026 10:00:00 GMT"}},
			Body: []byte("ok")}
		s := d.Summarize()
		put := encoder{make([]byte, recHeaderLen)}
		*seq++
		put.b = binary.BigEndian.AppendUint64(put.b, *seq)
		put.byte(recPut)
		put.str(d.ID)
		put.bytes(appendMeta(nil, d, crc32.Checksum(d.Body, crcTable())))
		put.bytes(appendSummary(nil, &s))
		put.str(d.Event.RunID)
		put.bytes(d.Body)
		att := encoder{make([]byte, recHeaderLen)}
		*seq++
		att.b = binary.BigEndian.AppendUint64(att.b, *seq)
		att.byte(recAttempt)
		att.str(d.ID)
		att.bytes(appendAttempt(nil, &a))
		for _, raw := range [][]byte{put.b, att.b} {
			frame(raw)
			r, err := decodeRecord(raw)
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, r)
		}
	}
	return recs
}

// BenchmarkApply is the bbolt side of the journal: one transaction that
// applies a batch of pending records (deliveries, each with its attempt),
// for several batch sizes. ns/record is what applying one record takes,
// cpu-ns/record the process's CPU time for it (the GC's included).
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{256, 512, 1024, 2048, 4096} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) { benchApply(b, n, applyBenchBody) })
	}
}

// BenchmarkApplyBodySize is BenchmarkApply's batch of 1,024 records with
// bodies of several sizes: what the bodies' share of applying is, that a
// store keeping them out of the B+tree would save.
func BenchmarkApplyBodySize(b *testing.B) {
	for _, size := range []int{0, 256, 1500, 8192} {
		body := bytes.Repeat([]byte("x"), size)
		if size == 1500 {
			body = applyBenchBody // its size
		}
		b.Run(fmt.Sprintf("body=%d", size), func(b *testing.B) { benchApply(b, 1024, body) })
	}
}

// benchApply applies batches of n records whose deliveries carry body.
func benchApply(b *testing.B, n int, body []byte) {
	db, err := Open(filepath.Join(b.TempDir(), "devhook.db"), Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var seq uint64
	var known []byte
	var cpu time.Duration
	next := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		recs := applyBenchRecsOf(b, next, n, &seq, body)
		next += n / 2
		runtime.GC() // the garbage of building recs is not apply's
		start := processCPU(b)
		b.StartTimer()
		if _, err := db.apply(recs, known); err != nil {
			b.Fatal(err)
		}
		known = bytes.Clone(maxPutID(recs)) // as flush keeps it
		b.StopTimer()
		cpu += processCPU(b) - start
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/record")
}

// processCPU is the CPU time the process has used, every thread's.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
