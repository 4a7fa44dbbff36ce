package emulator_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

var secondsUTC = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

var eventDataFields = []string{"run_id", "status", "status_v2", "created_at", "duration", "input_size", "output_size",
	"error", "application_id", "application_instance_id", "application_version_id"}

type event struct {
	EventType  string `json:"event_type"`
	APIVersion string `json:"api_version"`
	Data       struct {
		RunID                 string  `json:"run_id"`
		Status                string  `json:"status"`
		StatusV2              string  `json:"status_v2"`
		CreatedAt             string  `json:"created_at"`
		Duration              float64 `json:"duration"`
		InputSize             float64 `json:"input_size"`
		OutputSize            float64 `json:"output_size"`
		Error                 *string `json:"error"`
		ApplicationID         string  `json:"application_id"`
		ApplicationInstanceID string  `json:"application_instance_id"`
		ApplicationVersionID  string  `json:"application_version_id"`
	} `json:"data"`
}

// checkDelivery verifies a delivery's headers, signature and payload shape
// and returns the event.
func checkDelivery(t *testing.T, d delivery, secret string) event {
	t.Helper()
	if ct := d.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if ua := d.header.Get("User-Agent"); ua != "service-webhooks/1" {
		t.Errorf("User-Agent %q", ua)
	}
	sig := d.header.Get("service-signature")
	if status, text := checkSignature(secret, sig, d.body, d.at.UnixMilli(), 5000); status != 200 {
		t.Errorf("signature %q: %d %s", sig, status, text)
	}
	if tms := signatureT(t, sig); tms > d.at.UnixMilli() || tms < d.at.Add(-5*time.Second).UnixMilli() {
		t.Errorf("t=%d is not just before the delivery arrived (%d)", tms, d.at.UnixMilli())
	}
	if status, _ := checkSignature("wrong"+secret, sig, d.body, d.at.UnixMilli(), 5000); status == 200 {
		t.Error("the signature verifies with another secret")
	}
	sameKeys(t, "payload", d.body, "event_type", "api_version", "data")
	var raw struct{ Data json.RawMessage }
	json.Unmarshal(d.body, &raw)
	sameKeys(t, "payload data", raw.Data, eventDataFields...)
	var ev event
	if err := json.Unmarshal(d.body, &ev); err != nil {
		t.Fatalf("payload %s: %v", d.body, err)
	}
	if ev.EventType != "run.status" || ev.APIVersion != "2024-03-04" {
		t.Errorf("event_type %q api_version %q", ev.EventType, ev.APIVersion)
	}
	if !secondsUTC.MatchString(ev.Data.CreatedAt) {
		t.Errorf("data.created_at %q is not ISO 8601 UTC with seconds", ev.Data.CreatedAt)
	}
	if ev.Data.Error != nil || !strings.Contains(string(raw.Data), `"error":null`) {
		t.Errorf("data.error is not null: %s", raw.Data)
	}
	return ev
}

func TestRunDeliveries(t *testing.T) {
	v := newEnv(t, testConfig())
	rc := newReceiver(t)
	v.createWebhook("hook", rc.srv.URL+"/receive")
	other := newReceiver(t)
	// A webhook of another account must not get this account's events.
	status, _, b := v.request("test-key-2", "POST", "/v1/webhooks", webhookBody("theirs", other.srv.URL))
	if status != 201 {
		t.Fatalf("create: %d %s", status, b)
	}
	secret := v.secret("hook")

	var app map[string]any
	v.do("POST", "/v1/applications", map[string]any{"id": "app-1", "name": "App", "description": "d"}, 201, &app)
	input := map[string]any{"items": []any{1.0, 2.0, "three"}}
	var started runRecord
	raw := v.do("POST", "/v1/applications/app-1/runs?instance_id=latest",
		map[string]any{"input": input, "options": map[string]string{"solve.duration": "1s", "alpha": "x"}}, 201, &started)
	checkRunRecord(t, raw, shapeCreated)
	if started.Metadata.StatusV2 != "queued" {
		t.Errorf("started run status_v2 %q, want queued", started.Metadata.StatusV2)
	}

	// Three deliveries, in order, with the status pairs of the interface.
	wantPairs := [][2]string{{"running", "queued"}, {"running", "running"}, {"succeeded", "succeeded"}}
	inputJSON, _ := json.Marshal(input)
	var lastSize float64
	for i, pair := range wantPairs {
		ev := checkDelivery(t, rc.next(t), secret)
		if ev.Data.Status != pair[0] || ev.Data.StatusV2 != pair[1] {
			t.Errorf("delivery %d: status %q status_v2 %q, want %q %q", i, ev.Data.Status, ev.Data.StatusV2, pair[0], pair[1])
		}
		if ev.Data.RunID != started.ID || ev.Data.ApplicationID != "app-1" || ev.Data.ApplicationInstanceID != "latest" || ev.Data.ApplicationVersionID != "" {
			t.Errorf("delivery %d: run %q app %q instance %q version %q", i, ev.Data.RunID, ev.Data.ApplicationID,
				ev.Data.ApplicationInstanceID, ev.Data.ApplicationVersionID)
		}
		if ev.Data.InputSize != float64(len(inputJSON)) {
			t.Errorf("delivery %d: input_size %v, want %d", i, ev.Data.InputSize, len(inputJSON))
		}
		finished := pair[1] == "succeeded"
		if finished != (ev.Data.Duration > 0) || finished != (ev.Data.OutputSize > 0) {
			t.Errorf("delivery %d (%s): duration %v output_size %v; both are zero until finished", i, pair[1], ev.Data.Duration, ev.Data.OutputSize)
		}
		if finished {
			lastSize = ev.Data.OutputSize
		}
	}

	// The run record has finished.
	var done runRecord
	raw = v.do("GET", "/v1/applications/app-1/runs/"+started.ID, nil, 200, &done)
	checkRunRecord(t, raw, shapeFull)
	if done.Metadata.StatusV2 != "succeeded" || !equalJSON(done.Output.Solution, input) {
		t.Errorf("finished run: status_v2 %q solution %v", done.Metadata.StatusV2, done.Output.Solution)
	}
	// output_size counts the whole output as served, in the record and
	// in the delivery alike.
	var served struct{ Output json.RawMessage }
	json.Unmarshal(raw, &served)
	if lastSize != float64(len(served.Output)) || done.Metadata.OutputSize != lastSize {
		t.Errorf("output_size %v in the delivery, %v in the record; the output is %d bytes: %s",
			lastSize, done.Metadata.OutputSize, len(served.Output), served.Output)
	}
	if done.Metadata.Duration < 50 || done.Metadata.ExecutionDuration < 30 || done.Metadata.Duration < done.Metadata.ExecutionDuration {
		t.Errorf("durations %v / %v ms, want at least the schedule's 50 / 30", done.Metadata.Duration, done.Metadata.ExecutionDuration)
	}

	// Three conversations, newest first.
	items := v.waitConversations("hook", 3)
	for i, it := range items {
		if it.WebhookID != "hook" || it.HTTPStatus != 200 || it.Status != "succeeded" || it.Error != nil || it.ResponseDuration != nil {
			t.Errorf("conversation %d: %+v", i, it)
		}
		if !millisUTC.MatchString(it.CreatedAt) || (i > 0 && it.CreatedAt > items[i-1].CreatedAt) {
			t.Errorf("conversation %d created_at %q not newest first", i, it.CreatedAt)
		}
		var d convDetail
		raw := v.do("GET", "/v1/webhooks/hook/conversations/"+it.ID, nil, 200, &d)
		sameKeys(t, "conversation detail", raw, "id", "webhook_id", "created_at", "http_status", "response_duration",
			"error", "status", "endpoint_url", "request_body", "response_body")
		if d.convItem.ResponseDuration == nil || d.EndpointURL != rc.srv.URL+"/receive" || d.ResponseBody != "answer "+string(rune('2'-i)) {
			t.Errorf("detail %d: duration %v endpoint %q response %q", i, d.ResponseDuration, d.EndpointURL, d.ResponseBody)
		}
		var ev event
		json.Unmarshal(d.RequestBody, &ev)
		if want := wantPairs[2-i][1]; ev.Data.StatusV2 != want {
			t.Errorf("conversation %d request_body status_v2 %q, want %q", i, ev.Data.StatusV2, want)
		}
	}
	var list map[string]json.RawMessage
	raw = v.do("GET", "/v1/webhooks/hook/conversations", nil, 200, &list)
	sameKeys(t, "conversation list", raw, "items")
	var rawItems []json.RawMessage
	json.Unmarshal(list["items"], &rawItems)
	sameKeys(t, "conversation item", rawItems[0], "id", "webhook_id", "created_at", "http_status", "response_duration", "error", "status")
	if !strings.Contains(string(rawItems[0]), `"response_duration":null`) {
		t.Errorf("list item response_duration is not null: %s", rawItems[0])
	}
	// A conversation is only reachable through its own webhook.
	v.createWebhook("second", "http://127.0.0.1:9/")
	status, _, b = v.request(testKey, "GET", "/v1/webhooks/second/conversations/"+items[0].ID, nil)
	wantError(t, "conversation of another webhook", status, b, 404)

	select {
	case d := <-other.got:
		t.Errorf("another account's webhook got %s", d.body)
	default:
	}
}

// TestDeliveryOrder holds the receiver's answer to the first delivery: the
// run still finishes on schedule, but the running event is sent only after
// the queued event's attempt has finished.
func TestDeliveryOrder(t *testing.T) {
	v := newEnv(t, testConfig())
	release := make(chan struct{})
	var mu sync.Mutex
	var log []string
	rc := newReceiver(t)
	rc.hold = func(n int, d delivery) {
		var ev event
		json.Unmarshal(d.body, &ev)
		mu.Lock()
		log = append(log, "got "+ev.Data.StatusV2)
		mu.Unlock()
		if n == 0 {
			<-release
		}
		mu.Lock()
		log = append(log, "answered "+ev.Data.StatusV2)
		mu.Unlock()
	}
	v.createWebhook("hook", rc.srv.URL)
	v.do("POST", "/v1/applications", map[string]any{"id": "app", "name": "App", "description": ""}, 201, nil)
	var r runRecord
	v.do("POST", "/v1/applications/app/runs?instance_id=latest", map[string]any{"input": map[string]any{}}, 201, &r)
	rc.next(t)
	eventually(t, func() bool {
		var now runRecord
		v.do("GET", "/v1/applications/app/runs/"+r.ID, nil, 200, &now)
		return now.Metadata.StatusV2 == "succeeded"
	}, "the run to finish while its first delivery is held")
	close(release)
	rc.next(t)
	rc.next(t)
	v.waitConversations("hook", 3)
	mu.Lock()
	defer mu.Unlock()
	want := "got queued,answered queued,got running,answered running,got succeeded,answered succeeded"
	if got := strings.Join(log, ","); got != want {
		t.Errorf("receiver saw %s\nwant %s", got, want)
	}
}

func TestRetries(t *testing.T) {
	t.Run("failing receiver", func(t *testing.T) {
		v := newEnv(t, testConfig())
		rc := newReceiver(t, 500, 503, 200)
		v.createWebhook("hook", rc.srv.URL)
		secret := v.secret("hook")
		var trig map[string]any
		raw := v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, &trig)
		sameKeys(t, "trigger answer", raw, "event_type", "webhooks")
		if trig["event_type"] != "run.status" || trig["webhooks"] != 1.0 {
			t.Errorf("trigger answered %s", raw)
		}
		var bodies []string
		var ts []int64
		for range 3 {
			d := rc.next(t)
			checkDelivery(t, d, secret)
			bodies = append(bodies, string(d.body))
			ts = append(ts, signatureT(t, d.header.Get("service-signature")))
		}
		if bodies[0] != bodies[1] || bodies[1] != bodies[2] {
			t.Error("a retry sent another body")
		}
		if !(ts[0] < ts[1] && ts[1] < ts[2]) {
			t.Errorf("retries are not signed afresh: t %v", ts)
		}
		items := v.waitConversations("hook", 3)
		want := []struct {
			status string
			http   int
			err    string
		}{{"succeeded", 200, ""}, {"failed", 503, "http 503"}, {"failed", 500, "http 500"}}
		for i, w := range want {
			it := items[i]
			if it.Status != w.status || it.HTTPStatus != w.http || (w.err == "") != (it.Error == nil) || (it.Error != nil && *it.Error != w.err) {
				t.Errorf("conversation %d: %+v, want %+v", i, it, w)
			}
			var d convDetail
			v.do("GET", "/v1/webhooks/hook/conversations/"+it.ID, nil, 200, &d)
			if d.ResponseBody != "answer "+string(rune('2'-i)) || string(d.RequestBody) != bodies[0] {
				t.Errorf("conversation %d: response %q request %s", i, d.ResponseBody, d.RequestBody)
			}
		}
	})

	t.Run("connection refused", func(t *testing.T) {
		v := newEnv(t, testConfig())
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		v.createWebhook("hook", dead.URL)
		v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, nil)
		items := v.waitConversations("hook", 3) // the first attempt and two retries
		for i, it := range items {
			if it.Status != "failed" || it.HTTPStatus != 0 || it.Error == nil || *it.Error != "connection refused" {
				t.Errorf("conversation %d: %+v", i, it)
			}
		}
	})

	t.Run("timeout", func(t *testing.T) {
		cfg := testConfig()
		cfg.AttemptTimeout = 50 * time.Millisecond
		cfg.RetryDelays = []time.Duration{}
		v := newEnv(t, cfg)
		stop := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}))
		defer slow.Close()
		defer close(stop)
		v.createWebhook("hook", slow.URL)
		v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, nil)
		it := v.waitConversations("hook", 1)[0]
		if it.Status != "failed" || it.HTTPStatus != 0 || it.Error == nil || *it.Error != "timeout" {
			t.Errorf("conversation %+v", it)
		}
		var d convDetail
		v.do("GET", "/v1/webhooks/hook/conversations/"+it.ID, nil, 200, &d)
		if *d.convItem.ResponseDuration < 50 {
			t.Errorf("response_duration %d ms, want at least the 50 ms timeout", *d.convItem.ResponseDuration)
		}
	})

	t.Run("large answer is cut", func(t *testing.T) {
		v := newEnv(t, testConfig())
		big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(strings.Repeat("b", 100<<10)))
		}))
		defer big.Close()
		v.createWebhook("hook", big.URL)
		v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, nil)
		it := v.waitConversations("hook", 1)[0]
		var d convDetail
		v.do("GET", "/v1/webhooks/hook/conversations/"+it.ID, nil, 200, &d)
		if len(d.ResponseBody) != 64<<10 || it.Status != "succeeded" {
			t.Errorf("kept %d bytes of the answer, status %s", len(d.ResponseBody), it.Status)
		}
	})
}

func TestTrigger(t *testing.T) {
	v := newEnv(t, testConfig())
	a, b := newReceiver(t), newReceiver(t)
	v.createWebhook("a", a.srv.URL)
	v.createWebhook("b", b.srv.URL)
	var trig struct {
		EventType string `json:"event_type"`
		Webhooks  int    `json:"webhooks"`
	}
	v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, &trig)
	if trig.Webhooks != 2 {
		t.Errorf("trigger reached %d webhooks, want 2", trig.Webhooks)
	}
	for _, rc := range []*receiver{a, b} {
		ev := checkDelivery(t, rc.next(t), v.secret(map[*receiver]string{a: "a", b: "b"}[rc]))
		if ev.Data.RunID == "" || ev.Data.ApplicationID == "" || ev.Data.StatusV2 == "" {
			t.Errorf("sample event %+v", ev)
		}
	}
	// With no webhook, the trigger reaches none.
	status, _, body := v.request("test-key-2", "POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"})
	if status != 202 || !strings.Contains(string(body), `"webhooks":0`) {
		t.Errorf("trigger without webhooks: %d %s", status, body)
	}
}

// TestDeleteDuringRetries: deleting a webhook stops its retries and takes
// its conversations; Close stops waiting retries at once.
func TestDeleteDuringRetries(t *testing.T) {
	cfg := testConfig()
	cfg.RetryDelays = []time.Duration{time.Hour}
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()
	v := &env{t: t, e: e, srv: srv}
	rc := newReceiver(t, 500)
	v.createWebhook("hook", rc.srv.URL)
	v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, nil)
	v.waitConversations("hook", 1)
	v.do("DELETE", "/v1/webhooks/hook", nil, 204, nil)
	v.createWebhook("hook", rc.srv.URL)
	if items := v.conversations("hook"); len(items) != 0 {
		t.Errorf("a new webhook with a deleted one's id has %d conversations", len(items))
	}
	closed := make(chan error)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop a delivery waiting to retry")
	}
	// After Close the API still answers, but starts no delivery.
	v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, nil)
}

func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.DataDir = dir
	rc := newReceiver(t)

	e1, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e1)
	v := &env{t: t, e: e1, srv: srv}
	v.createWebhook("hook", rc.srv.URL)
	secret := v.secret("hook")
	v.do("POST", "/v1/applications", map[string]any{"id": "app", "name": "App", "description": ""}, 201, nil)
	var r runRecord
	v.do("POST", "/v1/applications/app/runs?instance_id=latest", map[string]any{"input": map[string]any{"x": 1.0}}, 201, &r)
	for range 3 {
		rc.next(t)
	}
	items := v.waitConversations("hook", 3)
	srv.Close()
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/emulator.db"); err != nil {
		t.Fatal(err)
	}

	v = newEnv(t, cfg)
	if s := v.secret("hook"); s != secret {
		t.Error("the secret changed across a restart")
	}
	if got := v.conversations("hook"); !equalJSON(got, items) {
		t.Errorf("conversations after restart %+v\nwant %+v", got, items)
	}
	var after runRecord
	v.do("GET", "/v1/applications/app/runs/"+r.ID, nil, 200, &after)
	if after.Metadata.StatusV2 != "succeeded" {
		t.Errorf("run after restart: %q", after.Metadata.StatusV2)
	}
	v.do("POST", "/v1/webhooks", webhookBody("hook", rc.srv.URL), 409, nil)
	// The state is still written: a new webhook after the restart is kept too.
	v.createWebhook("later", rc.srv.URL)
	v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, nil)
	rc.next(t)
	rc.next(t)
	v.waitConversations("hook", 4)
}

// TestCloseLeavesNoGoroutines: runs on their schedule, deliveries waiting
// to retry and the delivery client's connections all end with Close.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	cfg := testConfig()
	cfg.RetryDelays = []time.Duration{time.Hour}
	cfg.QueueTime = time.Hour
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	v := &env{t: t, e: e, srv: srv}
	rc := newReceiver(t, 500)
	v.createWebhook("hook", rc.srv.URL)
	v.do("POST", "/v1/applications", map[string]any{"id": "app", "name": "App", "description": ""}, 201, nil)
	v.do("POST", "/v1/applications/app/runs?instance_id=latest", map[string]any{"input": 1}, 201, nil)
	v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status"}, 202, nil)
	v.waitConversations("hook", 2) // both first attempts failed and wait an hour to retry
	noRedirect.CloseIdleConnections()
	srv.Close()
	rc.srv.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return runtime.NumGoroutine() <= base }, "goroutines to end (%d at start)", base)
}
