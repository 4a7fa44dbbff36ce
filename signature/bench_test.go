package signature_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// benchBody is a 1.5 KB run.status payload.
func benchBody(b *testing.B) []byte {
	b.Helper()
	body, err := json.Marshal(devhook.NewRunStatus("run-0195b1c8", "app-bench", "running", time.Now()))
	if err != nil {
		b.Fatal(err)
	}
	return append(body[:len(body)-1], `,"padding":"`+strings.Repeat("x", 1500-len(body)-len(`,"padding":""`))+`"}`...)
}

const benchSecret = "whsec_bench_0123456789abcdef"

func BenchmarkVerify(b *testing.B) {
	body := benchBody(b)
	now := time.Now()
	header := signature.Sign(benchSecret, now, body)
	v := signature.Verifier{Now: func() time.Time { return now }}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if got := v.Verify(benchSecret, header, body); !got.OK() {
			b.Fatalf("verdict %s: %s", got.Result, got.Reason)
		}
	}
}

// BenchmarkVerifyMismatch is the failing path, which also builds a reason.
func BenchmarkVerifyMismatch(b *testing.B) {
	body := benchBody(b)
	now := time.Now()
	header := signature.Sign("whsec_other", now, body)
	v := signature.Verifier{Now: func() time.Time { return now }}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if got := v.Verify(benchSecret, header, body); got.OK() {
			b.Fatal("a wrong secret verified")
		}
	}
}

func BenchmarkSign(b *testing.B) {
	body := benchBody(b)
	now := time.Now()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		signature.Sign(benchSecret, now, body)
	}
}
