package cloud_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/emulator"
)

const key = "test-key"

var testTeam = emulator.Team{ID: "team-one-id", Name: "Team One", Role: "admin"}

// newService runs an emulator with short schedules and returns a client of it.
func newService(t *testing.T) (*cloud.Client, *httptest.Server) {
	t.Helper()
	e, err := emulator.New(emulator.Config{APIKeys: []string{key}, QueueTime: 20 * time.Millisecond, RunTime: 20 * time.Millisecond,
		RetryDelays: []time.Duration{}, Teams: []emulator.Team{testTeam, emulator.DefaultTeam()}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		srv.Close()
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

func TestWebhooks(t *testing.T) {
	c, _ := newService(t)
	ctx := t.Context()
	// An id with a slash, a space and a percent sign stays one path segment.
	id := "my hook/with%odd chars"
	w, err := c.CreateWebhook(ctx, cloud.WebhookInput{ID: id, EndpointURL: "http://127.0.0.1:9/a", Description: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != id || w.EndpointURL != "http://127.0.0.1:9/a" || len(w.Raw) == 0 {
		t.Errorf("created %+v", w)
	}
	if got, err := c.GetWebhook(ctx, id); err != nil || got.ID != id || got.Description != "d" {
		t.Errorf("get: %+v %v", got, err)
	}
	in := w.Input()
	in.EndpointURL = "http://127.0.0.1:9/b"
	if got, err := c.UpdateWebhook(ctx, in); err != nil || got.EndpointURL != "http://127.0.0.1:9/b" {
		t.Errorf("update: %+v %v", got, err)
	}
	s, err := c.WebhookSecret(ctx, id)
	if err != nil || s.Secret == "" || s.ID != id {
		t.Errorf("secret: %+v %v", s, err)
	}
	ws, err := c.ListWebhooks(ctx)
	if err != nil || len(ws.Items) != 1 || ws.Items[0].ID != id {
		t.Errorf("list: %+v %v", ws, err)
	}
	if err := c.DeleteWebhook(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetWebhook(ctx, id); !cloud.IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
}

// Each error answer becomes an *auth.HTTPError with the service's message and a
// hint at what to do.
func TestAPIErrors(t *testing.T) {
	c, srv := newService(t)
	ctx := t.Context()
	if _, err := c.CreateWebhook(ctx, cloud.WebhookInput{ID: "dup", EndpointURL: "http://127.0.0.1:9/", Description: ""}); err != nil {
		t.Fatal(err)
	}
	wrongKey, _ := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey("wrong")})
	staleSession, _ := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: sessionToken("expired-access-token")})
	tests := []struct {
		name   string
		call   func() error
		status int
		want   []string
	}{
		{"wrong key", func() error { _, err := wrongKey.ListWebhooks(ctx); return err }, 401,
			[]string{"unknown API key", "account settings in the web console", "--api-key"}},
		{"refused session", func() error { _, err := staleSession.ListWebhooks(ctx); return err }, 401,
			[]string{"signed-in session", "devhook login"}},
		{"unknown webhook", func() error { _, err := c.GetWebhook(ctx, "nope"); return err }, 404,
			[]string{`no webhook with id "nope"`, "devhook webhooks list"}},
		{"duplicate id", func() error {
			_, err := c.CreateWebhook(ctx, cloud.WebhookInput{ID: "dup", EndpointURL: "http://127.0.0.1:9/"})
			return err
		}, 409, []string{"already exists", "choose another"}},
		{"bad field", func() error {
			_, err := c.CreateWebhook(ctx, cloud.WebhookInput{ID: "x", EndpointURL: "not a url"})
			return err
		}, 400, []string{"endpoint_url"}},
		{"unknown conversation", func() error { _, err := c.GetConversation(ctx, "dup", "nope"); return err }, 404, []string{"no conversation"}},
		{"unknown application", func() error { _, err := c.GetApplication(ctx, "nope"); return err }, 404, []string{"devhook apps create"}},
		{"unknown run", func() error { _, err := c.GetRun(ctx, "nope", "r"); return err }, 404, []string{"nope"}},
		{"unknown event type", func() error { _, err := c.Trigger(ctx, "run.other"); return err }, 400, []string{"run.status"}},
		{"unknown team header", func() error { _, err := c.WithTeam("nope").ListWebhooks(ctx); return err }, 401, []string{"--team"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ae *auth.HTTPError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an *auth.HTTPError", err)
			}
			if ae.Status != tt.status {
				t.Errorf("status %d, want %d", ae.Status, tt.status)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
}

func TestNetworkErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, _ := cloud.New(cloud.Config{Endpoint: "http://" + addr, Credentials: cloud.APIKey(key)})
	_, err = c.ListWebhooks(t.Context())
	if err == nil || !strings.Contains(err.Error(), "cannot reach the service at "+addr) {
		t.Errorf("refused: %v", err)
	}

	// A service that never answers: the call's timeout ends it.
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	c, _ = cloud.New(cloud.Config{Endpoint: slow.URL, Credentials: cloud.APIKey(key), Timeout: 100 * time.Millisecond})
	_, err = c.ListWebhooks(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no answer from "+strings.TrimPrefix(slow.URL, "http://")) {
		t.Errorf("timeout: %v", err)
	}
}

// What the client sends: the bearer key, the team header, JSON, escaped ids.
func TestRequestShape(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r)
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	c, _ := cloud.New(cloud.Config{Endpoint: srv.URL + "/base/", Credentials: cloud.APIKey("k"), Team: "tid"})
	if _, err := c.StartRun(t.Context(), "a/b", "dev int", cloud.RunInput{Input: json.RawMessage(`{"x":1}`)}); err == nil {
		t.Error("an answer without a run id is not an error")
	}
	mu.Lock()
	defer mu.Unlock()
	r := got[0]
	if r.Method != "POST" || r.URL.EscapedPath() != "/base/v1/applications/a%2Fb/runs" || r.URL.Query().Get("instance_id") != "dev int" {
		t.Errorf("request %s %s", r.Method, r.URL)
	}
	if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("service-account") != "tid" || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", r.Header)
	}
	if bodies[0] != `{"input":{"x":1}}` {
		t.Errorf("body %s", bodies[0])
	}
}

func TestRunsAndConversations(t *testing.T) {
	c, srv := newService(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	var received []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		received = append(received, string(b))
		mu.Unlock()
		w.Write([]byte("thanks"))
	}))
	defer recv.Close()
	if _, err := c.CreateWebhook(ctx, cloud.WebhookInput{ID: "h", EndpointURL: recv.URL, Description: "test"}); err != nil {
		t.Fatal(err)
	}
	if a, err := c.CreateApplication(ctx, cloud.ApplicationInput{ID: "app", Name: "App"}); err != nil || a.ID != "app" || a.DefaultInstance != "latest" {
		t.Fatalf("create application: %+v %v", a, err)
	}
	if a, err := c.GetApplication(ctx, "app"); err != nil || a.Name != "App" {
		t.Errorf("get application: %+v %v", a, err)
	}
	r, err := c.StartRun(ctx, "app", "", cloud.RunInput{Input: json.RawMessage(`{"hello":"world"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == "" || r.Final() {
		t.Fatalf("started %+v", r)
	}
	var seen []string
	done, err := c.WaitRun(ctx, "app", r.ID, 10*time.Millisecond, func(r cloud.Run) { seen = append(seen, r.Status()) })
	if err != nil {
		t.Fatal(err)
	}
	if !done.Succeeded() || seen[len(seen)-1] != "succeeded" || !strings.Contains(string(done.Output), "world") {
		t.Errorf("waited: %v %s", seen, done.Raw)
	}

	// The three deliveries are conversations, newest first, with the
	// receiver's answer in the detail.
	var cs cloud.Conversations
	for deadline := time.Now().Add(10 * time.Second); ; {
		if cs, err = c.ListConversations(ctx, "h"); err != nil {
			t.Fatal(err)
		}
		if len(cs.Items) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the service
	}
	if len(cs.Items) != 3 {
		t.Fatalf("%d conversations", len(cs.Items))
	}
	cv, err := c.GetConversation(ctx, "h", cs.Items[0].ID)
	if err != nil || cv.HTTPStatus != 200 || cv.ResponseBody != "thanks" || cv.EndpointURL != recv.URL || !strings.Contains(string(cv.RequestBody), "succeeded") {
		t.Errorf("conversation %+v %v", cv, err)
	}

	tr, err := c.Trigger(ctx, "")
	if err != nil || tr.EventType != "run.status" || tr.Webhooks == nil || *tr.Webhooks != 1 {
		t.Errorf("trigger %+v %v", tr, err)
	}
	_ = srv
}

func TestResolveTeam(t *testing.T) {
	c := newTLSService(t, nil) // the organizations call goes over HTTPS only
	tests := []struct{ in, want, err string }{
		{"team-one-id", "team-one-id", ""},
		{"team one", "team-one-id", ""},
		{emulator.DefaultTeam().ID, emulator.DefaultTeam().ID, ""}, // a UUID needs no call
		{"Nobody", "", "Team One (team-one-id)"},
	}
	for _, tt := range tests {
		got, err := c.ResolveTeam(t.Context(), tt.in)
		if got != tt.want || (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ResolveTeam(%q) = %q, %v", tt.in, got, err)
		}
	}
	// Acting for the team: its webhooks are its own.
	team := c.WithTeam("team-one-id")
	if _, err := team.CreateWebhook(t.Context(), cloud.WebhookInput{ID: "t", EndpointURL: "http://127.0.0.1:9/"}); err != nil {
		t.Fatal(err)
	}
	if ws, _ := c.ListWebhooks(t.Context()); len(ws.Items) != 0 {
		t.Errorf("the key's own account sees the team's webhook")
	}
}

// A canceled run is final: WaitRun ends with it, and it did not succeed.
// The record's status_v2 wins over the legacy status.
func TestWaitRunEndsOnCancel(t *testing.T) {
	e, err := emulator.New(emulator.Config{APIKeys: []string{key}, QueueTime: time.Hour, RetryDelays: []time.Duration{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	defer e.Close()
	defer srv.Close()
	c, _ := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key)})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.CreateApplication(ctx, cloud.ApplicationInput{ID: "app", Name: "App"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.StartRun(ctx, "app", "latest", cloud.RunInput{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if r.RunID == "" || r.ID != r.RunID {
		t.Errorf("the start answer's run_id %q is not the run's id %q", r.RunID, r.ID)
	}
	req, _ := http.NewRequest(http.MethodPatch, srv.URL+"/v1/applications/app/runs/"+r.ID+"/cancel", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("cancel: %s", resp.Status)
	}
	done, err := c.WaitRun(ctx, "app", r.ID, 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status() != "canceled" || !done.Final() || done.Succeeded() || done.ErrorText() == "" {
		t.Errorf("canceled run: status %q (legacy %q) error %q", done.Status(), done.Metadata.Status, done.ErrorText())
	}
}

func TestIsFinalStatus(t *testing.T) {
	for s, want := range map[string]bool{"queued": false, "running": false, "succeeded": true, "failed": true,
		"canceled": true, "cancelled": true, "error": true, "": false} {
		if got := cloud.IsFinalStatus(s); got != want {
			t.Errorf("IsFinalStatus(%q) = %v", s, got)
		}
	}
}

// sessionToken stands for a signed-in session's credentials: not an API key.
type sessionToken string

func (s sessionToken) Token(context.Context) (string, error) { return string(s), nil }

// TestLargeOutputAndInput: a run whose output or input is over 5 MiB is
// read as the service's own clients read it: through format=url and a GET
// of the download URL with no credential; GetRun, WaitRun and GetRunInput
// give it whole, the same as inline.
func TestLargeOutputAndInput(t *testing.T) {
	e, err := emulator.New(emulator.Config{APIKeys: []string{key}, QueueTime: 10 * time.Millisecond, RunTime: 10 * time.Millisecond, RetryDelays: []time.Duration{}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string // method, path, query and whether it carried a credential
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" auth="+strconv.FormatBool(r.Header.Get("Authorization") != ""))
		mu.Unlock()
		e.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		e.Close()
	})
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.CreateApplication(ctx, cloud.ApplicationInput{ID: "app", Name: "App"}); err != nil {
		t.Fatal(err)
	}
	input, _ := json.Marshal(map[string]string{"blob": strings.Repeat("y", 6<<20)})
	r, err := c.StartRun(ctx, "app", "", cloud.RunInput{Input: input})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.WaitRun(ctx, "app", r.ID, 10*time.Millisecond, nil)
	if err != nil || !done.Succeeded() {
		t.Fatalf("wait: %v %+v", err, done.Metadata)
	}
	var out struct {
		Solution json.RawMessage `json:"solution"`
	}
	if err := json.Unmarshal(done.Output, &out); err != nil || string(out.Solution) != string(input) {
		t.Fatalf("the output read by WaitRun: %d bytes (%v), want the solution to be the input", len(done.Output), err)
	}
	if size, _ := done.Metadata.OutputSize.Int64(); size != int64(len(done.Output)) {
		t.Errorf("output_size %d, read %d bytes", size, len(done.Output))
	}
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(done.Raw, &rec); err != nil || string(rec["output"]) != string(done.Output) {
		t.Errorf("the raw record does not hold the downloaded output (%v)", err)
	}
	got, err := c.GetRun(ctx, "app", r.ID)
	if err != nil || string(got.Output) != string(done.Output) {
		t.Errorf("GetRun: %v, %d bytes", err, len(got.Output))
	}
	in, err := c.GetRunInput(ctx, "app", r.ID)
	if err != nil || string(in) != string(input) {
		t.Errorf("GetRunInput: %v, %d bytes of %d", err, len(in), len(input))
	}

	mu.Lock()
	defer mu.Unlock()
	var asked, downloaded, inline int
	for _, s := range seen {
		switch {
		case strings.Contains(s, "format=url") && strings.HasSuffix(s, "auth=true"):
			asked++
		case strings.HasPrefix(s, "GET /downloads/") && strings.HasSuffix(s, "auth=false"):
			downloaded++
		case strings.HasPrefix(s, "GET /v1/applications/app/runs/"+r.ID+"?"):
			inline++
		}
	}
	if asked != 3 || downloaded != 3 || inline != 0 {
		t.Errorf("%d reads with format=url, %d downloads without a credential, %d inline reads; want 3, 3, 0:\n%s", asked, downloaded, inline, strings.Join(seen, "\n"))
	}
}
