package scenario_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/scenario"
)

func build(t *testing.T, ds []*devhook.Delivery, paths ...string) (*scenario.Scenario, []string) {
	t.Helper()
	s, warnings, err := scenario.Build(ds, scenario.Options{Redact: paths})
	if err != nil {
		t.Fatal(err)
	}
	return s, warnings
}

// Two runs: each run id gets one pseudonym, the same in its three
// deliveries, in the receiver's answers that echo it, and in the query;
// the other run's differs. Nothing else in the bodies changes.
func TestRedact_SamePseudonymWhereverTheValueIs(t *testing.T) {
	a, b := runDeliveries(t, "run-secret-a"), runDeliveries(t, "run-secret-b")
	for _, d := range b {
		d.ReceivedAt = d.ReceivedAt.Add(10 * time.Second)
	}
	s, warnings := build(t, append(a, b...), "$.data.run_id", "$.data.application_id")
	if len(warnings) != 0 {
		t.Fatalf("warnings %v", warnings)
	}
	file, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"run-secret-a", "run-secret-b", "app-7"} {
		if bytes.Contains(file, []byte(secret)) {
			t.Errorf("the redacted file still has %q:\n%s", secret, file)
		}
	}
	if got := s.Redacted; len(got) != 2 || got[0] != "$.data.run_id" {
		t.Errorf("redacted %v", got)
	}
	for i, e := range s.Deliveries {
		var ev devhook.RunStatus
		if err := json.Unmarshal(e.Body, &ev); err != nil {
			t.Fatal(err)
		}
		want := "redacted-run_id-1"
		if i >= 3 {
			want = "redacted-run_id-2"
		}
		if ev.Data.RunID != want || ev.Data.ApplicationID != "redacted-application_id-1" {
			t.Errorf("delivery %d: run_id %q application_id %q, want %q and redacted-application_id-1", i+1, ev.Data.RunID, ev.Data.ApplicationID, want)
		}
		if !strings.Contains(string(e.Recorded.Body), `"run_id":"`+want+`"`) || e.Query != "src=svc&run="+want {
			t.Errorf("delivery %d: the answer %s or the query %q keeps the run id", i+1, e.Recorded.Body, e.Query)
		}
		// Every other byte is as received: only the values changed.
		orig, origID := a[i%3].Body, "run-secret-a"
		if i >= 3 {
			orig, origID = b[i%3].Body, "run-secret-b"
		}
		restored := bytes.ReplaceAll(e.Body, []byte(want), []byte(origID))
		restored = bytes.ReplaceAll(restored, []byte("redacted-application_id-1"), []byte("app-7"))
		if !bytes.Equal(restored, orig) {
			t.Errorf("delivery %d: more than the values changed:\n%s\n%s", i+1, e.Body, orig)
		}
	}
}

// Key order, spacing and escapes of a body stay as received around a
// redacted value; numbers get numbers, objects a string; a path that
// names nothing is a warning.
func TestRedact_KeepsTheBodyAroundTheValue(t *testing.T) {
	body := "{ \"z\" : 1,\n  \"user\": {\"email\": \"ann@example.com\", \"id\": 77},\n  \"tags\": [\"x\", {\"email\": \"bob@example.com\"}],\n" +
		"  \"note\": \"mail ann@example.com \\u00e9\", \"a\": \"\\u00e9\", \"n\": 77, \"blob\": {\"k\": [1, 2]} }"
	other := `{"user":{"email":"bob@example.com","id":78},"cc":"ann@example.com"}`
	ds := []*devhook.Delivery{
		{ID: "1", ReceivedAt: epoch, Method: "POST", Path: "/", Header: http.Header{"X-User": {"ann@example.com"}}, Body: []byte(body)},
		{ID: "2", ReceivedAt: epoch.Add(time.Second), Method: "POST", Path: "/u/bob@example.com", Body: []byte(other)},
		{ID: "3", ReceivedAt: epoch.Add(2 * time.Second), Method: "POST", Path: "/", Body: []byte("plain text from ann@example.com\xff")},
	}
	s, warnings := build(t, ds, "$..email", "$.user.id", "$.blob", "$.nothing.here")
	if len(warnings) != 1 || !strings.Contains(warnings[0], "$.nothing.here matched nothing") {
		t.Errorf("warnings %v, want one for $.nothing.here", warnings)
	}
	want := "{ \"z\" : 1,\n  \"user\": {\"email\": \"redacted-email-1\", \"id\": 1},\n  \"tags\": [\"x\", {\"email\": \"redacted-email-2\"}],\n" +
		"  \"note\": \"mail redacted-email-1 é\", \"a\": \"\\u00e9\", \"n\": 77, \"blob\": \"redacted-blob-1\" }"
	if got := string(s.Deliveries[0].Body); got != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	if got := string(s.Deliveries[1].Body); got != `{"user":{"email":"redacted-email-2","id":2},"cc":"redacted-email-1"}` {
		t.Errorf("second body %s", got)
	}
	if got := s.Deliveries[0].Header.Get("X-User"); got != "redacted-email-1" {
		t.Errorf("header %q", got)
	}
	if got := s.Deliveries[1].Path; got != "/u/redacted-email-2" {
		t.Errorf("path %q", got)
	}
	if got := string(s.Deliveries[2].Body); got != "plain text from redacted-email-1\xff" {
		t.Errorf("a body that is not JSON: %q", got)
	}
}

// Short values are replaced only where a path names them.
func TestRedact_ShortValuesOnlyWherePathsNameThem(t *testing.T) {
	ds := []*devhook.Delivery{{ID: "1", ReceivedAt: epoch, Method: "POST", Path: "/ok", Body: []byte(`{"s":"ok","t":"ok then"}`)}}
	s, _ := build(t, ds, "$.s")
	if got := string(s.Deliveries[0].Body); got != `{"s":"redacted-s-1","t":"ok then"}` || s.Deliveries[0].Path != "/ok" {
		t.Errorf("body %s path %s", got, s.Deliveries[0].Path)
	}
}

func TestRedact_Paths(t *testing.T) {
	body := []byte(`{"a":{"b":[{"c":"v0"},{"c":"v1"}],"it's":"q"},"x":"y"}`)
	tests := []struct {
		path string
		want string // the body after, or the error
	}{
		{"$.a.b[1].c", `{"a":{"b":[{"c":"v0"},{"c":"redacted-c-1"}],"it's":"q"},"x":"y"}`},
		{"$.a.b[*].c", `{"a":{"b":[{"c":"redacted-c-1"},{"c":"redacted-c-2"}],"it's":"q"},"x":"y"}`},
		{"$['a'][\"it's\"]", `{"a":{"b":[{"c":"v0"},{"c":"v1"}],"it's":"redacted-it's-1"},"x":"y"}`},
		{"$..c", `{"a":{"b":[{"c":"redacted-c-1"},{"c":"redacted-c-2"}],"it's":"q"},"x":"y"}`},
		{"$..[0]", `{"a":{"b":["redacted-1",{"c":"v1"}],"it's":"q"},"x":"y"}`},
		{"$.*", `{"a":"redacted-1","x":"redacted-2"}`},
		{"$", `"redacted-1"`},
		{"data.run_id", "starts with $"},
		{"$.a..", "empty member name"},
		{"$.a[", "without its ]"},
		{"$.a[-1]", "not an index"},
		{"$x", "unexpected"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			s, _, err := scenario.Build([]*devhook.Delivery{{ID: "1", ReceivedAt: epoch, Method: "POST", Path: "/", Body: body}},
				scenario.Options{Redact: []string{tt.path}})
			if cerr := scenario.CheckRedact([]string{"$.x", tt.path}); fmt.Sprint(cerr) != fmt.Sprint(err) {
				t.Errorf("CheckRedact: %v, Build: %v", cerr, err)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "redaction path") {
					t.Fatalf("err %v, want %q", err, tt.want)
				}
				return
			}
			// "it's" is no label character: the pseudonym drops it.
			want := strings.ReplaceAll(tt.want, "redacted-it's-1", "redacted-its-1")
			if got := string(s.Deliveries[0].Body); got != want {
				t.Fatalf("body %s, want %s", got, want)
			}
		})
	}
}
