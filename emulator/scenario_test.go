package emulator_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/scenario"
)

// scenarioFile is a scenario of three deliveries 100 ms apart: two
// run.status bodies and one that is not UTF-8 (nor JSON), with a repeated
// header and a recorded signature that must not be sent.
func scenarioFile(t *testing.T) ([]byte, []*devhook.Delivery) {
	t.Helper()
	at := time.Now().Add(-time.Hour)
	var ds []*devhook.Delivery
	for i, body := range []string{
		`{"event_type":"run.status","data":{"run_id":"r1","status_v2":"queued"}}`,
		`{"event_type":"run.status", "data": {"run_id":"r1","status_v2":"running"}}`,
		"caf\xe9 \x00 not json",
	} {
		ds = append(ds, &devhook.Delivery{ID: string(rune('a' + i)), ReceivedAt: at.Add(time.Duration(i) * 100 * time.Millisecond),
			Method: "POST", Path: "/recorded/path", RawQuery: "q=1", Body: []byte(body),
			Header: http.Header{"Content-Type": {"application/json"}, "User-Agent": {"service-webhooks/1"}, "X-Trace": {"2", "1"},
				"Service-Signature": {"t=1,v1=00"}}})
	}
	s, _, err := scenario.Build(ds, scenario.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b, ds
}

// The trigger's scenario extension: each delivery to every subscribed
// webhook, in order, at the recorded spacing, its body byte for byte, its
// recorded headers, signed afresh with that webhook's secret; each attempt
// a conversation.
func TestTriggerScenario(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBodyBytes = 512 // a scenario may be larger than other calls
	v := newEnv(t, cfg)
	a, b := newReceiver(t), newReceiver(t)
	v.createWebhook("a", a.srv.URL+"/a")
	v.createWebhook("b", b.srv.URL)
	file, ds := scenarioFile(t)
	if len(file) <= 512 {
		t.Fatalf("the scenario is %d bytes, not over MaxBodyBytes", len(file))
	}
	var trig struct {
		EventType  string `json:"event_type"`
		Webhooks   int    `json:"webhooks"`
		Deliveries int    `json:"deliveries"`
	}
	start := time.Now()
	v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status", "scenario": json.RawMessage(file)}, 202, &trig)
	if trig.EventType != "run.status" || trig.Webhooks != 2 || trig.Deliveries != 3 {
		t.Fatalf("answer %+v", trig)
	}
	for _, rc := range []*receiver{a, b} {
		secret := v.secret(map[*receiver]string{a: "a", b: "b"}[rc])
		for i, want := range ds {
			d := rc.next(t)
			if string(d.body) != string(want.Body) {
				t.Errorf("delivery %d: body %q, want %q", i+1, d.body, want.Body)
			}
			if status, text := checkSignature(secret, d.header.Get("service-signature"), d.body, time.Now().UnixMilli(), 60000); status != 200 {
				t.Errorf("delivery %d: signature %q: %d %s", i+1, d.header.Get("service-signature"), status, text)
			}
			if !reflect.DeepEqual(d.header["X-Trace"], []string{"2", "1"}) || d.header.Get("User-Agent") != "service-webhooks/1" {
				t.Errorf("delivery %d: headers %v", i+1, d.header)
			}
			if since := d.at.Sub(start); since < time.Duration(i)*100*time.Millisecond {
				t.Errorf("delivery %d came %s after the trigger, before its offset", i+1, since)
			}
		}
	}
	items := v.waitConversations("a", 3)
	var detail convDetail
	v.do("GET", "/v1/webhooks/a/conversations/"+items[0].ID, nil, 200, &detail) // newest first: the body that is not JSON
	var text string
	if err := json.Unmarshal(detail.RequestBody, &text); err != nil || detail.Status != "succeeded" || detail.EndpointURL != a.srv.URL+"/a" || text != "caf\uFFFD \x00 not json" {
		t.Errorf("conversation %+v request_body %s (%v)", detail.convItem, detail.RequestBody, err)
	}
}

// speed 0 sends without waiting; a bad scenario, a delivery that is not
// a POST or a bad speed are refused with nothing sent.
func TestTriggerScenario_Refused(t *testing.T) {
	cfg := testConfig()
	v := newEnv(t, cfg)
	rc := newReceiver(t)
	v.createWebhook("a", rc.srv.URL)
	file, _ := scenarioFile(t)
	get := strings.Replace(string(file), `"method": "POST"`, `"method": "GET"`, 1)
	v3 := strings.Replace(string(file), `"devhook_scenario": 1`, `"devhook_scenario": 3`, 1)
	tests := []struct {
		name string
		body map[string]any
		want string
	}{
		{"another version", map[string]any{"event_type": "run.status", "scenario": json.RawMessage(v3)}, "scenario in the request: it is version 3"},
		{"a GET", map[string]any{"event_type": "run.status", "scenario": json.RawMessage(get)}, "delivery 1 is a GET; the service sends only POST"},
		{"no object", map[string]any{"event_type": "run.status", "scenario": "run.json"}, "not a JSON object"},
		{"negative speed", map[string]any{"event_type": "run.status", "scenario": json.RawMessage(file), "speed": -1}, "speed -1"},
		{"speed alone", map[string]any{"event_type": "run.status", "speed": 2}, "speed goes with scenario"},
		{"another event type", map[string]any{"event_type": "run.created", "scenario": json.RawMessage(file)}, "unknown event_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := v.request(testKey, "POST", "/v1/events/trigger", tt.body)
			wantError(t, tt.name, status, body, 400)
			if !strings.Contains(string(body), tt.want) {
				t.Errorf("%s: %s, want %q", tt.name, body, tt.want)
			}
		})
	}
	start := time.Now()
	v.do("POST", "/v1/events/trigger", map[string]any{"event_type": "run.status", "scenario": json.RawMessage(file), "speed": 0}, 202, nil)
	for range 3 {
		rc.next(t)
	}
	if took := time.Since(start); took >= 200*time.Millisecond {
		t.Errorf("speed 0 took %s, no less than the recorded 200 ms", took)
	}
	select {
	case d := <-rc.got:
		t.Errorf("a refused trigger sent %q", d.body)
	default:
	}
}
