package main

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devhook/devhook/cloud"
)

func TestListenRegister(t *testing.T) {
	base, c := newTestService(t)
	recv := httptest.NewServer(&bodies{})
	defer recv.Close()
	data := t.TempDir()
	g := []string{"--forward", recv.URL, "--data", data, "--endpoint", base, "--api-key", svcKey}

	lr := startListen(t, append([]string{"--register"}, g...)...)
	ready := lr.next(t, "ready")
	id, _ := ready["webhook"].(string)
	if !strings.HasPrefix(id, "devhook-") || ready["secret_known"] != true {
		t.Fatalf("ready line %v", ready)
	}
	h, err := c.GetWebhook(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if h.EndpointURL != ready["public_url"] || strings.Join(h.EventTypes, ",") != "run.status" || !strings.Contains(h.Description, host) {
		t.Errorf("webhook %+v", h)
	}
	// A triggered event arrives verified with the fetched secret.
	if _, err := c.Trigger(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	if d := lr.next(t, "delivery"); d["verdict"] != "ok" || d["status"] != float64(200) {
		t.Errorf("delivery %v", d)
	}
	lr.stop(t)
	if _, err := c.GetWebhook(t.Context(), id); !cloud.IsNotFound(err) {
		t.Errorf("the webhook is still there after listen stopped: %v", err)
	}

	// --keep leaves it, and the next start takes it over: still one.
	lr = startListen(t, append([]string{"--register", "--keep"}, g...)...)
	kept := lr.next(t, "ready")["webhook"].(string)
	lr.stop(t)
	lr = startListen(t, append([]string{"--register"}, g...)...)
	if again := lr.next(t, "ready")["webhook"]; again != kept {
		t.Errorf("second start registered %v, not the kept %s", again, kept)
	}
	if ws, _ := c.ListWebhooks(t.Context()); len(ws.Items) != 1 {
		t.Errorf("%d webhooks, want 1", len(ws.Items))
	}
	lr.stop(t)
	if ws, _ := c.ListWebhooks(t.Context()); len(ws.Items) != 0 {
		t.Errorf("%d webhooks left, want 0", len(ws.Items))
	}

	// A saved id whose webhook is gone is created again under that id.
	saved := filepath.Join(data, "webhooks.json")
	os.WriteFile(saved, []byte(`{"`+strings.TrimSuffix(base, "/")+` ": "devhook-gone"}`), 0o600)
	lr = startListen(t, append([]string{"--register"}, g...)...)
	if got := lr.next(t, "ready")["webhook"]; got != "devhook-gone" {
		t.Errorf("registered %v, want the saved devhook-gone", got)
	}
	lr.stop(t)
	if b, _ := os.ReadFile(saved); strings.Contains(string(b), "devhook-gone") {
		t.Errorf("the deleted webhook is still saved: %s", b)
	}
}

func TestListenWebhookUpdateURL(t *testing.T) {
	base, c := newTestService(t)
	recv := httptest.NewServer(&bodies{})
	defer recv.Close()
	if _, err := c.CreateWebhook(t.Context(), cloud.WebhookInput{ID: "mine", EndpointURL: "http://127.0.0.1:9/old", Description: "d"}); err != nil {
		t.Fatal(err)
	}
	g := []string{"--forward", recv.URL, "--data", t.TempDir(), "--endpoint", base, "--api-key", svcKey, "--webhook", "mine"}

	// Without --update-url: the secret only.
	lr := startListen(t, g...)
	if r := lr.next(t, "ready"); r["webhook"] != "mine" || r["secret_known"] != true {
		t.Errorf("ready %v", r)
	}
	lr.stop(t)
	if h, _ := c.GetWebhook(t.Context(), "mine"); h.EndpointURL != "http://127.0.0.1:9/old" {
		t.Errorf("the URL changed without --update-url: %s", h.EndpointURL)
	}

	lr = startListen(t, append(g, "--update-url")...)
	r := lr.next(t, "ready")
	if h, _ := c.GetWebhook(t.Context(), "mine"); h.EndpointURL != r["public_url"] {
		t.Errorf("with --update-url the webhook points at %s, not %v", h.EndpointURL, r["public_url"])
	}
	lr.stop(t)
	if h, _ := c.GetWebhook(t.Context(), "mine"); h.EndpointURL != "http://127.0.0.1:9/old" || h.Description != "d" {
		t.Errorf("after exit the webhook is %+v, want the old URL back", h)
	}
}

func TestListenServiceErrors(t *testing.T) {
	base, _ := newTestService(t)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"register and webhook", []string{"--register", "--webhook", "x"}, []string{"give one of them"}},
		{"register and secret", []string{"--register", "--secret", "s"}, []string{"--secret is not needed"}},
		{"update-url alone", []string{"--update-url"}, []string{"needs --webhook"}},
		{"keep alone", []string{"--keep"}, []string{"needs --register"}},
		{"no endpoint", []string{"--register", "--api-key", "k"}, []string{"no endpoint", "devhook emulate"}},
		{"no key", []string{"--register", "--endpoint", base}, []string{"no API key"}},
		{"wrong key", []string{"--register", "--endpoint", base, "--api-key", "wrong"}, []string{"401", "web console"}},
		{"unknown webhook", []string{"--webhook", "nope", "--endpoint", base, "--api-key", svcKey}, []string{"404", "nope"}},
		// The built-in relay's URL is of no use to a service elsewhere.
		{"local-only relay, remote service", []string{"--register", "--endpoint", "https://service.example.invalid", "--api-key", "k"},
			[]string{"reachable from this machine only", "--relay URL", "devhook emulate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"listen", "--json", "--forward", "127.0.0.1:9", "--data", t.TempDir(), "--relay-addr", "127.0.0.1:0", "--inspect", "off"}, tt.args...)
			cmd := newRootCmd(io.Discard, io.Discard)
			cmd.SetArgs(args)
			err := cmd.ExecuteContext(t.Context())
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// The ready line keeps its contract and adds the webhook; the human form
// says which webhook was registered.
func TestPrinterReadyWebhook(t *testing.T) {
	var b strings.Builder
	p := &printer{w: &b, json: true}
	p.ready(readyInfo{PublicURL: "http://x/c/1", Channel: "1", Webhook: "devhook-1", webhookNote: "registered webhook devhook-1 → http://x/c/1"})
	var m map[string]any
	if err := json.Unmarshal([]byte(b.String()), &m); err != nil || m["event"] != "ready" || m["webhook"] != "devhook-1" || m["public_url"] != "http://x/c/1" {
		t.Errorf("json ready %s (%v)", b.String(), err)
	}
	b.Reset()
	p = &printer{w: &b}
	p.ready(readyInfo{PublicURL: "http://x/c/1", webhookNote: "registered webhook devhook-1 → http://x/c/1"})
	if !strings.HasPrefix(b.String(), "registered webhook devhook-1 → http://x/c/1\ndevhook is listening") {
		t.Errorf("human ready:\n%s", b.String())
	}
}

// A webhooks.json that is not JSON stops listen --register with what to
// do, and is left as it was: it may name a webhook left at the service.
func TestListenRegisterCorruptWebhooksFile(t *testing.T) {
	base, _ := newTestService(t)
	data := t.TempDir()
	path := filepath.Join(data, "webhooks.json")
	if err := os.WriteFile(path, []byte(`{"http://x devhook-`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newRootCmd(io.Discard, io.Discard)
	cmd.SetArgs([]string{"listen", "--register", "--forward", "localhost:1", "--data", data, "--endpoint", base, "--api-key", svcKey,
		"--relay-addr", "127.0.0.1:0", "--inspect", "off", "--json"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "devhook webhooks list") {
		t.Fatalf("listen --register with a corrupt webhooks.json: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != `{"http://x devhook-` {
		t.Fatalf("the corrupt file was changed: %q", b)
	}
}
