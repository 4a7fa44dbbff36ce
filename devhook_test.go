package devhook_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

func TestParseEvent(t *testing.T) {
	tests := []struct {
		name string
		body string
		want devhook.Event
	}{
		{"run.status", `{"event_type":"run.status","data":{"run_id":"r1","status":"running","status_v2":"queued"}}`,
			devhook.Event{Type: "run.status", RunID: "r1", Status: "running", StatusV2: "queued"}},
		{"other json", `{"hello":"world"}`, devhook.Event{}},
		{"array", `[1,2]`, devhook.Event{}},
		{"not json", `run_id=r1`, devhook.Event{}},
		{"truncated", `{"event_type":"run.status","data":{"run_id":"r1"`, devhook.Event{}},
		{"empty", ``, devhook.Event{}},
		{"wrong types", `{"event_type":1,"data":{"run_id":2}}`, devhook.Event{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := devhook.ParseEvent([]byte(tt.body)); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewRunStatusHasEveryField(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 123, time.UTC)
	for _, tc := range []struct{ v2, legacy string }{{"queued", "running"}, {"running", "running"}, {"succeeded", "succeeded"}} {
		b, err := json.Marshal(devhook.NewRunStatus("run-1", "app-1", tc.v2, at))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			EventType  string         `json:"event_type"`
			APIVersion string         `json:"api_version"`
			Data       map[string]any `json:"data"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.EventType != "run.status" || m.APIVersion != "2024-03-04" {
			t.Fatalf("envelope %s", b)
		}
		for _, k := range []string{"run_id", "status", "status_v2", "created_at", "duration", "input_size", "output_size",
			"error", "application_id", "application_instance_id", "application_version_id"} {
			if _, ok := m.Data[k]; !ok {
				t.Errorf("%s: data has no %s", tc.v2, k)
			}
		}
		if m.Data["status"] != tc.legacy || m.Data["status_v2"] != tc.v2 || m.Data["created_at"] != "2026-11-22T10:00:00Z" || m.Data["error"] != nil {
			t.Errorf("%s: %s", tc.v2, b)
		}
		finished := tc.v2 == "succeeded"
		if (m.Data["duration"].(float64) > 0) != finished || (m.Data["output_size"].(float64) > 0) != finished {
			t.Errorf("%s: duration/output_size %v/%v", tc.v2, m.Data["duration"], m.Data["output_size"])
		}
	}
}

func TestDurationJSON(t *testing.T) {
	d := devhook.Duration(1234567 * time.Nanosecond)
	b, err := json.Marshal(d)
	if err != nil || string(b) != "1.235" {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var back devhook.Duration
	if err := json.Unmarshal([]byte("0.25"), &back); err != nil || time.Duration(back) != 250*time.Microsecond {
		t.Fatalf("unmarshal: %v %v", time.Duration(back), err)
	}
}

func TestSummarize(t *testing.T) {
	d := &devhook.Delivery{ID: "x", Method: "POST", Path: "/", Body: []byte("abc"), Verdict: devhook.Verdict{Result: devhook.VerdictOK}}
	if s := d.Summarize(); s.Status != 0 || s.Attempts != 0 || s.BodySize != 3 || s.Verdict != "ok" {
		t.Fatalf("no attempts: %+v", s)
	}
	d.Attempts = []devhook.Attempt{{Seq: 1, Status: 500}, {Seq: 2, Status: 200, Duration: devhook.Duration(time.Millisecond)}}
	if s := d.Summarize(); s.Status != 200 || s.Attempts != 2 || time.Duration(s.Duration) != time.Millisecond {
		t.Fatalf("last attempt not summarized: %+v", s)
	}
}

func TestErrorCode(t *testing.T) {
	if devhook.ErrorCode(nil) != "" {
		t.Fatal("nil has a code")
	}
	wrapped := fmt.Errorf("reading: %w", devhook.Errorf(devhook.ENOTFOUND, "no delivery %s", "x"))
	if devhook.ErrorCode(wrapped) != devhook.ENOTFOUND || wrapped.Error() != "reading: no delivery x" {
		t.Fatalf("wrapped: %v", wrapped)
	}
	if devhook.ErrorCode(errors.New("disk")) != devhook.EINTERNAL {
		t.Fatal("plain error is not internal")
	}
}

func TestEventStatusNote(t *testing.T) {
	for _, tc := range []struct {
		ev   devhook.Event
		want string
	}{
		{devhook.Event{}, ""},
		{devhook.Event{Status: "running"}, ""},
		{devhook.Event{StatusV2: "queued", Status: "running"}, "status_v2 queued is the run's state; status running is the legacy field, which the first delivery of a run fills with running: read status_v2"},
		{devhook.Event{StatusV2: "running", Status: "running"}, "status_v2 running is the run's state; status, the legacy field, says the same"},
		{devhook.Event{StatusV2: "succeeded"}, "status_v2 succeeded is the run's state (the legacy status field is absent)"},
		{devhook.Event{StatusV2: "failed", Status: "succeeded"}, "status_v2 failed is the run's state; status succeeded is the legacy field, and differs: read status_v2"},
	} {
		if got := tc.ev.StatusNote(); got != tc.want {
			t.Errorf("%+v.StatusNote() = %q, want %q", tc.ev, got, tc.want)
		}
	}
}

// Errorf keeps the chain of what it wraps with %w: errors.Is and errors.As
// reach a sentinel, a typed error and a coded error through it, several %w
// included; a %v keeps only the text.
func TestErrorfKeepsChain(t *testing.T) {
	sentinel := errors.New("disk full")
	typed := &fs.PathError{Op: "open", Path: "/x", Err: sentinel}
	inner := devhook.Errorf(devhook.ENOTFOUND, "no delivery %s", "x")

	err := devhook.Errorf(devhook.EINVALID, "replaying %s: %w", "x", typed)
	if err.Error() != "replaying x: open /x: disk full" || err.Code != devhook.EINVALID {
		t.Fatalf("message or code: %q %q", err.Error(), err.Code)
	}
	if !errors.Is(err, sentinel) {
		t.Fatal("errors.Is does not reach the sentinel")
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe != typed {
		t.Fatal("errors.As does not reach the typed error")
	}
	if !errors.Is(fmt.Errorf("outer: %w", err), sentinel) {
		t.Fatal("a wrapped *Error hides its chain")
	}

	both := devhook.Errorf(devhook.EINTERNAL, "%w and %w", inner, sentinel)
	if !errors.Is(both, sentinel) || !errors.Is(both, inner) {
		t.Fatal("two %w: one is lost")
	}
	// The outer code wins: the caller that wrapped decides the category.
	if c := devhook.ErrorCode(devhook.Errorf(devhook.ECONFLICT, "%w", inner)); c != devhook.ECONFLICT {
		t.Fatalf("outer code: %q", c)
	}
	var coded *devhook.Error
	if !errors.As(fmt.Errorf("x: %w", devhook.Errorf(devhook.EINVALID, "y: %w", inner)), &coded) || coded.Code != devhook.EINVALID {
		t.Fatal("errors.As finds the outer *Error first")
	}
	if plain := devhook.Errorf(devhook.EINVALID, "no %v", sentinel); errors.Unwrap(plain) != nil || errors.Is(plain, sentinel) {
		t.Fatal("a plain verb must keep only the text")
	}
}
