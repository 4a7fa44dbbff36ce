package emulator_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

type runRecord struct {
	RunID       string `json:"run_id"` // the create answer only
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	UserEmail   string `json:"user_email"`
	ConsoleURL  string `json:"console_url"`
	Output      struct {
		Options  map[string]string `json:"options"`
		Solution any               `json:"solution"`
		Metrics  map[string]any    `json:"metrics"`
	} `json:"output"`
	Metadata struct {
		ApplicationID         string  `json:"application_id"`
		ApplicationInstanceID string  `json:"application_instance_id"`
		ApplicationVersionID  string  `json:"application_version_id"`
		CreatedAt             string  `json:"created_at"`
		InitiatedAt           string  `json:"initiated_at"`
		Duration              float64 `json:"duration"`
		ExecutionDuration     float64 `json:"execution_duration"`
		InputSize             float64 `json:"input_size"`
		OutputSize            float64 `json:"output_size"`
		Error                 string  `json:"error"`
		ExecutionClass        string  `json:"execution_class"`
		Format                struct {
			Input  struct{ Type string } `json:"input"`
			Output struct{ Type string } `json:"output"`
		} `json:"format"`
		Options struct {
			ActiveOptions  map[string]string   `json:"active_options"`
			OptionsSummary []map[string]string `json:"options_summary"`
		} `json:"options"`
		QueuingDisabled bool `json:"queuing_disabled"`
		QueuingPriority int  `json:"queuing_priority"`
		RunType         struct {
			Type         string `json:"type"`
			DefinitionID string `json:"definition_id"`
			ReferenceID  string `json:"reference_id"`
		} `json:"run_type"`
		Runtime  string `json:"runtime"`
		Status   string `json:"status"`
		StatusV2 string `json:"status_v2"`
	} `json:"metadata"`
}

var fractionalUTC = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$`)

// The shapes of a run record: the create answer adds run_id, the metadata
// endpoint and the cancel answer leave out output.
type runShape int

const (
	shapeCreated runShape = iota
	shapeFull
	shapeMetadata
)

// legacyOf pairs status_v2 with the legacy status: queued goes with
// running as in the interface's first delivery; the official clients'
// legacy values are failed, running and succeeded, so canceled is failed.
var legacyOf = map[string]string{"queued": "running", "running": "running", "succeeded": "succeeded", "failed": "failed", "canceled": "failed"}

// checkRunRecord checks the run record has every field of the interface,
// each of its type, in the given shape.
func checkRunRecord(t *testing.T, raw []byte, shape runShape) {
	t.Helper()
	top := []string{"id", "name", "description", "user_email", "console_url", "metadata"}
	switch shape {
	case shapeCreated:
		top = append(top, "output", "run_id")
	case shapeFull:
		top = append(top, "output")
	}
	sameKeys(t, "run", raw, top...)
	var fields map[string]json.RawMessage
	json.Unmarshal(raw, &fields)
	var status struct {
		Metadata struct {
			StatusV2   string  `json:"status_v2"`
			OutputSize float64 `json:"output_size"`
		} `json:"metadata"`
	}
	json.Unmarshal(raw, &status)
	succeeded := status.Metadata.StatusV2 == "succeeded"
	if shape != shapeMetadata {
		// Only a run that succeeded has an output, and output_size is
		// all of it as served.
		if succeeded {
			sameKeys(t, "run output", fields["output"], "options", "solution", "metrics")
		} else if string(fields["output"]) != "null" {
			t.Errorf("a run that is %s has output %s, want null", status.Metadata.StatusV2, fields["output"])
		}
		if want := float64(len(fields["output"])); succeeded && status.Metadata.OutputSize != want {
			t.Errorf("output_size %v, the output as served is %v bytes: %s", status.Metadata.OutputSize, want, fields["output"])
		}
	}
	if !succeeded && status.Metadata.OutputSize != 0 {
		t.Errorf("a run that is %s has output_size %v, want 0", status.Metadata.StatusV2, status.Metadata.OutputSize)
	}
	sameKeys(t, "run metadata", fields["metadata"], "application_id", "application_instance_id", "application_version_id",
		"created_at", "initiated_at", "duration", "execution_duration", "input_size", "output_size", "error",
		"execution_class", "format", "metrics", "options", "queuing_disabled", "queuing_priority", "run_type",
		"runtime", "status", "status_v2")
	var md map[string]json.RawMessage
	json.Unmarshal(fields["metadata"], &md)
	for _, k := range []string{"error", "status", "status_v2", "application_version_id"} {
		var s string
		if err := json.Unmarshal(md[k], &s); err != nil {
			t.Errorf("run metadata.%s is %s, want a string", k, md[k])
		}
	}
	sameKeys(t, "run metadata.options", md["options"], "active_options", "options_summary")
	sameKeys(t, "run metadata.run_type", md["run_type"], "type", "definition_id", "reference_id")
	sameKeys(t, "run metadata.format", md["format"], "input", "output")
	var r runRecord
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("run record %s: %v", raw, err)
	}
	m := r.Metadata
	if shape == shapeCreated && r.RunID != r.ID {
		t.Errorf("run_id %q, id %q: want the same", r.RunID, r.ID)
	}
	if want, ok := legacyOf[m.StatusV2]; !ok || m.Status != want {
		t.Errorf("status %q with status_v2 %q, want %q", m.Status, m.StatusV2, want)
	}
	if (m.StatusV2 == "canceled" || m.StatusV2 == "failed") != (m.Error != "") {
		t.Errorf("status_v2 %q with error %q: only a canceled or failed run has an error", m.StatusV2, m.Error)
	}
	if r.ID == "" || r.UserEmail == "" || !strings.HasPrefix(r.ConsoleURL, "http") {
		t.Errorf("run id %q user_email %q console_url %q", r.ID, r.UserEmail, r.ConsoleURL)
	}
	if !fractionalUTC.MatchString(m.CreatedAt) || !fractionalUTC.MatchString(m.InitiatedAt) {
		t.Errorf("timestamps %q %q", m.CreatedAt, m.InitiatedAt)
	}
	if (m.Format.Input.Type != "json" && m.Format.Input.Type != "text") || m.Format.Output.Type != "json" || m.RunType.Type != "standard" {
		t.Errorf("format %+v run_type %+v", m.Format, m.RunType)
	}
	if (m.ApplicationInstanceID != "latest" && m.ApplicationInstanceID != "devint") || m.ApplicationVersionID != "" || m.InputSize <= 0 {
		t.Errorf("instance %q version %q input_size %v", m.ApplicationInstanceID, m.ApplicationVersionID, m.InputSize)
	}
	if len(m.Options.OptionsSummary) != len(m.Options.ActiveOptions) {
		t.Errorf("options_summary %v does not list active_options %v", m.Options.OptionsSummary, m.Options.ActiveOptions)
	}
	for _, s := range m.Options.OptionsSummary {
		if len(s) != 3 || m.Options.ActiveOptions[s["name"]] != s["value"] || s["source"] == "" {
			t.Errorf("options_summary item %v", s)
		}
	}
}

func TestApplicationsAndRuns(t *testing.T) {
	clock := newClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	cfg := testConfig()
	cfg.Now = clock.Now
	cfg.BaseURL = "http://emulator.test:4010"
	cfg.QueueTime = time.Hour // the run stays queued in this test
	v := newEnv(t, cfg)

	var app map[string]any
	raw := v.do("POST", "/v1/applications", map[string]any{"id": "app-1", "name": "Routing", "description": "routes"}, 201, &app)
	sameKeys(t, "application", raw, "id", "name", "description", "type", "default_instance", "default_experiment_instance",
		"subscription_id", "locked", "created_at", "updated_at")
	want := map[string]any{"id": "app-1", "name": "Routing", "description": "routes", "type": "custom",
		"default_instance": "latest", "default_experiment_instance": "", "subscription_id": "", "locked": false,
		"created_at": "2026-11-22T10:00:00.000000Z", "updated_at": "2026-11-22T10:00:00.000000Z"}
	if !equalJSON(app, want) {
		t.Errorf("application %v\nwant %v", app, want)
	}
	var got map[string]any
	v.do("GET", "/v1/applications/app-1", nil, 200, &got)
	if !equalJSON(got, want) {
		t.Errorf("get application %v", got)
	}

	var r runRecord
	raw = v.do("POST", "/v1/applications/app-1/runs?instance_id=latest", map[string]any{
		"input": []any{"not", "an", "object"}, "options": map[string]string{"b": "2", "a": "1"}}, 201, &r)
	checkRunRecord(t, raw, shapeCreated)
	if r.Metadata.StatusV2 != "queued" || r.Metadata.Duration != 0 || r.Metadata.OutputSize != 0 ||
		r.Metadata.InputSize != float64(len(`["not","an","object"]`)) || r.UserEmail != emulator.DefaultUserEmail ||
		r.ConsoleURL != "http://emulator.test:4010/console/applications/app-1/runs/"+r.ID ||
		r.Metadata.CreatedAt != "2026-11-22T10:00:00.000000Z" || r.Output.Solution != nil ||
		r.Metadata.Options.OptionsSummary[0]["name"] != "a" {
		t.Errorf("queued run %s", raw)
	}
	// Without instance_id the default instance is used.
	v.do("POST", "/v1/applications/app-1/runs", map[string]any{"input": nil}, 201, nil)

	tests := []struct {
		name         string
		method, path string
		body         any
		want         int
	}{
		{"app missing id", "POST", "/v1/applications", map[string]any{"name": "x", "description": ""}, 400},
		{"app missing name", "POST", "/v1/applications", map[string]any{"id": "x", "description": ""}, 400},
		{"app not JSON", "POST", "/v1/applications", "nope", 400},
		{"app exists", "POST", "/v1/applications", map[string]any{"id": "app-1", "name": "x", "description": ""}, 409},
		{"app unknown", "GET", "/v1/applications/nope", nil, 404},
		{"run of unknown app", "POST", "/v1/applications/nope/runs?instance_id=latest", map[string]any{"input": 1}, 404},
		{"unknown instance", "POST", "/v1/applications/app-1/runs?instance_id=v2", map[string]any{"input": 1}, 404},
		{"run without input", "POST", "/v1/applications/app-1/runs?instance_id=latest", map[string]any{"options": map[string]string{}}, 400},
		{"option an object", "POST", "/v1/applications/app-1/runs?instance_id=latest", map[string]any{"input": 1, "options": map[string]any{"a": map[string]int{"b": 1}}}, 400},
		{"run body not JSON", "POST", "/v1/applications/app-1/runs?instance_id=latest", "{", 400},
		{"run unknown", "GET", "/v1/applications/app-1/runs/nope", nil, 404},
		{"run under another app", "GET", "/v1/applications/other/runs/" + r.ID, nil, 404},
		{"DELETE runs list", "DELETE", "/v1/applications/app-1/runs", nil, 405},
		{"DELETE app", "DELETE", "/v1/applications/app-1", nil, 405},
	}
	v.do("POST", "/v1/applications", map[string]any{"id": "other", "name": "Other", "description": ""}, 201, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := v.request(testKey, tt.method, tt.path, tt.body)
			wantError(t, tt.name, status, body, tt.want)
		})
	}
	// Another account does not see the application.
	status, _, body := v.request("test-key-2", "GET", "/v1/applications/app-1", nil)
	wantError(t, "another account's application", status, body, 404)
}

// TestResumeRun: a run left queued by a stopped emulator finishes after a
// restart, without sending its queued event again.
func TestResumeRun(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.QueueTime = time.Hour
	rc := newReceiver(t)
	e1, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{t: t, e: e1}
	v.srv = httptestServer(t, e1)
	v.createWebhook("hook", rc.srv.URL)
	v.do("POST", "/v1/applications", map[string]any{"id": "app", "name": "App", "description": ""}, 201, nil)
	v.do("POST", "/v1/applications/app/runs?instance_id=latest", map[string]any{"input": 1}, 201, nil)
	var ev event
	json.Unmarshal(rc.next(t).body, &ev)
	if ev.Data.StatusV2 != "queued" {
		t.Fatalf("first event %q", ev.Data.StatusV2)
	}
	v.waitConversations("hook", 1)
	v.srv.Close()
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.QueueTime = 10 * time.Millisecond
	v = newEnv(t, cfg)
	for _, want := range []string{"running", "succeeded"} {
		json.Unmarshal(rc.next(t).body, &ev)
		if ev.Data.StatusV2 != want {
			t.Errorf("after restart: %q, want %q", ev.Data.StatusV2, want)
		}
	}
	v.waitConversations("hook", 3)
}
