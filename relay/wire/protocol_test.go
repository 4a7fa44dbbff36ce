package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/devhook/devhook/relay/wire"
)

func TestFrameRoundTrip(t *testing.T) {
	body := []byte{0, 1, 2, 0xff, '{', '}'}
	h := &wire.Header{Type: wire.TypeDeliver, ID: "id-1", Method: "POST", Path: "/a%2Fb", Query: "x=1&x=2",
		Header: http.Header{"X-Multi": {"a", "b"}}, ReceivedAt: time.UnixMilli(1_800_000_000_123).UTC(), Queued: true}
	frame, err := wire.AppendFrame(nil, h, body)
	if err != nil {
		t.Fatal(err)
	}
	// The body travels raw, not base64.
	if !bytes.HasSuffix(frame, body) || len(frame) > len(body)+300 {
		t.Fatalf("frame of %d bytes for a %d-byte body", len(frame), len(body))
	}
	got, payload, err := wire.DecodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(payload, body) || got.ID != h.ID || got.Path != h.Path || got.Query != h.Query ||
		!slices.Equal(got.Header["X-Multi"], []string{"a", "b"}) || !got.ReceivedAt.Equal(h.ReceivedAt) || !got.Queued {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	lenPrefix := func(n uint32, rest string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, n), rest...)
	}
	frame := func(hdr ...byte) []byte { return lenPrefix(uint32(len(hdr)), string(hdr)) }
	cases := map[string][]byte{
		"empty":               nil,
		"short prefix":        {0, 0},
		"length past end":     lenPrefix(100, "\x01\x04\x01\x01x"),
		"huge length":         lenPrefix(1<<31, ""),
		"no type":             frame(1),
		"old JSON header":     lenPrefix(14, `{"type":"ack"}`),
		"other version":       frame(2, 4, 1, 1, 'x'),
		"deliver without id":  frame(1, 2),
		"ack without id":      frame(1, 4),
		"field without value": frame(1, 4, 1, 1, 'x', 99),
		"string past end":     frame(1, 4, 1, 10, 'x'),
		"bad length varint":   frame(1, 4, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
		"values past end":     frame(1, 2, 1, 1, 'x', 11, 1, 'k', 200),
		"empty header name":   frame(1, 2, 1, 1, 'x', 11, 0, 1, 1, 'v'),
	}
	for name, msg := range cases {
		t.Run(name, func(t *testing.T) {
			if _, _, err := wire.DecodeFrame(msg); !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestEndToEnd(t *testing.T) {
	h := http.Header{
		"Connection": {"keep-alive, X-Private"}, "X-Private": {"1"}, "Keep-Alive": {"5"},
		"Transfer-Encoding": {"chunked"}, "Upgrade": {"h2c"}, "Te": {"trailers"},
		"X-Keep": {"a", "b"}, "Content-Type": {"application/json"},
	}
	got := wire.EndToEnd(h)
	for _, k := range []string{"Connection", "X-Private", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Te"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s kept", k)
		}
	}
	if !slices.Equal(got["X-Keep"], []string{"a", "b"}) || got.Get("Content-Type") != "application/json" {
		t.Errorf("end-to-end headers lost: %v", got)
	}
	if _, ok := h["Connection"]; !ok {
		t.Error("EndToEnd changed its argument")
	}
}

func FuzzDecodeFrame(f *testing.F) {
	seed, _ := wire.AppendFrame(nil, &wire.Header{Type: wire.TypeResponse, ID: "x", Status: 200}, []byte("body"))
	f.Add(seed)
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, payload, err := wire.DecodeFrame(msg)
		if err != nil {
			return
		}
		if len(payload) > len(msg) {
			t.Fatalf("accepted %q as %+v", msg, h)
		}
		if h.Type == "" {
			return // a type this devhook does not know, to ignore
		}
		// What decodes re-encodes and decodes the same.
		again, err := wire.AppendFrame(nil, &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		h2, p2, err := wire.DecodeFrame(again)
		if err != nil || !reflect.DeepEqual(h2, h) || !bytes.Equal(p2, payload) {
			t.Fatalf("re-encoding changed the frame: %v\n%+v\n%+v", err, h, h2)
		}
	})
}
