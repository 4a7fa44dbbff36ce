package emulator_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// newApp creates application id in the test key's account.
func (v *env) newApp(id string) {
	v.t.Helper()
	v.do("POST", "/v1/applications", map[string]any{"id": id, "name": "App " + id, "description": ""}, 201, nil)
}

// startRun starts a run and checks the create answer's shape.
func (v *env) startRun(app, instance string, body any) runRecord {
	v.t.Helper()
	var r runRecord
	raw := v.do("POST", "/v1/applications/"+app+"/runs?instance_id="+instance, body, 201, &r)
	checkRunRecord(v.t, raw, shapeCreated)
	return r
}

// metadata reads a run through the metadata endpoint and checks its shape.
func (v *env) metadata(app, id string) runRecord {
	v.t.Helper()
	var r runRecord
	raw := v.do("GET", "/v1/applications/"+app+"/runs/"+id+"/metadata", nil, 200, &r)
	checkRunRecord(v.t, raw, shapeMetadata)
	return r
}

// pollSucceeded polls the metadata endpoint, as the official clients do,
// until the run is final, and returns the full record.
func (v *env) pollSucceeded(app, id string) runRecord {
	v.t.Helper()
	var m runRecord
	eventually(v.t, func() bool {
		m = v.metadata(app, id)
		return m.Metadata.StatusV2 == "succeeded" || m.Metadata.StatusV2 == "canceled"
	}, "run %s to finish", id)
	if m.Metadata.StatusV2 != "succeeded" {
		v.t.Fatalf("run %s is %s, want succeeded", id, m.Metadata.StatusV2)
	}
	var full runRecord
	raw := v.do("GET", "/v1/applications/"+app+"/runs/"+id, nil, 200, &full)
	checkRunRecord(v.t, raw, shapeFull)
	return full
}

// TestRunAPI: create answers run_id with the record, the metadata endpoint
// has no output, polling it reaches succeeded, logs have a line a state,
// both instances work, and the new paths answer their errors.
func TestRunAPI(t *testing.T) {
	v := newEnv(t, testConfig())
	v.newApp("app")
	v.newApp("other")
	input := map[string]any{"stops": []any{"a", "b"}}

	for _, instance := range []string{"latest", "devint"} {
		t.Run(instance, func(t *testing.T) {
			r := v.startRun("app", instance, map[string]any{"input": input, "name": "n", "description": "d"})
			if r.RunID == "" || r.Metadata.StatusV2 != "queued" || r.Metadata.Status != "running" ||
				r.Metadata.ApplicationInstanceID != instance || r.Name != "n" || r.Description != "d" {
				t.Errorf("created run %+v", r)
			}
			done := v.pollSucceeded("app", r.ID)
			if done.Metadata.Status != "succeeded" || !equalJSON(done.Output.Solution, input) || done.Metadata.Error != "" {
				t.Errorf("finished run %+v", done)
			}
			var l map[string]string
			raw := v.do("GET", "/v1/applications/app/runs/"+r.ID+"/logs", nil, 200, &l)
			sameKeys(t, "logs", raw, "log")
			lines := strings.Split(strings.TrimSuffix(l["log"], "\n"), "\n")
			if len(lines) != 3 || !strings.Contains(lines[0], "queued on instance "+instance) ||
				!strings.HasSuffix(lines[1], " running") || !strings.Contains(lines[2], " succeeded") {
				t.Errorf("log %q: want a line for queued, running and succeeded", l["log"])
			}
		})
	}

	// Unset name, description: "" and not absent or null.
	var r runRecord
	raw := v.do("POST", "/v1/applications/app/runs", map[string]any{"input": 1}, 201, &r)
	var top map[string]any
	json.Unmarshal(raw, &top)
	if top["name"] != "" || top["description"] != "" || top["user_email"] != emulator.DefaultUserEmail {
		t.Errorf("unset fields: name %#v description %#v user_email %#v", top["name"], top["description"], top["user_email"])
	}

	run := "/v1/applications/app/runs/" + r.ID
	tests := []struct {
		name, key, method, path string
		body                    any
		want                    int
		allow                   string
	}{
		{"unknown instance", testKey, "POST", "/v1/applications/app/runs?instance_id=prod", map[string]any{"input": 1}, 404, ""},
		{"metadata of unknown run", testKey, "GET", "/v1/applications/app/runs/nope/metadata", nil, 404, ""},
		{"metadata under another app", testKey, "GET", "/v1/applications/other/runs/" + r.ID + "/metadata", nil, 404, ""},
		{"metadata of unknown app", testKey, "GET", "/v1/applications/nope/runs/" + r.ID + "/metadata", nil, 404, ""},
		{"metadata of another account", "test-key-2", "GET", run + "/metadata", nil, 404, ""},
		{"metadata without credential", "", "GET", run + "/metadata", nil, 401, ""},
		{"logs of unknown run", testKey, "GET", "/v1/applications/app/runs/nope/logs", nil, 404, ""},
		{"logs of another account", "test-key-2", "GET", run + "/logs", nil, 404, ""},
		{"cancel of unknown run", testKey, "PATCH", "/v1/applications/app/runs/nope/cancel", nil, 404, ""},
		{"cancel of another account", "test-key-2", "PATCH", run + "/cancel", nil, 404, ""},
		{"cancel with POST", testKey, "POST", run + "/cancel", nil, 405, "PATCH"},
		{"metadata with POST", testKey, "POST", run + "/metadata", nil, 405, "GET"},
		{"uploadurl with GET", testKey, "GET", "/v1/applications/app/runs/uploadurl", nil, 405, "POST"},
		{"uploadurl of unknown app", testKey, "POST", "/v1/applications/nope/runs/uploadurl", nil, 404, ""},
		{"uploadurl without credential", "", "POST", "/v1/applications/app/runs/uploadurl", nil, 401, ""},
		{"input and upload_id", testKey, "POST", "/v1/applications/app/runs", map[string]any{"input": 1, "upload_id": "u"}, 400, ""},
		{"neither input nor upload_id", testKey, "POST", "/v1/applications/app/runs", map[string]any{"name": "x"}, 400, ""},
		{"upload_id not a string", testKey, "POST", "/v1/applications/app/runs", map[string]any{"upload_id": 7}, 400, ""},
		{"unknown upload_id", testKey, "POST", "/v1/applications/app/runs", map[string]any{"upload_id": "nope"}, 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, hdr, body := v.request(tt.key, tt.method, tt.path, tt.body)
			wantError(t, tt.name, status, body, tt.want)
			if tt.allow != "" && hdr.Get("Allow") != tt.allow {
				t.Errorf("Allow %q, want %q", hdr.Get("Allow"), tt.allow)
			}
		})
	}
}

// TestRunInputLimit: an inline input as large as the official clients
// send inline (5 MiB) is taken; a body over MaxInputBytes is 413.
func TestRunInputLimit(t *testing.T) {
	v := newEnv(t, testConfig())
	v.newApp("app")
	big := strings.Repeat("x", 5<<20)
	v.do("POST", "/v1/applications/app/runs", map[string]any{"input": map[string]string{"blob": big}}, 201, nil)
	status, _, body := v.request(testKey, "POST", "/v1/applications/app/runs",
		map[string]any{"input": strings.Repeat("x", emulator.DefaultMaxInputBytes)})
	wantError(t, "over MaxInputBytes", status, body, 413)
}

// TestCancelRun cancels a queued and a running run: each gets a canceled
// run.status delivery after its earlier ones (legacy status failed, an
// error, the duration until the cancel) and nothing after it; canceling a
// final run is 409.
func TestCancelRun(t *testing.T) {
	tests := []struct {
		name      string
		queueTime time.Duration
		before    []string // status_v2 of the deliveries before the cancel
		execution float64  // execution_duration of the canceled run, ms (the clock moves 5 s after the deliveries)
	}{
		{"queued", time.Hour, []string{"queued"}, 0},
		{"running", time.Millisecond, []string{"queued", "running"}, 5000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock(t0)
			cfg := testConfig()
			cfg.Now = clock.Now
			cfg.QueueTime, cfg.RunTime = tt.queueTime, time.Hour
			v := newEnv(t, cfg)
			rc := newReceiver(t)
			v.createWebhook("hook", rc.srv.URL)
			secret := v.secret("hook")
			v.newApp("app")

			r := v.startRun("app", "devint", map[string]any{"input": map[string]int{"n": 1}})
			next := func() event {
				t.Helper()
				d := rc.next(t)
				if status, text := checkSignature(secret, d.header.Get("service-signature"), d.body, clock.Now().UnixMilli(), 5000); status != 200 {
					t.Errorf("signature: %d %s", status, text)
				}
				var ev event
				if err := json.Unmarshal(d.body, &ev); err != nil {
					t.Fatal(err)
				}
				return ev
			}
			for _, want := range tt.before {
				if ev := next(); ev.Data.StatusV2 != want {
					t.Fatalf("delivery %q before the cancel, want %q", ev.Data.StatusV2, want)
				}
			}
			clock.Advance(5 * time.Second)
			var canceled runRecord
			raw := v.do("PATCH", "/v1/applications/app/runs/"+r.ID+"/cancel", nil, 200, &canceled)
			checkRunRecord(t, raw, shapeMetadata)
			m := canceled.Metadata
			if m.StatusV2 != "canceled" || m.Status != "failed" || m.Error == "" || m.Duration != 5000 ||
				m.ExecutionDuration != tt.execution || m.OutputSize != 0 {
				t.Errorf("cancel answer %s", raw)
			}

			ev := next()
			d := ev.Data
			if d.RunID != r.ID || d.StatusV2 != "canceled" || d.Status != "failed" || d.Error == nil || *d.Error != m.Error ||
				d.Duration != 5000 || d.OutputSize != 0 || d.ApplicationInstanceID != "devint" {
				t.Errorf("canceled delivery %+v", d)
			}
			if got := v.metadata("app", r.ID); got.Metadata.StatusV2 != "canceled" {
				t.Errorf("metadata after cancel: %s", got.Metadata.StatusV2)
			}
			var l map[string]string
			v.do("GET", "/v1/applications/app/runs/"+r.ID+"/logs", nil, 200, &l)
			if !strings.HasSuffix(l["log"], "2026-11-22T10:00:05.000Z canceled\n") {
				t.Errorf("log %q does not end with the cancel", l["log"])
			}
			status, _, body := v.request(testKey, "PATCH", "/v1/applications/app/runs/"+r.ID+"/cancel", nil)
			wantError(t, "cancel a canceled run", status, body, 409)

			// Closing waits for every schedule and delivery: none came after
			// the canceled one.
			v.srv.Close()
			if err := v.e.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case d := <-rc.got:
				t.Errorf("a delivery after the canceled one: %s", d.body)
			default:
			}
			if n := len(rc.got); n != 0 {
				t.Errorf("%d deliveries after the canceled one", n)
			}
		})
	}

	t.Run("succeeded", func(t *testing.T) {
		v := newEnv(t, testConfig())
		v.newApp("app")
		r := v.startRun("app", "latest", map[string]any{"input": 1})
		v.pollSucceeded("app", r.ID)
		status, _, body := v.request(testKey, "PATCH", "/v1/applications/app/runs/"+r.ID+"/cancel", nil)
		wantError(t, "cancel a succeeded run", status, body, 409)
		if m := v.metadata("app", r.ID); m.Metadata.StatusV2 != "succeeded" {
			t.Errorf("after a refused cancel: %s", m.Metadata.StatusV2)
		}
	})
}

// uploadURL asks for an upload URL and checks the answer.
func (v *env) uploadURL(app string) (id, u string) {
	v.t.Helper()
	var a map[string]string
	raw := v.do("POST", "/v1/applications/"+app+"/runs/uploadurl", nil, 200, &a)
	sameKeys(v.t, "uploadurl answer", raw, "upload_id", "upload_url")
	if a["upload_id"] == "" || !strings.HasPrefix(a["upload_url"], v.srv.URL+"/uploads/") {
		v.t.Fatalf("uploadurl answer %s", raw)
	}
	return a["upload_id"], a["upload_url"]
}

// put PUTs body to an upload URL's path on this server, with no
// credential, as to a presigned URL.
func (v *env) put(u, body string) (int, []byte) {
	v.t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		v.t.Fatal(err)
	}
	status, _, b := v.request("", "PUT", p.EscapedPath(), body)
	return status, b
}

// TestUploadRoundTrip: upload URL, PUT, run with upload_id, poll, result;
// a JSON and a text input.
func TestUploadRoundTrip(t *testing.T) {
	tests := []struct {
		name, input string
		format      string
		solution    any
	}{
		{"json", `{"stops": ["a", "b"], "big": true}`, "json", map[string]any{"stops": []any{"a", "b"}, "big": true}},
		{"text", "a,b\n1,2\n", "text", "a,b\n1,2\n"},
	}
	v := newEnv(t, testConfig())
	v.newApp("app")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, u := v.uploadURL("app")
			if status, b := v.put(u, tt.input); status != 200 || len(b) != 0 {
				t.Fatalf("PUT: %d %s", status, b)
			}
			r := v.startRun("app", "latest", map[string]any{"upload_id": id, "options": map[string]string{"a": "1"}})
			if r.Metadata.InputSize != float64(len(tt.input)) {
				t.Errorf("input_size %v, want %d", r.Metadata.InputSize, len(tt.input))
			}
			var md struct {
				Metadata struct {
					Format struct{ Input struct{ Type string } }
				}
			}
			done := v.pollSucceeded("app", r.ID)
			raw := v.do("GET", "/v1/applications/app/runs/"+r.ID, nil, 200, &md)
			if md.Metadata.Format.Input.Type != tt.format || !equalJSON(done.Output.Solution, tt.solution) {
				t.Errorf("run of an uploaded %s input: %s", tt.name, raw)
			}
			// Single use: the URL takes no second PUT, the id no second run.
			status, b := v.put(u, tt.input)
			wantError(t, "second PUT", status, b, 404)
			status, _, b = v.request(testKey, "POST", "/v1/applications/app/runs", map[string]any{"upload_id": id})
			wantError(t, "second run", status, b, 400)
		})
	}
}

// TestUploadErrors: unknown, used and expired URLs are 404; too large is
// 413 and leaves the upload usable; an upload belongs to its account and
// application; a run needs the input PUT first.
func TestUploadErrors(t *testing.T) {
	clock := newClock(t0)
	cfg := testConfig()
	cfg.Now = clock.Now
	cfg.MaxUploadBytes = 1024
	cfg.QueueTime = time.Hour
	v := newEnv(t, cfg)
	v.newApp("app")
	v.newApp("other")
	status, _, b := v.request("test-key-2", "POST", "/v1/applications", map[string]any{"id": "app", "name": "theirs", "description": ""})
	if status != 201 {
		t.Fatalf("second account's app: %d %s", status, b)
	}

	id, u := v.uploadURL("app")
	run := func(key, app, id string) (int, []byte) {
		status, _, b := v.request(key, "POST", "/v1/applications/"+app+"/runs", map[string]any{"upload_id": id})
		return status, b
	}
	steps := []struct {
		name string
		do   func() (int, []byte)
		want int
	}{
		{"run before the PUT", func() (int, []byte) { return run(testKey, "app", id) }, 400},
		{"PUT to an unknown URL", func() (int, []byte) { return v.put(v.srv.URL+"/uploads/"+strings.Repeat("0", 64), "{}") }, 404},
		{"PUT too large", func() (int, []byte) { return v.put(u, `"`+strings.Repeat("x", 2000)+`"`) }, 413},
		{"PUT empty", func() (int, []byte) { return v.put(u, "") }, 400},
		{"GET the upload URL", func() (int, []byte) {
			p, _ := url.Parse(u)
			status, _, b := v.request("", "GET", p.EscapedPath(), nil)
			return status, b
		}, 405},
		{"PUT after the 413", func() (int, []byte) { return v.put(u, `[1,2,3]`) }, 200},
		{"PUT again", func() (int, []byte) { return v.put(u, `[1,2,3]`) }, 404},
		{"run in another application", func() (int, []byte) { return run(testKey, "other", id) }, 400},
		{"run in another account", func() (int, []byte) { return run("test-key-2", "app", id) }, 400},
		{"run", func() (int, []byte) { return run(testKey, "app", id) }, 201},
		{"run again", func() (int, []byte) { return run(testKey, "app", id) }, 400},
	}
	for _, s := range steps {
		status, b := s.do()
		if s.want >= 400 {
			wantError(t, s.name, status, b, s.want)
		} else if status != s.want {
			t.Errorf("%s: %d %s, want %d", s.name, status, b, s.want)
		}
	}

	// Expiry, on the emulator's clock: the URL takes no PUT and an input
	// PUT in time starts no run once its time is up.
	_, late := v.uploadURL("app")
	done, u2 := v.uploadURL("app")
	if status, b := v.put(u2, "1"); status != 200 {
		t.Fatalf("PUT: %d %s", status, b)
	}
	clock.Advance(emulator.DefaultUploadTTL)
	status, b = v.put(late, "1")
	wantError(t, "PUT to an expired URL", status, b, 404)
	status, b = run(testKey, "app", done)
	wantError(t, "run of an expired upload", status, b, 400)
}

// TestUploadKeptWithData: with a data directory, an input PUT before a
// restart starts a run after it, and a URL handed out before a restart
// takes its PUT after it.
func TestUploadKeptWithData(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.QueueTime = time.Hour
	e1, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{t: t, e: e1, srv: httptestServer(t, e1)}
	v.newApp("app")
	put, pu := v.uploadURL("app")
	if status, b := v.put(pu, `{"kept": true}`); status != 200 {
		t.Fatalf("PUT: %d %s", status, b)
	}
	pending, pendingURL := v.uploadURL("app")
	r := v.startRun("app", "latest", map[string]any{"input": 1})
	v.do("PATCH", "/v1/applications/app/runs/"+r.ID+"/cancel", nil, 200, nil)
	v.srv.Close()
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}

	v = newEnv(t, cfg)
	if m := v.metadata("app", r.ID); m.Metadata.StatusV2 != "canceled" || m.Metadata.Status != "failed" {
		t.Errorf("canceled run after a restart: %s / %s", m.Metadata.StatusV2, m.Metadata.Status)
	}
	// put keeps the URLs' paths: they point at the first server.
	if status, b := v.put(pendingURL, "2"); status != 200 {
		t.Errorf("PUT after a restart: %d %s", status, b)
	}
	for _, id := range []string{put, pending} {
		var r runRecord
		raw := v.do("POST", "/v1/applications/app/runs", map[string]any{"upload_id": id}, 201, &r)
		checkRunRecord(t, raw, shapeCreated)
	}
	if status, b := v.put(pu, "3"); status != 404 {
		t.Errorf("PUT to a used URL after a restart: %d %s", status, b)
	}
}
