package emulator_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// These tests hold the emulator to what the service's own clients (its
// Python SDK among them) expect where the interface is silent
// (docs/INTERFACE.md, "Where the service says nothing").

// get sends a GET with no credential to an absolute URL of the server.
func (v *env) getURL(u string) (int, http.Header, []byte) {
	v.t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		v.t.Fatal(err)
	}
	if p.Host != strings.TrimPrefix(v.srv.URL, "http://") {
		v.t.Fatalf("URL %s is not the emulator's (%s)", u, v.srv.URL)
	}
	return v.request("", "GET", p.RequestURI(), nil)
}

// noGoTypes fails when an answer's text speaks Go, not JSON.
func noGoTypes(t *testing.T, what string, body []byte) {
	t.Helper()
	for _, w := range []string{"Go ", "struct", "map[", "json:", "int64", "float64", "RawMessage", "of type"} {
		if bytes.Contains(body, []byte(w)) {
			t.Errorf("%s: the answer %s speaks Go (%q)", what, body, w)
		}
	}
}

// TestRunOptionValues: options that are numbers or booleans are taken as
// their text as sent, and reach the application so; an object, an array
// or null is 400 naming the option.
func TestRunOptionValues(t *testing.T) {
	v := newEnv(t, testConfig())
	v.newApp("app")
	raw := `{"input": {"n": 1}, "options": {"iterations": 3, "verbose": true, "quiet": false, "ratio": 2.50, "big": -1e3, "name": "x y"}}`
	status, _, body := v.request(testKey, "POST", "/v1/applications/app/runs?instance_id=latest", raw)
	if status != 201 {
		t.Fatalf("run with scalar options: %d %s", status, body)
	}
	var r runRecord
	json.Unmarshal(body, &r)
	want := map[string]string{"iterations": "3", "verbose": "true", "quiet": "false", "ratio": "2.50", "big": "-1e3", "name": "x y"}
	if !equalJSON(r.Metadata.Options.ActiveOptions, want) {
		t.Errorf("active_options %v, want %v", r.Metadata.Options.ActiveOptions, want)
	}
	done := v.pollSucceeded("app", r.RunID)
	if !equalJSON(done.Output.Options, want) {
		t.Errorf("output options %v, want %v", done.Output.Options, want)
	}

	// A pushed application reads them as -name value.
	v.push("app", "python", pythonPackage(t))
	status, _, body = v.request(testKey, "POST", "/v1/applications/app/runs?instance_id=latest", `{"input": {}, "options": {"iterations": 3, "verbose": true}}`)
	if status != 201 {
		t.Fatalf("run with scalar options: %d %s", status, body)
	}
	json.Unmarshal(body, &r)
	_, out := v.waitFinal("app", r.RunID)
	if got := strings.Join(solutionOf(t, out).Args, " "); got != "-iterations 3 -verbose true" {
		t.Errorf("the application got arguments %q", got)
	}

	for _, bad := range []struct{ value, kind string }{{`{"a": 1}`, "an object"}, {`[1, 2]`, "an array"}, {`null`, "null"}} {
		status, _, body := v.request(testKey, "POST", "/v1/applications/app/runs", `{"input": 1, "options": {"depth": `+bad.value+`}}`)
		wantError(t, "option "+bad.value, status, body, 400)
		if !strings.Contains(string(body), "options.depth is "+bad.kind) || !strings.Contains(string(body), "a string, a number or a boolean") {
			t.Errorf("option %s: %s", bad.value, body)
		}
		noGoTypes(t, "option "+bad.value, body)
	}
}

// TestBadBodiesSpeakJSON: a body whose field has the wrong JSON type is
// 400 naming the field, the JSON type it must have and the one it has,
// without Go's type names.
func TestBadBodiesSpeakJSON(t *testing.T) {
	v := newEnv(t, testConfig())
	v.newApp("app")
	tests := []struct {
		method, path, body, want string
	}{
		{"POST", "/v1/webhooks", `{"id": 5, "event_types": ["run.status"], "endpoint_url": "http://x/", "description": ""}`, "field id must be a string, not a number"},
		{"POST", "/v1/webhooks", `{"id": "h", "event_types": "run.status", "endpoint_url": "http://x/", "description": ""}`, "field event_types must be an array, not a string"},
		{"POST", "/v1/applications", `[1]`, "request body must be an object, not an array"},
		{"POST", "/v1/applications", `{"id": "x", "name": true}`, "field name must be a string, not a boolean"},
		{"POST", "/v1/applications/app/runs", `{"input": 1, "options": [1]}`, "field options must be an object, not an array"},
		{"POST", "/v1/applications/app/runs", `{"input": 1, "name": 1.5}`, "field name must be a string, not a number"},
		{"PUT", "/v1/applications/app/binary", `{"requirements": {"executable_type": 5}}`, "field requirements.executable_type must be a string, not a number"},
		{"POST", "/v1/events/trigger", `{"event_type": {}}`, "field event_type must be a string, not an object"},
		{"POST", "/v1/applications", `{"id": "x",`, "not valid JSON"},
	}
	for _, tt := range tests {
		status, _, body := v.request(testKey, tt.method, tt.path, tt.body)
		wantError(t, tt.method+" "+tt.path+" "+tt.body, status, body, 400)
		if !strings.Contains(string(body), tt.want) {
			t.Errorf("%s %s %s: %s, want %q in it", tt.method, tt.path, tt.body, body, tt.want)
		}
		noGoTypes(t, tt.body, body)
	}
}

// TestDevintRunsThePushedCode: a run of devint, the instance the service's
// own clients use by default, executes the pushed package as latest does;
// an instance the application does not have is 404 saying which it has.
func TestDevintRunsThePushedCode(t *testing.T) {
	v := newEnv(t, testConfig())
	v.newApp("app")
	v.push("app", "python", pythonPackage(t))
	r := v.startRun("app", "devint", map[string]any{"input": map[string]int{"n": 5}})
	done, raw := v.waitFinal("app", r.ID)
	if done.Metadata.StatusV2 != "succeeded" || done.Metadata.Runtime != "python:test" {
		t.Fatalf("devint run %s %q runtime %q", done.Metadata.StatusV2, done.Metadata.Error, done.Metadata.Runtime)
	}
	if b, _ := json.Marshal(solutionOf(t, raw).Input); string(b) != `{"n":5}` {
		t.Errorf("the pushed app read %s", b)
	}
	status, _, body := v.request(testKey, "POST", "/v1/applications/app/runs?instance_id=staging", `{"input": 1}`)
	wantError(t, "a run of an instance the app does not have", status, body, 404)
	var e struct{ Error string }
	json.Unmarshal(body, &e)
	if !strings.Contains(e.Error, `no instance "staging"`) || !strings.Contains(e.Error, "latest and devint") {
		t.Errorf("unknown instance: %s", body)
	}
}

// TestRunOutputURL: with format=url the run record's output is {"url"},
// and a GET of the URL, with no credential, answers the output as served
// inline, as long as the URL has not expired; the output of a run over
// 5 MiB, which the service's clients always ask for so, comes back whole.
func TestRunOutputURL(t *testing.T) {
	clk := newClock(t0)
	cfg := testConfig()
	cfg.Now = clk.Now
	v := newEnv(t, cfg)
	v.newApp("app")
	big := map[string]string{"blob": strings.Repeat("x", 6<<20)}
	r := v.startRun("app", "latest", map[string]any{"input": big})
	eventually(t, func() bool { return v.metadata("app", r.ID).Metadata.StatusV2 == "succeeded" }, "run to succeed")
	m := v.metadata("app", r.ID)
	if m.Metadata.OutputSize <= 5<<20 {
		t.Fatalf("output_size %v: the output should be over 5 MiB", m.Metadata.OutputSize)
	}
	inline := v.do("GET", "/v1/applications/app/runs/"+r.ID, nil, 200, nil)
	var rec map[string]json.RawMessage
	json.Unmarshal(inline, &rec)

	raw := v.do("GET", "/v1/applications/app/runs/"+r.ID+"?format=url", nil, 200, nil)
	checkRunRecordKeys(t, raw)
	var withURL struct {
		Output   map[string]string `json:"output"`
		Metadata map[string]any    `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &withURL); err != nil {
		t.Fatalf("record with format=url: %v", err)
	}
	if len(withURL.Output) != 1 || withURL.Output["url"] == "" {
		t.Fatalf("output with format=url: %v, want {\"url\": …}", withURL.Output)
	}
	status, hdr, body := v.getURL(withURL.Output["url"])
	if status != 200 || hdr.Get("Content-Type") != "application/json" || !bytes.Equal(body, rec["output"]) {
		t.Fatalf("GET the output's URL: %d %s, %d bytes (want %d)", status, hdr.Get("Content-Type"), len(body), len(rec["output"]))
	}
	if float64(len(body)) != m.Metadata.OutputSize {
		t.Errorf("downloaded %d bytes, output_size %v", len(body), m.Metadata.OutputSize)
	}

	status, _, body = v.request(testKey, "GET", "/v1/applications/app/runs/"+r.ID+"?format=csv", nil)
	wantError(t, "an unknown format", status, body, 400)
	clk.Advance(time.Hour + time.Second)
	status, _, body = v.getURL(withURL.Output["url"])
	wantError(t, "an expired download URL", status, body, 404)
	status, _, body = v.request("", "GET", "/downloads/nope", nil)
	wantError(t, "an unknown download URL", status, body, 404)

	// A run that has no output has none with format=url either.
	v.push("app", "python", pythonPackage(t))
	f := v.startRun("app", "latest", map[string]any{"input": map[string]string{"mode": "silent"}})
	v.waitFinal("app", f.ID)
	raw = v.do("GET", "/v1/applications/app/runs/"+f.ID+"?format=url", nil, 200, nil)
	json.Unmarshal(raw, &rec)
	if string(rec["output"]) != "null" {
		t.Errorf("a failed run's output with format=url: %s", rec["output"])
	}
}

// checkRunRecordKeys checks the record's top-level fields.
func checkRunRecordKeys(t *testing.T, raw []byte) {
	t.Helper()
	sameKeys(t, "run", raw, "id", "name", "description", "user_email", "console_url", "metadata", "output")
}

// TestRunInput: GET …/input answers the run's input as it came (JSON as
// sent, an uploaded text as its text), and with format=url a URL that
// serves it.
func TestRunInput(t *testing.T) {
	v := newEnv(t, testConfig())
	v.newApp("app")
	sent := `{"stops":["a","b"],"n":1.50,"s":"<é>"}`
	status, _, body := v.request(testKey, "POST", "/v1/applications/app/runs", `{"input": `+sent+`}`)
	if status != 201 {
		t.Fatalf("start: %d %s", status, body)
	}
	var r runRecord
	json.Unmarshal(body, &r)
	status, hdr, body := v.request(testKey, "GET", "/v1/applications/app/runs/"+r.RunID+"/input", nil)
	if status != 200 || hdr.Get("Content-Type") != "application/json" || string(body) != sent {
		t.Errorf("GET input: %d %s %s, want %s", status, hdr.Get("Content-Type"), body, sent)
	}
	var u map[string]string
	raw := v.do("GET", "/v1/applications/app/runs/"+r.RunID+"/input?format=url", nil, 200, &u)
	sameKeys(t, "input with format=url", raw, "url")
	if status, _, body := v.getURL(u["url"]); status != 200 || string(body) != sent {
		t.Errorf("GET the input's URL: %d %s", status, body)
	}

	id, up := v.uploadURL("app")
	if status, b := v.put(up, "a,b\n1,2\n"); status != 200 {
		t.Fatalf("PUT: %d %s", status, b)
	}
	tr := v.startRun("app", "latest", map[string]any{"upload_id": id})
	status, hdr, body = v.request(testKey, "GET", "/v1/applications/app/runs/"+tr.ID+"/input", nil)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") || string(body) != "a,b\n1,2\n" {
		t.Errorf("GET a text input: %d %s %q", status, hdr.Get("Content-Type"), body)
	}
	status, _, body = v.request(testKey, "GET", "/v1/applications/app/runs/nope/input", nil)
	wantError(t, "the input of an unknown run", status, body, 404)
	status, _, body = v.request("test-key-2", "GET", "/v1/applications/app/runs/"+r.RunID+"/input", nil)
	wantError(t, "the input of another account's run", status, body, 404)
}

// TestConsolePage: a run's console_url serves a page with its record, to
// a browser with no credential.
func TestConsolePage(t *testing.T) {
	v := newEnv(t, testConfig())
	v.newApp("app")
	status, _, body := v.request(testKey, "POST", "/v1/applications/app/runs", `{"input": {"note": "<script>alert(1)</script>"}}`)
	if status != 201 {
		t.Fatalf("start: %d %s", status, body)
	}
	var r runRecord
	json.Unmarshal(body, &r)
	r.ID = r.RunID
	v.pollSucceeded("app", r.ID)
	status, hdr, body := v.getURL(r.ConsoleURL)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("GET console_url: %d %s %s", status, hdr.Get("Content-Type"), body)
	}
	for _, w := range []string{r.ID, "succeeded", "&lt;script&gt;"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("the console page does not show %q:\n%s", w, body)
		}
	}
	if strings.Contains(string(body), "<script>") {
		t.Errorf("the console page holds the run's text unescaped:\n%s", body)
	}
	status, _, _ = v.getURL(strings.Replace(r.ConsoleURL, r.ID, "nope", 1))
	if status != 404 {
		t.Errorf("console page of an unknown run: %d", status)
	}
}

// TestCancelFinishedRun: canceling a run that has ended is 409 saying so,
// in words a command can print as they are.
func TestCancelFinishedRun(t *testing.T) {
	v := newEnv(t, testConfig())
	v.newApp("app")
	r := v.startRun("app", "latest", map[string]any{"input": 1})
	v.pollSucceeded("app", r.ID)
	status, _, body := v.request(testKey, "PATCH", "/v1/applications/app/runs/"+r.ID+"/cancel", nil)
	wantError(t, "cancel a succeeded run", status, body, 409)
	var e struct{ Error string }
	json.Unmarshal(body, &e)
	if want := "run " + r.ID + " already finished (succeeded): nothing to cancel"; e.Error != want {
		t.Errorf("cancel of a succeeded run: %q, want %q", e.Error, want)
	}
}
