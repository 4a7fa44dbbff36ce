package scenario_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/scenario"
)

// The file for a run's three deliveries: what is kept and what is not,
// against a golden file that shows the format as a reader sees it.
func TestBuild_Golden(t *testing.T) {
	ds := runDeliveries(t, "run-42")
	// A body that is not UTF-8 goes in base64, and its answer too.
	bin := &devhook.Delivery{ID: "0190z", ReceivedAt: epoch.Add(4 * time.Second), Method: "PUT", Path: "/raw",
		Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: []byte("caf\xe9 \x00\xff"),
		Attempts: []devhook.Attempt{{Kind: devhook.AttemptForward, Status: 400, Body: []byte("bad \xff")}}}
	// One the receiver never answered has no recorded answer.
	lost := &devhook.Delivery{ID: "0190y", ReceivedAt: epoch.Add(5 * time.Second), Method: "POST", Path: "/",
		Header: http.Header{}, Body: []byte(`<a href="x">&</a>`),
		Attempts: []devhook.Attempt{{Kind: devhook.AttemptForward, Error: "connection refused"}}}
	s, warnings, err := scenario.Build(append(ds, bin, lost), scenario.Options{})
	if err != nil || len(warnings) != 0 {
		t.Fatal(err, warnings)
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "run.json", b)
	if !bytes.HasPrefix(b, []byte("{\n  \"devhook_scenario\": 1,\n")) {
		t.Errorf("the file does not start with the version:\n%s", b)
	}
	for _, absent := range []string{"Service-Signature", "t=1,v1=00", "Content-Length", "Invalid Time Value"} {
		if bytes.Contains(b, []byte(absent)) {
			t.Errorf("the file keeps %q", absent)
		}
	}

	got, err := scenario.Parse("run.json", b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Deliveries) != 5 {
		t.Fatalf("%d deliveries read back", len(got.Deliveries))
	}
	for i, d := range append(ds, bin, lost) {
		e := got.Deliveries[i]
		if !bytes.Equal(e.Body, d.Body) {
			t.Errorf("delivery %d: body %q read back, want %q", i+1, e.Body, d.Body)
		}
		if e.Method != d.Method || e.Path != d.Path || e.Query != d.RawQuery {
			t.Errorf("delivery %d: %s %s?%s read back", i+1, e.Method, e.Path, e.Query)
		}
	}
	if e := got.Deliveries[0]; !reflect.DeepEqual(e.Header["X-Trace"], []string{"b", "a"}) || e.OffsetMS != 0 || got.Deliveries[1].OffsetMS != 1250 || got.Deliveries[2].OffsetMS != 2500 {
		t.Errorf("repeated header or offsets: %v %d %d %d", e.Header, e.OffsetMS, got.Deliveries[1].OffsetMS, got.Deliveries[2].OffsetMS)
	}
	if r := got.Deliveries[1].Recorded; r == nil || r.Status != 200 {
		t.Errorf("delivery 2's recorded answer is %+v, want the forward's 200 (not the replay's 401)", r)
	}
	if r := got.Deliveries[3].Recorded; r == nil || r.Status != 400 || string(r.Body) != "bad \xff" {
		t.Errorf("a binary answer read back as %+v", r)
	}
	if got.Deliveries[4].Recorded != nil {
		t.Errorf("a delivery never answered has a recorded answer: %+v", got.Deliveries[4].Recorded)
	}
	again, err := got.Marshal()
	if err != nil || !bytes.Equal(again, b) {
		t.Errorf("read and written again, the file changes (%v):\n%s", err, again)
	}
}

// The same deliveries give the same bytes, whatever the order they come
// in and however their header maps were filled.
func TestBuild_Deterministic(t *testing.T) {
	var first []byte
	for i := range 20 {
		ds := runDeliveries(t, "run-42")
		r := rand.New(rand.NewPCG(uint64(i), 7))
		r.Shuffle(len(ds), func(a, b int) { ds[a], ds[b] = ds[b], ds[a] })
		for _, d := range ds {
			h := http.Header{}
			keys := make([]string, 0, len(d.Header))
			for k := range d.Header {
				keys = append(keys, k)
			}
			r.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
			for _, k := range keys {
				h[k] = d.Header[k]
			}
			d.Header = h
		}
		ids := make([]string, len(ds))
		byID := map[string]*devhook.Delivery{}
		for j, d := range ds {
			ids[j], byID[d.ID] = d.ID, d
		}
		b, warnings, err := scenario.Export(ids, func(id string) (*devhook.Delivery, error) { return byID[id], nil },
			scenario.Options{Redact: []string{"$.data.run_id", "$.data.application_id"}})
		if err != nil || len(warnings) != 0 {
			t.Fatal(err, warnings)
		}
		if first == nil {
			first = b
		} else if !bytes.Equal(b, first) {
			t.Fatalf("round %d wrote other bytes:\n%s\nfirst:\n%s", i, b, first)
		}
	}
}

func TestExport_UnknownID(t *testing.T) {
	_, _, err := scenario.Export([]string{"nope"}, func(id string) (*devhook.Delivery, error) {
		return nil, devhook.Errorf(devhook.ENOTFOUND, "no delivery %s", id)
	}, scenario.Options{})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err %v", err)
	}
}

// Files that cannot be played are refused with the file and the delivery
// named, before anything is sent.
func TestParse_Refuses(t *testing.T) {
	s, _, err := scenario.Build(runDeliveries(t, "run-1"), scenario.Options{})
	if err != nil {
		t.Fatal(err)
	}
	good, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) string {
		if !strings.Contains(string(good), old) {
			t.Fatalf("the file has no %q", old)
		}
		return strings.Replace(string(good), old, new, 1)
	}
	// The second delivery's body, to break it alone.
	second := `"body": "{\"event_type\":\"run.status\",\"api_version\":\"2024-03-04\",\"data\":{\"run_id\":\"run-1\",\"status\":\"running\",\"status_v2\":\"running\"`
	if strings.Count(string(good), second) != 1 {
		t.Fatalf("the fixture's second body is not found once:\n%s", good)
	}
	tests := []struct {
		name  string
		file  string
		entry int
		want  string
	}{
		{"another version", edit(`"devhook_scenario": 1`, `"devhook_scenario": 3`), 0, "version 3 of the scenario format; this devhook reads versions 1 to 2: a newer devhook"},
		{"version 0", edit(`"devhook_scenario": 1`, `"devhook_scenario": 0`), 0, "version 0 of the scenario format"},
		{"a signature in version 1", edit(second, `"signature": "invalid", `+second), 2, `"signature" is a field of version 2; the file says version 1`},
		{"an unknown signature", strings.Replace(edit(second, `"signature": "forged", `+second), `"devhook_scenario": 1`, `"devhook_scenario": 2`, 1), 2, `"signature" "forged" is unknown`},
		{"malformed without its header", strings.Replace(edit(second, `"signature": "malformed", `+second), `"devhook_scenario": 1`, `"devhook_scenario": 2`, 1), 2, "no service-signature to send as recorded"},
		{"a version that is no number", edit(`"devhook_scenario": 1`, `"devhook_scenario": "1"`), 0, "not a version number"},
		{"no version", edit(`"devhook_scenario": 1,`, ``), 0, `no "devhook_scenario" field`},
		{"truncated", string(good[:len(good)/2]), 0, "ends early (a truncated file?)"},
		{"not JSON", "devhook_scenario: 1\n", 0, "not valid JSON at byte 1"},
		{"empty", "  \n", 0, "the file is empty"},
		{"an array", "[1]", 0, "not a JSON object"},
		{"no deliveries", `{"devhook_scenario": 1, "deliveries": []}`, 0, "no deliveries"},
		{"unknown top-level field", edit(`"deliveries": [`, `"delivery": 1, "deliveries": [`), 0, `unknown field "delivery"`},
		{"unknown field in a delivery", edit(second, `"bdy": "", `+second), 2, `unknown field "bdy"`},
		{"base64 that is not", edit(second, `"body_encoding": "base64", `+second), 2, "body: \"body_encoding\" is base64 but the body is not standard padded base64"},
		{"an unknown encoding", edit(second, `"body_encoding": "latin1", `+second), 2, `"body_encoding" "latin1" is unknown`},
		{"text that is not UTF-8", edit(second, second[:20]+"\xff"+second[20:]), 2, "declared text (UTF-8) but holds bytes that are not UTF-8"},
		{"a lone surrogate", edit(second, second[:20]+`\ud800`+second[20:]), 2, `lone \ud800 escape`},
		{"a body that is no string", `{"devhook_scenario": 1, "deliveries": [{"offset_ms": 0, "method": "POST", "path": "/", "headers": {}, "body": 7}]}`, 1, "body: it is 7, not a JSON string"},
		{"no body", `{"devhook_scenario": 1, "deliveries": [{"offset_ms": 0, "method": "POST", "path": "/", "headers": {}}]}`, 1, `no "body"`},
		{"no headers", `{"devhook_scenario": 1, "deliveries": [{"offset_ms": 0, "method": "POST", "path": "/", "body": ""}]}`, 1, `no "headers"`},
		{"a negative offset", edit(`"offset_ms": 1250`, `"offset_ms": -5`), 2, `"offset_ms" is -5`},
		{"a bad header name", edit(`"X-Trace"`, `"X Trace"`), 1, `header name "X Trace"`},
		{"a header with a line break", edit(`"b",`, `"b\r\nEvil: 1",`), 1, "line break"},
		{"a bad path", edit(`"path": "/hook"`, `"path": "hook"`), 1, `"path" "hook" is not a request path`},
		{"a bad method", edit(`"method": "POST"`, `"method": "PO ST"`), 1, "not an HTTP method"},
		{"a bad recorded status", edit(`"status": 200`, `"status": 42`), 1, "recorded status 42"},
		// Said in the file's terms, never Go's type names.
		{"an offset that is a string", edit(`"offset_ms": 1250`, `"offset_ms": "1250"`), 2, `"offset_ms" is a string, not a whole number`},
		{"an about that is a number", edit(`"deliveries": [`, `"about": 5, "deliveries": [`), 0, `"about" is a number, not a string`},
		{"headers that are a list", edit(`"X-Trace"`, `"X-Trace": 1, "Y"`), 1, `is a number, not a list`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scenario.Parse("play.json", []byte(tt.file))
			var fe *scenario.FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want a *FormatError", err)
			}
			if fe.File != "play.json" || fe.Entry != tt.entry || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %q (delivery %d), want delivery %d and %q", err, fe.Entry, tt.entry, tt.want)
			}
			if strings.Contains(err.Error(), "Go struct") || strings.Contains(err.Error(), " json: ") {
				t.Errorf("the error speaks of Go, not of the file: %q", err)
			}
			if !strings.HasPrefix(err.Error(), "scenario play.json: ") {
				t.Errorf("the error does not name the file first: %q", err)
			}
			if tt.entry > 0 && !strings.Contains(err.Error(), "delivery "+string(rune('0'+tt.entry))+": ") {
				t.Errorf("the error does not name the delivery: %q", err)
			}
		})
	}
}

// A scenario file that is not JSON keeps the decoder's error in its
// chain: a caller can find where the file is broken (errors.As).
func TestParseKeepsTheDecodersError(t *testing.T) {
	_, err := scenario.Parse("broken.json", []byte(`{"devhook_scenario": 1, "deliveries": [}, "x": 2}`))
	var syn *json.SyntaxError
	var fe *scenario.FormatError
	if !errors.As(err, &fe) || !errors.As(err, &syn) || syn.Offset == 0 {
		t.Fatalf("err %v, want a *FormatError with a *json.SyntaxError in its chain", err)
	}
}
