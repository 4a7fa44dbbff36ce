package devhook_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// parseEventRef is ParseEvent's specification, written with encoding/json.
func parseEventRef(body []byte) devhook.Event {
	if len(body) == 0 || body[0] != '{' || !json.Valid(body) {
		return devhook.Event{}
	}
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return devhook.Event{}
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	ev := devhook.Event{Type: str(m, "event_type")}
	if data, ok := m["data"].(map[string]any); ok {
		ev.RunID, ev.Status, ev.StatusV2 = str(data, "run_id"), str(data, "status"), str(data, "status_v2")
	}
	return ev
}

var parseEventCases = []string{
	`{"event_type":"run.status","data":{"run_id":"r1","status":"running","status_v2":"queued"}}`,
	`{"event_type":"run.status","id":"evt_1","created_at":"2026-11-22T10:00:00Z","data":{"application_id":"a","run_id":"r2","status_v2":"succeeded","status":"succeeded","result":{"x":[1,2.5,-3e10,true,false,null,{"y":"z"}]}}}`,
	`{ "data" : { "run_id" : "r3" } , "event_type" : "run.status" }` + "\n\t ",
	`{"event\u005ftype":"esc\"aped\u00e9\n","data":{"run_\u0069d":"\ud83d\ude00"}}`,
	`{"event_type":"a","event_type":"b"}`,
	`{"event_type":"a","event_type":5}`,
	`{"data":{"run_id":"r1"},"data":{"status":"s"}}`,
	`{"data":{"run_id":"r1"},"data":7}`,
	`{"data":[{"run_id":"r1"}]}`,
	`{"EVENT_TYPE":"upper","Data":{"run_id":"r"}}`,
	`{"event_type":"bad utf8 ` + "\xff\xfe" + `"}`,
	`{"event_type":"lone \ud800 surrogate"}`,
	`{"event_type":null,"data":null}`,
	`{"event_type":"x","data":{"run_id":{"nested":["a",{"b":[]}]},"status":[1]}}`,
	`{}`,
	`{"a":0,"b":-0.5e+3,"c":1E9,"d":0.0}`,
	// invalid
	``, ` {"event_type":"x"}`, `[1,2]`, `"x"`, `{"event_type":"x"`, `{"event_type":"x"}}`,
	`{"event_type":"x"} x`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":.5}`, `{"a":1e}`, `{"a":+1}`,
	`{"a":"\x"}`, `{"a":"\u12G4"}`, "{\"a\":\"tab\tinside\"}", `{"a":tru}`, `{"a":nul}`, `{'a':1}`,
	`{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":1 /* c */}`, `{"a"}`, `{"a":}`,
	`{"event_type":"x","data":{"run_id":"r",}}`, "{\"event_type\":\"x\"}\x00",
}

func TestParseEvent_MatchesReference(t *testing.T) {
	for _, body := range parseEventCases {
		if got, want := devhook.ParseEvent([]byte(body)), parseEventRef([]byte(body)); got != want {
			t.Errorf("ParseEvent(%q) = %+v, want %+v", body, got, want)
		}
	}
	// A few that the reference could get wrong as well.
	for body, want := range map[string]devhook.Event{
		parseEventCases[3]: {Type: "esc\"aped\u00e9\n", RunID: "\U0001F600"},
		parseEventCases[6]: {Status: "s"},
		parseEventCases[9]: {},
	} {
		if got := devhook.ParseEvent([]byte(body)); got != want {
			t.Errorf("ParseEvent(%q) = %+v, want %+v", body, got, want)
		}
	}
}

// Long strings, which ParseEvent scans eight bytes at a time, with a byte
// that stops the scan at every offset.
func TestParseEvent_LongStrings(t *testing.T) {
	for _, special := range []string{`\"`, `\\`, `\n`, `\u00e9`, "\x01", "\x1f", "\x7f", "é", "\xff", "\U0001F600", ` `, `~`} {
		for off := range 20 {
			for _, tail := range []int{0, 1, 7, 8, 9} {
				v := strings.Repeat("a", off) + special + strings.Repeat("b", tail)
				for _, body := range []string{
					`{"event_type":"` + v + `","data":{"run_id":"` + v + `","status":"s","status_v2":"` + strings.Repeat("q", off) + `"}}`,
					`{"padding":"` + v + `","event_type":"t","data":{"x":"` + v + `","run_id":"r"}}`,
					`{"event_type":"` + v, // cut
				} {
					if got, want := devhook.ParseEvent([]byte(body)), parseEventRef([]byte(body)); got != want {
						t.Errorf("ParseEvent(%q) = %+v, want %+v", body, got, want)
					}
				}
			}
		}
	}
}

// encoding/json accepts 10,000 levels of nesting and no more.
func TestParseEvent_Depth(t *testing.T) {
	for _, depth := range []int{9999, 10000, 10001} {
		body := `{"event_type":"deep","x":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
		if got, want := devhook.ParseEvent([]byte(body)), parseEventRef([]byte(body)); got != want {
			t.Errorf("depth %d: %+v, want %+v", depth, got, want)
		}
	}
}

func FuzzParseEvent(f *testing.F) {
	for _, body := range parseEventCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := devhook.ParseEvent(body), parseEventRef(body); got != want {
			t.Fatalf("ParseEvent(%q) = %+v, want %+v", body, got, want)
		}
	})
}

func BenchmarkParseEvent(b *testing.B) {
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if devhook.ParseEvent(body).RunID == "" {
			b.Fatal("no run id")
		}
	}
}

// BenchmarkParseEventRef is encoding/json with ParseEvent's behaviour:
// the reference the differential tests hold ParseEvent to.
func BenchmarkParseEventRef(b *testing.B) {
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if parseEventRef(body).RunID == "" {
			b.Fatal("no run id")
		}
	}
}

// BenchmarkParseEventJSON is the cheapest use of encoding/json, into a
// struct: not the same behaviour (keys match case-insensitively), and
// still several times ParseEvent's cost.
func BenchmarkParseEventJSON(b *testing.B) {
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var p struct {
			EventType string `json:"event_type"`
			Data      struct {
				RunID    string `json:"run_id"`
				Status   string `json:"status"`
				StatusV2 string `json:"status_v2"`
			} `json:"data"`
		}
		if json.Unmarshal(body, &p) != nil || p.Data.RunID == "" {
			b.Fatal("no run id")
		}
	}
}

// benchBody is a run.status delivery of about 1.5 KB.
func benchBody() []byte {
	rs := devhook.NewRunStatus("run-0123456789", "app-42", "succeeded", time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	b, err := json.Marshal(rs)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	m["padding"] = strings.Repeat("x", max(0, 1500-len(b)))
	b, _ = json.Marshal(m)
	return b
}
