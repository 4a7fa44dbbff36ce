package wire_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
	"github.com/devhook/devhook/signature"
)

// benchDelivery is a deliver frame's header and body as the relay sends
// them for a 1.5 KB signed run.status POST.
func benchDelivery(b *testing.B) (*wire.Header, []byte) {
	b.Helper()
	body, err := json.Marshal(devhook.NewRunStatus("run-0195b1c8", "app-bench", "running", time.Now()))
	if err != nil {
		b.Fatal(err)
	}
	body = append(body[:len(body)-1], `,"padding":"`+strings.Repeat("x", 1500-len(body)-len(`,"padding":""`))+`"}`...)
	now := time.Now().UTC()
	return &wire.Header{
		Type: wire.TypeDeliver, ID: "0195b1c8-7d2e-7c4a-9b1e-3f6a2d8c4e10", Method: http.MethodPost, Path: "/hook",
		Header: http.Header{
			"Accept-Encoding":       {"gzip"},
			"Content-Length":        {"1500"},
			"Content-Type":          {"application/json"},
			"User-Agent":            {"service-webhooks/1.0"},
			"X-Forwarded-For":       {"203.0.113.9"},
			devhook.SignatureHeader: {signature.Sign("whsec_bench", now, body)},
		},
		ReceivedAt: now, RemoteAddr: "203.0.113.9:51234",
	}, body
}

func BenchmarkAppendFrame(b *testing.B) {
	h, body := benchDelivery(b)
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = wire.AppendFrame(buf[:0], h, body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf)-len(body)), "overhead-bytes")
}

func BenchmarkDecodeFrame(b *testing.B) {
	h, body := benchDelivery(b)
	frame, err := wire.AppendFrame(nil, h, body)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		got, payload, err := wire.DecodeFrame(frame)
		if err != nil || got.ID != h.ID || len(payload) != len(body) {
			b.Fatalf("decode: %v", err)
		}
	}
}

// BenchmarkResponseFrame is the agent's answer and ack for one delivery:
// the other half of every round trip.
func BenchmarkResponseFrame(b *testing.B) {
	answer := []byte(`{"event_type":"run.status","received":true,"run_id":"run-0195b1c8","status_v2":"running"}` + "\n")
	h := &wire.Header{Type: wire.TypeResponse, ID: "0195b1c8-7d2e-7c4a-9b1e-3f6a2d8c4e10", Status: 200,
		Header: http.Header{"Content-Type": {"application/json"}, "Date": {time.Now().UTC().Format(http.TimeFormat)}, "Content-Length": {"92"}}}
	ack := &wire.Header{Type: wire.TypeAck, ID: h.ID}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = wire.AppendFrame(buf[:0], h, answer); err != nil {
			b.Fatal(err)
		}
		if _, _, err := wire.DecodeFrame(buf); err != nil {
			b.Fatal(err)
		}
		if buf, err = wire.AppendFrame(buf[:0], ack, nil); err != nil {
			b.Fatal(err)
		}
		if _, _, err := wire.DecodeFrame(buf); err != nil {
			b.Fatal(err)
		}
	}
}
