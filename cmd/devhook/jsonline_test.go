package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/devhook/devhook"
)

// The hand-written delivery line is byte for byte what encoding/json
// writes for the same struct.
func TestDeliveryLineMatchesEncodingJSON(t *testing.T) {
	st := 401
	zero := 0
	odd := []string{"", "plain", `quote " and \ backslash`, "<script>&amp;</script>", "tab\tnew\nline\r\x00\x1f\x7f",
		"é ü 日本", "bad \xff\xfe utf-8", "line\u2028sep\u2029", "\b\f", "/c/ch/hook?x=1&y=2"}
	lines := []deliveryLine{
		{Event: "delivery", ID: "0195-abc", Method: "POST", Path: "/hook", Verdict: "ok", Status: 200, Receiver: &st, Duration: 1.234567},
		{Event: "delivery", Verdict: "invalid_signature", Status: 502, Duration: 0},
		{Event: "delivery", Duration: 1e-7, Queued: true, Cut: true, Duplicate: true, Owed: true, Error: "x", Hint: "y",
			Copies: []copyLine{{Target: "http://a", Receiver: &st, Error: "e"}, {Target: "http://b"}, {Receiver: &zero}}},
		{Event: "delivery", Duration: 3e21},
		{Event: "delivery", Duration: -2.5},
		{Event: "delivery", Duration: 123456789.125},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		pick := func() string { return odd[r.IntN(len(odd))] }
		l := deliveryLine{Event: "delivery", ID: pick(), Method: pick(), Path: pick(), RunID: pick(), StatusV2: pick(),
			Verdict: pick(), Status: r.IntN(600), Duration: r.Float64() * 1000, Queued: r.IntN(2) == 0, Error: pick(), Hint: pick()}
		if r.IntN(2) == 0 {
			l.Receiver = &st
		}
		if r.IntN(3) == 0 {
			l.Copies = []copyLine{{Target: pick(), Error: pick()}}
		}
		if r.IntN(2) == 0 {
			l.Route = &devhook.Route{Index: r.IntN(20), Text: pick(), Target: pick()}
			l.Dropped = r.IntN(2) == 0
		}
		lines = append(lines, l)
	}
	for i, l := range lines {
		want, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		if got := l.appendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("line %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func BenchmarkDeliveryLine(b *testing.B) {
	st := 200
	l := deliveryLine{Event: "delivery", ID: "0195b1c8-7d2e-7a3c-9b1e-2f4a5c6d7e8f", Method: "POST", Path: "/hook",
		RunID: "run-0195b1c8", StatusV2: "running", Verdict: "ok", Status: 200, Receiver: &st, Duration: 0.412}
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			jsonLine(l)
		}
	})
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.appendJSON(make([]byte, 0, 256))
		}
	})
}
