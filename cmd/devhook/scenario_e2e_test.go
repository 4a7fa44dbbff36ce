package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/emulator"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/scenario"
)

// recording is a handler that remembers when each request came and what
// it was.
type recording struct {
	mu    sync.Mutex
	at    []time.Time
	reqs  []*http.Request
	body  [][]byte
	verds []devhook.Verdict
}

func (rec *recording) reference(secret string) http.Handler {
	return receiver.New(receiver.Config{Secret: secret, OnRequest: func(r *http.Request, body []byte, v devhook.Verdict) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.at = append(rec.at, time.Now())
		rec.reqs = append(rec.reqs, r.Clone(r.Context()))
		rec.body = append(rec.body, body)
		rec.verds = append(rec.verds, v)
	}})
}

func (rec *recording) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

// emulated is devhook emulate in this process, and its API.
type emulated struct {
	t   *testing.T
	srv *httptest.Server
}

func startEmulator(t *testing.T, cfg emulator.Config) *emulated {
	t.Helper()
	em, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(em)
	t.Cleanup(func() { srv.Close(); em.Close() })
	return &emulated{t: t, srv: srv}
}

func (e *emulated) api(method, path, body string) map[string]any {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		e.t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// Issue 25, the whole path: the emulated service runs an application, its
// three deliveries go through a real devhook listen, which records them;
// scenario save writes them (through the running listen's inspector, and
// then from the data directory: the same bytes), redacted; scenario play
// sends them to the reference receiver (exit 0), to a handler that reads t
// as seconds (exit 1, with listen's hint), without waiting and with the
// recorded spacing; bad files are refused (exit 2) with nothing sent; and
// devhook trigger --scenario has the emulator send them to a webhook.
func TestScenario_RecordSavePlay(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	const spacing = 400 * time.Millisecond
	em := startEmulator(t, emulator.Config{APIKeys: []string{"key"}, QueueTime: spacing, RunTime: spacing, RetryDelays: []time.Duration{}})
	em.api("POST", "/v1/webhooks", `{"id":"hook","event_types":["run.status"],"endpoint_url":"http://127.0.0.1:9/","description":"devhook"}`)
	secret := em.api("GET", "/v1/webhooks/hook/secret", "")["secret"].(string)

	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	data, inspect := t.TempDir(), closedAddr(t)
	lr := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", data, "--inspect", inspect)
	pub := lr.next(t, "ready")["public_url"].(string)
	em.api("PUT", "/v1/webhooks/hook", `{"id":"hook","event_types":["run.status"],"endpoint_url":"`+pub+`/hook?src=service","description":"devhook"}`)
	em.api("POST", "/v1/applications", `{"id":"app","name":"App","description":""}`)
	runID := em.api("POST", "/v1/applications/app/runs?instance_id=latest", `{"input":{"x":1},"options":{}}`)["id"].(string)
	var ids []string
	for _, want := range []string{"queued", "running", "succeeded"} {
		d := lr.next(t, "delivery")
		if d["run_id"] != runID || d["status_v2"] != want || d["status"] != float64(200) {
			t.Fatalf("delivery %v, want run %s %s answered 200", d, runID, want)
		}
		ids = append(ids, d["id"].(string))
	}

	// Saved while listen records, through its inspector.
	dir := t.TempDir()
	live := filepath.Join(dir, "live.json")
	out, stderr, err := devhookCmd(t, "scenario", "save", live, "--run", runID, "--data", data, "--inspect", inspect,
		"--redact", "$.data.run_id", "--redact", "$.data.nothing")
	if err != nil || !strings.Contains(out, "saved 3 deliveries to "+live) {
		t.Fatalf("scenario save: %v %s\n%s", err, stderr, out)
	}
	if !strings.Contains(stderr, "warning: --redact $.data.nothing matched nothing") {
		t.Errorf("no warning for a path that matched nothing: %q", stderr)
	}
	file, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(file, []byte(runID)) || !bytes.Contains(file, []byte(`\"run_id\":\"redacted-run_id-1\"`)) {
		t.Fatalf("the run id is not redacted:\n%s", file)
	}
	s, err := scenario.Parse(live, file)
	if err != nil {
		t.Fatal(err)
	}
	offsets := []int64{s.Deliveries[0].OffsetMS, s.Deliveries[1].OffsetMS, s.Deliveries[2].OffsetMS}
	// The emulator's steps are timed from the run's start, the offsets
	// from the first delivery's arrival: a little shorter, not much.
	if min := spacing.Milliseconds() * 3 / 4; offsets[0] != 0 || offsets[1] < min || offsets[2]-offsets[1] < min {
		t.Fatalf("offsets %v, want the run's spacing of %s", offsets, spacing)
	}
	for i, e := range s.Deliveries {
		if e.Recorded == nil || e.Recorded.Status != 200 || e.Path != "/hook" || e.Query != "src=service" || e.Header.Get("User-Agent") != emulator.UserAgent {
			t.Errorf("delivery %d: %+v", i+1, e)
		}
		if strings.Contains(string(e.Recorded.Body), runID) {
			t.Errorf("delivery %d: the recorded answer keeps the run id: %s", i+1, e.Recorded.Body)
		}
	}
	// The same deliveries named otherwise give the same bytes.
	for _, sel := range [][]string{{"--last", "3"}, {"--id", strings.Join([]string{ids[2], ids[0], ids[1]}, ",")}} {
		args := append([]string{"scenario", "save", "-", "--data", data, "--inspect", inspect, "--redact", "$.data.run_id", "--redact", "$.data.nothing"}, sel...)
		out, _, err := devhookCmd(t, args...)
		if err != nil || out != string(file) {
			t.Errorf("scenario save %s: %v; the bytes differ from --run's:\n%s", strings.Join(sel, " "), err, out)
		}
	}
	// And from the data directory, once listen is gone.
	lr.stop(t)
	offline := filepath.Join(dir, "offline.json")
	if _, stderr, err := devhookCmd(t, "scenario", "save", offline, "--run", runID, "--data", data, "--inspect", inspect,
		"--redact", "$.data.run_id", "--redact", "$.data.nothing"); err != nil {
		t.Fatalf("offline save: %v %s", err, stderr)
	}
	if b, _ := os.ReadFile(offline); !bytes.Equal(b, file) {
		t.Errorf("saved from the data directory, the file differs:\n%s\nthrough the inspector:\n%s", b, file)
	}

	// Played to the reference receiver: every delivery accepted, at the
	// recorded spacing.
	ref := &recording{}
	refSrv := httptest.NewServer(ref.reference(secret))
	defer refSrv.Close()
	junit := filepath.Join(dir, "play.xml")
	start := time.Now()
	out, _, err = devhookCmd(t, "scenario", "play", live, "--to", refSrv.URL, "--secret", secret, "--junit", junit)
	if exitCode(err) != 0 || !strings.Contains(out, "PASS: 3 of 3") || !strings.Contains(out, "run.status queued redacted-run_id-1") {
		t.Fatalf("play to the reference receiver: exit %d %v\n%s", exitCode(err), err, out)
	}
	if ref.count() != 3 {
		t.Fatalf("the receiver got %d deliveries", ref.count())
	}
	for i := range 3 {
		if gap := ref.at[i].Sub(start); gap < time.Duration(offsets[i])*time.Millisecond {
			t.Errorf("delivery %d came %s after the start, before its offset %d ms", i+1, gap, offsets[i])
		}
		if ref.verds[i].Result != devhook.VerdictOK || !bytes.Equal(ref.body[i], s.Deliveries[i].Body) || ref.reqs[i].URL.RequestURI() != "/hook?src=service" {
			t.Errorf("delivery %d: %s %s %q", i+1, ref.verds[i].Result, ref.reqs[i].URL, ref.body[i])
		}
	}
	var doc struct {
		Suite struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
		} `xml:"testsuite"`
	}
	if b, err := os.ReadFile(junit); err != nil || xml.Unmarshal(b, &doc) != nil || doc.Suite.Tests != 3 || doc.Suite.Failures != 0 {
		t.Errorf("--junit: %v %+v", err, doc)
	}

	// Without waiting: sooner than the recorded spacing.
	fast := &recording{}
	fastSrv := httptest.NewServer(fast.reference(secret))
	defer fastSrv.Close()
	start = time.Now()
	out, _, err = devhookCmd(t, "scenario", "play", live, "--to", fastSrv.URL, "--secret", secret, "--speed", "0")
	if exitCode(err) != 0 || fast.count() != 3 {
		t.Fatalf("--speed 0: exit %d (%v), %d deliveries\n%s", exitCode(err), err, fast.count(), out)
	}
	if took := fast.at[2].Sub(start); took >= time.Duration(offsets[2])*time.Millisecond {
		t.Errorf("--speed 0 took %s, no less than the recorded %d ms", took, offsets[2])
	}

	// A handler that reads t as seconds: exit 1, and listen's hint.
	wrong := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer wrong.Close()
	out, _, err = devhookCmd(t, "scenario", "play", live, "--to", wrong.URL, "--secret", checkSecret, "--speed", "0")
	if exitCode(err) != 1 || !strings.Contains(out, "FAIL: 3 of 3") ||
		!strings.Contains(out, "deliveries 1, 2, 3: hint: your receiver refused a delivery whose signature is valid; run `devhook check "+wrong.URL+"/hook?src=service --secret …`") ||
		!strings.Contains(out, "reads t as seconds") {
		t.Errorf("play to a handler reading seconds: exit %d (%v)\n%s", exitCode(err), err, out)
	}

	// Bad files: exit 2, the file and the delivery named, nothing sent.
	bad := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	count := &recording{}
	countSrv := httptest.NewServer(count.reference(secret))
	defer countSrv.Close()
	second := strings.Index(string(file), `"offset_ms": `+strconv.FormatInt(offsets[1], 10))
	badFiles := []struct {
		path string
		want string
	}{
		{bad("v3.json", strings.Replace(string(file), `"devhook_scenario": 1`, `"devhook_scenario": 3`, 1)), "is version 3 of the scenario format"},
		{bad("cut.json", string(file[:len(file)-40])), "ends early (a truncated file?)"},
		{bad("text.json", "not json at all\n"), "not valid JSON"},
		{bad("b64.json", string(file[:second])+`"body_encoding": "base64", `+string(file[second:])), "delivery 2: body: \"body_encoding\" is base64 but the body is not standard padded base64"},
	}
	for _, bf := range badFiles {
		for _, args := range [][]string{
			{"scenario", "play", bf.path, "--to", countSrv.URL, "--secret", secret, "--speed", "0"},
			{"scenario", "show", bf.path},
			{"trigger", "--scenario", bf.path, "--endpoint", em.srv.URL, "--api-key", "key"},
		} {
			_, _, err := devhookCmd(t, args...)
			if exitCode(err) != 2 || !strings.Contains(err.Error(), "scenario "+bf.path+": ") || !strings.Contains(err.Error(), bf.want) {
				t.Errorf("%s: exit %d, %v; want 2 and %q", strings.Join(args, " "), exitCode(err), err, bf.want)
			}
		}
	}
	if count.count() != 0 {
		t.Errorf("bad files sent %d deliveries", count.count())
	}

	out, _, err = devhookCmd(t, "scenario", "show", live)
	if err != nil || !strings.Contains(out, "redacted $.data.run_id") || !strings.Contains(out, "/hook?src=service  redacted-run_id-1  running") {
		t.Errorf("scenario show: %v\n%s", err, out)
	}

	// The emulator sends the scenario to a webhook, signed with its secret.
	direct := &recording{}
	em.api("DELETE", "/v1/webhooks/hook", "")
	em.api("POST", "/v1/webhooks", `{"id":"direct","event_types":["run.status"],"endpoint_url":"http://127.0.0.1:9/","description":"d"}`)
	directSecret := em.api("GET", "/v1/webhooks/direct/secret", "")["secret"].(string)
	directSrv := httptest.NewServer(direct.reference(directSecret))
	defer directSrv.Close()
	em.api("PUT", "/v1/webhooks/direct", `{"id":"direct","event_types":["run.status"],"endpoint_url":"`+directSrv.URL+`/in","description":"d"}`)
	out, _, err = devhookCmd(t, "trigger", "--scenario", live, "--speed", "0", "--endpoint", em.srv.URL, "--api-key", "key")
	if err != nil || !strings.Contains(out, "triggered scenario "+live+": 3 deliveries to each of 1 webhook(s)") {
		t.Fatalf("trigger --scenario: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); direct.count() < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if direct.count() != 3 {
		t.Fatalf("the webhook got %d deliveries", direct.count())
	}
	for i := range 3 {
		if direct.verds[i].Result != devhook.VerdictOK || !bytes.Equal(direct.body[i], s.Deliveries[i].Body) ||
			direct.reqs[i].URL.RequestURI() != "/in" || direct.reqs[i].Header.Get("User-Agent") != emulator.UserAgent {
			t.Errorf("delivery %d through the emulator: %s %s %v %q", i+1, direct.verds[i].Result, direct.reqs[i].URL, direct.reqs[i].Header, direct.body[i])
		}
	}
}

// devhook check --junit: a case per case, failures where the handler
// differs; unreachable, one error case.
func TestCheck_JUnit(t *testing.T) {
	wrong := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer wrong.Close()
	file := filepath.Join(t.TempDir(), "check.xml")
	out, _, err := runCmd(t, "", "check", wrong.URL, "--secret", checkSecret, "--junit", file)
	if exitCode(err) != 1 || !strings.Contains(out, "FAIL") {
		t.Fatalf("exit %d (%v)\n%s", exitCode(err), err, out)
	}
	var doc struct {
		Suite struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	b, err := os.ReadFile(file)
	if err != nil || xml.Unmarshal(b, &doc) != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if doc.Suite.Tests != len(check.Cases()) || doc.Suite.Failures == 0 || doc.Suite.Cases[0].Name != "valid" || doc.Suite.Cases[0].Failure == nil ||
		!strings.Contains(doc.Suite.Cases[0].Failure.Message, `the handler answered 401 "Unauthorized: Invalid Time Value"`) {
		t.Errorf("check --junit:\n%s", b)
	}
	down := "http://" + closedAddr(t) + "/webhooks"
	_, _, err = runCmd(t, "", "check", down, "--secret", checkSecret, "--junit", file)
	b, _ = os.ReadFile(file)
	if exitCode(err) != 2 || !strings.Contains(string(b), `<error message="cannot reach the handler at `+down) {
		t.Errorf("unreachable: exit %d\n%s", exitCode(err), b)
	}
}

// A service that does not know the extension answers as for a sample
// event: trigger --scenario says so rather than claim it was played.
func TestTriggerScenario_ServiceWithoutTheExtension(t *testing.T) {
	var got map[string]any
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&got)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"event_type":"run.status","webhooks":1}`)
	}))
	defer svc.Close()
	_, _, err := devhookCmd(t, "trigger", "--scenario", "../../scenario/testdata/run.json", "--endpoint", svc.URL, "--api-key", "k")
	if err == nil || !strings.Contains(err.Error(), "does not play scenarios") {
		t.Fatalf("err %v", err)
	}
	if s, ok := got["scenario"].(map[string]any); !ok || s["devhook_scenario"] != float64(1) || got["event_type"] != "run.status" || got["speed"] != float64(1) {
		t.Errorf("the trigger sent %v", got)
	}
	for _, args := range [][]string{
		{"trigger", "--speed", "2", "--endpoint", svc.URL, "--api-key", "k"},
		{"trigger", "run.created", "--scenario", "../../scenario/testdata/run.json", "--endpoint", svc.URL, "--api-key", "k"},
	} {
		if _, _, err := devhookCmd(t, args...); err == nil {
			t.Errorf("%s: no error", strings.Join(args, " "))
		}
	}
}

// The exit statuses are the process's own: 0, 1 and 2.
func TestScenarioPlay_ExitStatus(t *testing.T) {
	bin := devhookBinary(t)
	const file = "../../scenario/testdata/run.json" // two deliveries recorded 4xx or unanswered: --expect 2xx
	ok := httptest.NewServer(receiver.New(receiver.Config{Secret: checkSecret}))
	defer ok.Close()
	wrong := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer wrong.Close()
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"devhook_scenario": 7}`), 0o644)
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"scenario", "play", file, "--to", ok.URL, "--secret", checkSecret, "--speed", "0", "--expect", "2xx"}, 0, ""},
		{[]string{"scenario", "play", file, "--to", wrong.URL, "--secret", checkSecret, "--speed", "0", "--expect", "2xx"}, 1, "otherwise than expected"},
		{[]string{"scenario", "play", bad, "--to", ok.URL}, 2, "version 7 of the scenario format"},
		{[]string{"scenario", "play", file, "--to", "http://" + closedAddr(t)}, 2, "cannot reach the handler"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[:3], " "), func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("exit status %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.stderr)
			}
		})
	}
}
