package emulator_test

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

var (
	millisUTC = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	hexSecret = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

type webhookRecord struct {
	ID          string   `json:"id"`
	EventTypes  []string `json:"event_types"`
	EndpointURL string   `json:"endpoint_url"`
	Description string   `json:"description"`
	CreatedAt   string   `json:"created_at"`
	UpdatedAt   string   `json:"updated_at"`
}

var webhookFields = []string{"id", "event_types", "endpoint_url", "description", "created_at", "updated_at"}

func TestWebhookLifecycle(t *testing.T) {
	clock := newClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	cfg := testConfig()
	cfg.Now = clock.Now
	v := newEnv(t, cfg)

	// Create answers 201 with the record.
	var created webhookRecord
	raw := v.do("POST", "/v1/webhooks", webhookBody("first", "http://127.0.0.1:9/hook"), 201, &created)
	sameKeys(t, "created webhook", raw, webhookFields...)
	want := webhookRecord{ID: "first", EventTypes: []string{"run.status"}, EndpointURL: "http://127.0.0.1:9/hook",
		Description: "test first", CreatedAt: "2026-11-22T10:00:00.000Z", UpdatedAt: "2026-11-22T10:00:00.000Z"}
	if !equalJSON(created, want) {
		t.Errorf("created %+v, want %+v", created, want)
	}
	// Ids are any value: an escaped slash, a space, unicode, 255 characters.
	odd := []string{"a/b c", "ünïcode?&#", strings.Repeat("x", 255), "..", "."}
	for i, id := range odd {
		clock.Advance(time.Second)
		var r webhookRecord
		v.do("POST", "/v1/webhooks", webhookBody(id, "https://example.test/"+string(rune('a'+i))), 201, &r)
		if r.ID != id {
			t.Errorf("created id %q, want %q", r.ID, id)
		}
		var got webhookRecord
		v.do("GET", "/v1/webhooks/"+url.PathEscape(id), nil, 200, &got)
		if got.ID != id {
			t.Errorf("get %q: id %q", id, got.ID)
		}
	}

	// List: {"items": [...]}, oldest first, every field.
	var list struct{ Items []json.RawMessage }
	raw = v.do("GET", "/v1/webhooks", nil, 200, &list)
	sameKeys(t, "list", raw, "items")
	if len(list.Items) != 1+len(odd) {
		t.Fatalf("list has %d items, want %d", len(list.Items), 1+len(odd))
	}
	for i, it := range list.Items {
		sameKeys(t, "list item", it, webhookFields...)
		var r webhookRecord
		json.Unmarshal(it, &r)
		wantID := "first"
		if i > 0 {
			wantID = odd[i-1]
		}
		if r.ID != wantID {
			t.Errorf("list item %d is %q, want %q (oldest first)", i, r.ID, wantID)
		}
		if !millisUTC.MatchString(r.CreatedAt) || !millisUTC.MatchString(r.UpdatedAt) {
			t.Errorf("timestamps %q %q are not ISO 8601 UTC", r.CreatedAt, r.UpdatedAt)
		}
	}

	// The secret: random per webhook, stable for its life (updates too).
	s1 := v.secret("first")
	if !hexSecret.MatchString(s1) {
		t.Errorf("secret %q", s1)
	}
	if s2 := v.secret("a/b c"); s2 == s1 {
		t.Error("two webhooks share a secret")
	}
	var sec map[string]any
	raw = v.do("GET", "/v1/webhooks/first/secret", nil, 200, &sec)
	sameKeys(t, "secret", raw, "id", "secret")

	// Update replaces the writable fields and answers the record.
	clock.Advance(time.Minute)
	var upd webhookRecord
	raw = v.do("PUT", "/v1/webhooks/first", map[string]any{"id": "first", "event_types": []string{"run.status"},
		"endpoint_url": "https://other.test/x", "description": ""}, 200, &upd)
	sameKeys(t, "updated webhook", raw, webhookFields...)
	want = webhookRecord{ID: "first", EventTypes: []string{"run.status"}, EndpointURL: "https://other.test/x",
		Description: "", CreatedAt: "2026-11-22T10:00:00.000Z", UpdatedAt: "2026-11-22T10:01:05.000Z"}
	if !equalJSON(upd, want) {
		t.Errorf("updated %+v, want %+v", upd, want)
	}
	var got webhookRecord
	v.do("GET", "/v1/webhooks/first", nil, 200, &got)
	if !equalJSON(got, want) {
		t.Errorf("get after update %+v, want %+v", got, want)
	}
	if s := v.secret("first"); s != s1 {
		t.Error("the secret changed on update")
	}

	// Delete answers 204 with no body; then everything about it is 404.
	status, _, body := v.request(testKey, "DELETE", "/v1/webhooks/first", nil)
	if status != 204 || len(body) != 0 {
		t.Errorf("delete: %d %q, want 204 and no body", status, body)
	}
	for _, p := range []string{"", "/secret", "/conversations", "/conversations/x"} {
		status, _, body := v.request(testKey, "GET", "/v1/webhooks/first"+p, nil)
		wantError(t, "after delete GET "+p, status, body, 404)
	}
	// The id is free again, with a new secret.
	v.createWebhook("first", "http://127.0.0.1:9/")
	if s := v.secret("first"); s == s1 {
		t.Error("a new webhook with an old id got the old secret")
	}
}

func TestWebhookErrors(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBodyBytes = 4096
	v := newEnv(t, cfg)
	v.createWebhook("exists", "http://127.0.0.1:9/")

	valid := func(change func(m map[string]any)) map[string]any {
		m := webhookBody("new", "https://example.test/hook")
		change(m)
		return m
	}
	tests := []struct {
		name         string
		method, path string
		body         any
		want         int
	}{
		{"not JSON", "POST", "/v1/webhooks", "{", 400},
		{"empty body", "POST", "/v1/webhooks", "", 400},
		{"trailing data", "POST", "/v1/webhooks", `{"id":"a"} {}`, 400},
		{"array body", "POST", "/v1/webhooks", `[]`, 400},
		{"missing id", "POST", "/v1/webhooks", valid(func(m map[string]any) { delete(m, "id") }), 400},
		{"missing event_types", "POST", "/v1/webhooks", valid(func(m map[string]any) { delete(m, "event_types") }), 400},
		{"missing endpoint_url", "POST", "/v1/webhooks", valid(func(m map[string]any) { delete(m, "endpoint_url") }), 400},
		{"missing description", "POST", "/v1/webhooks", valid(func(m map[string]any) { delete(m, "description") }), 400},
		{"null description", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["description"] = nil }), 400},
		{"empty id", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["id"] = "" }), 400},
		{"id of 256", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["id"] = strings.Repeat("é", 256) }), 400},
		{"id a number", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["id"] = 7 }), 400},
		{"empty event_types", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["event_types"] = []string{} }), 400},
		{"other event type", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["event_types"] = []string{"run.status", "run.created"} }), 400},
		{"event_types a string", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["event_types"] = "run.status" }), 400},
		{"relative URL", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["endpoint_url"] = "/hook" }), 400},
		{"ftp URL", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["endpoint_url"] = "ftp://example.test/" }), 400},
		{"no host", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["endpoint_url"] = "http:///x" }), 400},
		{"duplicate id", "POST", "/v1/webhooks", webhookBody("exists", "http://127.0.0.1:9/"), 409},
		{"too large", "POST", "/v1/webhooks", valid(func(m map[string]any) { m["description"] = strings.Repeat("d", 5000) }), 413},
		{"update unknown", "PUT", "/v1/webhooks/nope", webhookBody("nope", "http://127.0.0.1:9/"), 404},
		{"update other id", "PUT", "/v1/webhooks/exists", webhookBody("renamed", "http://127.0.0.1:9/"), 400},
		{"update missing field", "PUT", "/v1/webhooks/exists", map[string]any{"id": "exists", "event_types": []string{"run.status"}, "endpoint_url": "http://127.0.0.1:9/"}, 400},
		{"update bad URL", "PUT", "/v1/webhooks/exists", map[string]any{"id": "exists", "event_types": []string{"run.status"}, "endpoint_url": "nope", "description": ""}, 400},
		{"update too large", "PUT", "/v1/webhooks/exists", strings.Repeat(" ", 5000), 413},
		{"get unknown", "GET", "/v1/webhooks/nope", nil, 404},
		{"delete unknown", "DELETE", "/v1/webhooks/nope", nil, 404},
		{"secret unknown", "GET", "/v1/webhooks/nope/secret", nil, 404},
		{"conversations unknown", "GET", "/v1/webhooks/nope/conversations", nil, 404},
		{"conversation unknown", "GET", "/v1/webhooks/exists/conversations/nope", nil, 404},
		{"unknown path", "GET", "/v1/nothing", nil, 404},
		{"trailing slash", "GET", "/v1/webhooks/exists/", nil, 404},
		{"PATCH webhook", "PATCH", "/v1/webhooks/exists", nil, 405},
		{"DELETE list", "DELETE", "/v1/webhooks", nil, 405},
		{"POST secret", "POST", "/v1/webhooks/exists/secret", nil, 405},
		{"PUT conversations", "PUT", "/v1/webhooks/exists/conversations", nil, 405},
		{"GET trigger", "GET", "/v1/events/trigger", nil, 405},
		{"trigger other type", "POST", "/v1/events/trigger", map[string]any{"event_type": "run.created"}, 400},
		{"trigger no type", "POST", "/v1/events/trigger", map[string]any{}, 400},
		{"trigger not JSON", "POST", "/v1/events/trigger", "x", 400},
		{"trigger too large", "POST", "/v1/events/trigger", `{"event_type":"` + strings.Repeat("r", 5000) + `"}`, 413},
		{"application too large", "POST", "/v1/applications", strings.Repeat(" ", 5000), 413},
		{"run too large", "POST", "/v1/applications/any/runs", strings.Repeat(" ", 5000), 404}, // unknown application first
		{"POST sso", "POST", "/v1/enterprise/sso/domain?domain=x", nil, 405},
		{"POST discovery", "POST", "/.well-known/openid-configuration", nil, 405},
		{"POST authorize", "POST", "/oauth2/authorize", nil, 405},
		{"POST end session", "POST", "/logout", nil, 405},
		{"POST organization", "POST", "/v1/internal/me/organization", nil, 405},
		{"unknown path outside v1", "GET", "/v2/webhooks", nil, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, hdr, body := v.request(testKey, tt.method, tt.path, tt.body)
			wantError(t, tt.name, status, body, tt.want)
			if tt.want == 405 && hdr.Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}
	// Nothing of the failed calls was created or changed.
	var list struct{ Items []webhookRecord }
	v.do("GET", "/v1/webhooks", nil, 200, &list)
	if len(list.Items) != 1 || list.Items[0].EndpointURL != "http://127.0.0.1:9/" {
		t.Errorf("after failed calls: %+v", list.Items)
	}
}

func TestAuthentication(t *testing.T) {
	team := emulator.Team{ID: "6f1c2a9e-0000-4000-8000-000000000001", Name: "Team", Role: "member"}
	cfg := testConfig()
	cfg.Teams = []emulator.Team{team}
	v := newEnv(t, cfg)

	tests := []struct {
		name   string
		header []string
		want   int
	}{
		{"no credential", nil, 401},
		{"empty bearer", []string{"Authorization", "Bearer "}, 401},
		{"basic scheme", []string{"Authorization", "Basic dGVzdDp0ZXN0"}, 401},
		{"key without scheme", []string{"Authorization", testKey}, 401},
		{"unknown key", []string{"Authorization", "Bearer nope"}, 401},
		{"unknown team", []string{"Authorization", "Bearer " + testKey, "service-account", "nope"}, 401},
		{"key", []string{"Authorization", "Bearer " + testKey}, 200},
		{"lowercase scheme", []string{"Authorization", "bearer " + testKey}, 200},
		{"key and team", []string{"Authorization", "Bearer " + testKey, "service-account", team.ID}, 200},
	}
	paths := []struct{ method, path string }{
		{"GET", "/v1/webhooks"}, {"GET", "/v1/internal/me/organization"},
	}
	for _, tt := range tests {
		for _, p := range paths {
			t.Run(tt.name+" "+p.path, func(t *testing.T) {
				status, hdr, body := v.request("", p.method, p.path, nil, tt.header...)
				if tt.want != 200 {
					wantError(t, tt.name, status, body, tt.want)
					if !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
						t.Errorf("401 without WWW-Authenticate: Bearer")
					}
				} else if status != 200 {
					t.Errorf("status %d: %s", status, body)
				}
			})
		}
	}
	// Every API endpoint needs a credential, even for unknown ids.
	for _, p := range []struct{ method, path string }{
		{"POST", "/v1/webhooks"}, {"GET", "/v1/webhooks/x"}, {"PUT", "/v1/webhooks/x"}, {"DELETE", "/v1/webhooks/x"},
		{"GET", "/v1/webhooks/x/secret"}, {"GET", "/v1/webhooks/x/conversations"}, {"GET", "/v1/webhooks/x/conversations/y"},
		{"POST", "/v1/events/trigger"}, {"POST", "/v1/applications"}, {"GET", "/v1/applications/a"},
		{"POST", "/v1/applications/a/runs?instance_id=latest"}, {"GET", "/v1/applications/a/runs/r"},
	} {
		status, _, body := v.request("", p.method, p.path, "{}")
		wantError(t, p.method+" "+p.path, status, body, 401)
	}
}

func TestAccounts(t *testing.T) {
	team := emulator.Team{ID: "6f1c2a9e-0000-4000-8000-000000000002", Name: "Shared", Role: "admin"}
	cfg := testConfig()
	cfg.Teams = []emulator.Team{team}
	v := newEnv(t, cfg)
	body := webhookBody("same-id", "http://127.0.0.1:9/")

	// The same id in three accounts: key 1, key 2, and the team.
	for _, c := range []struct{ key, team string }{{testKey, ""}, {"test-key-2", ""}, {testKey, team.ID}} {
		status, _, b := v.request(c.key, "POST", "/v1/webhooks", body, "service-account", c.team)
		if status != 201 {
			t.Fatalf("create as %s/%s: %d %s", c.key, c.team, status, b)
		}
	}
	// The team's webhook is the same for both keys; a key's own is not.
	secret := func(key, team string) string {
		status, _, b := v.request(key, "GET", "/v1/webhooks/same-id/secret", nil, "service-account", team)
		if status != 200 {
			t.Fatalf("secret as %s/%s: %d %s", key, team, status, b)
		}
		var s struct{ Secret string }
		json.Unmarshal(b, &s)
		return s.Secret
	}
	if secret(testKey, team.ID) != secret("test-key-2", team.ID) {
		t.Error("the team's webhook differs between keys")
	}
	if secret(testKey, "") == secret("test-key-2", "") || secret(testKey, "") == secret(testKey, team.ID) {
		t.Error("accounts share a webhook")
	}
	status, _, b := v.request("test-key-2", "DELETE", "/v1/webhooks/same-id", nil, "service-account", team.ID)
	if status != 204 {
		t.Fatalf("delete as team: %d %s", status, b)
	}
	for _, key := range []string{testKey, "test-key-2"} {
		var l struct{ Items []webhookRecord }
		_, _, b := v.request(key, "GET", "/v1/webhooks", nil)
		json.Unmarshal(b, &l)
		if len(l.Items) != 1 {
			t.Errorf("%s's own webhooks: %d, want 1", key, len(l.Items))
		}
	}
}

func TestGeneratedKey(t *testing.T) {
	e, err := emulator.New(emulator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	keys := e.APIKeys()
	if len(keys) != 1 || len(keys[0]) < 32 {
		t.Fatalf("generated keys %q", keys)
	}
	for _, cfg := range []emulator.Config{
		{APIKeys: []string{""}},
		{APIKeys: []string{"has space"}},
		{RetryDelays: []time.Duration{-time.Second}},
		{BaseURL: "ftp://x"},
		{Teams: []emulator.Team{{Name: "no id"}}},
	} {
		if e, err := emulator.New(cfg); err == nil {
			e.Close()
			t.Errorf("New(%+v) accepted a bad config", cfg)
		}
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
