package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devhook/devhook/cloud"
)

// completed is what devhook __complete answered: the candidates' values
// and descriptions, in order, and the directive.
type completed struct {
	values, descs []string
	directive     cobra.ShellCompDirective
}

// parseCompletion reads __complete's output: "value\tdescription" lines,
// then ":DIRECTIVE".
func parseCompletion(t *testing.T, out string) completed {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	last := lines[len(lines)-1]
	n, err := strconv.Atoi(strings.TrimPrefix(last, ":"))
	if !strings.HasPrefix(last, ":") || err != nil {
		t.Fatalf("__complete's last line is %q, not :DIRECTIVE; output:\n%s", last, out)
	}
	c := completed{directive: cobra.ShellCompDirective(n)}
	for _, l := range lines[:len(lines)-1] {
		v, d, _ := strings.Cut(l, "\t")
		c.values = append(c.values, v)
		c.descs = append(c.descs, d)
	}
	return c
}

// completeHere runs devhook __complete WORDS... in this process.
func completeHere(t *testing.T, words ...string) completed {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd(&out, &errb)
	cmd.SetArgs(append([]string{cobra.ShellCompRequestCmd}, words...))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("__complete %q: %v", words, err)
	}
	return parseCompletion(t, out.String())
}

const noFiles = cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder

// Every flag that takes a value has a completion function, and every
// command that takes arguments completes them: a flag added without one
// fails here, so that whoever adds it decides what TAB offers (a list, a
// file, or nothing but no file names either).
func TestCompletion_EveryFlagAndArgumentDecided(t *testing.T) {
	root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Value.Type() == "bool" {
				return
			}
			if _, ok := c.GetFlagCompletionFunc(f.Name); !ok {
				t.Errorf("%s --%s (%s) has no completion: add it to flagCompletions in completion.go (free text too)", c.CommandPath(), f.Name, f.Value.Type())
			}
		})
		if !c.HasSubCommands() && c.Runnable() && (c.Args == nil || c.Args(c, []string{"x"}) == nil) && c.ValidArgsFunction == nil {
			t.Errorf("%s takes arguments and does not complete them: add it to argCompletions in completion.go", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func TestCompletion_FixedSets(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	for _, tc := range []struct {
		words     []string
		want      []string // exactly, in this order
		directive cobra.ShellCompDirective
	}{
		{[]string{"listen", "--verify", ""}, []string{"report", "enforce", "off"}, noFiles},
		{[]string{"listen", "--verify", "e"}, []string{"enforce"}, noFiles},
		{[]string{"deliveries", "export", "--format", ""}, []string{"curl", "har", "scenario"}, noFiles},
		{[]string{"send", "--status", ""}, []string{"queued", "running", "succeeded", "failed", "canceled"}, noFiles},
		{[]string{"deliveries", "list", "--status-v2", "s"}, []string{"succeeded"}, noFiles},
		{[]string{"deliveries", "list", "--verdict", "invalid_"}, []string{"invalid_signature", "invalid_time", "invalid_format"}, noFiles},
		{[]string{"listen", "--inspect", ""}, []string{"off"}, noFiles},
		{[]string{"runs", "start", "my-app", "--instance", ""}, []string{"latest", "devint"}, noFiles},
		{[]string{"webhooks", "create", "--event-type", ""}, []string{"run.status"}, noFiles},
		{[]string{"trigger", ""}, []string{"run.status"}, noFiles},
		{[]string{"scenario", "play", "run.json", "--expect", ""}, []string{"recorded", "2xx", "3xx", "4xx", "5xx"}, noFiles},
		{[]string{"listen", "--route", ""}, []string{"path:", "json:", "header:"}, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace},
		// Numbers, durations and free text: nothing, and no file names.
		{[]string{"deliveries", "list", "--limit", ""}, nil, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"listen", "--timeout", ""}, nil, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"listen", "--secret", ""}, nil, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"check", ""}, nil, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"deliveries", "show", "ID", ""}, nil, cobra.ShellCompDirectiveNoFileComp}, // one ID only
		// Files and directories: the shell's.
		{[]string{"listen", "--data", ""}, nil, cobra.ShellCompDirectiveFilterDirs},
		{[]string{"relay", "parked", "list", "--data", ""}, nil, cobra.ShellCompDirectiveFilterDirs},
		{[]string{"apps", "push", "--app", "a", ""}, nil, cobra.ShellCompDirectiveFilterDirs},
		// A required flag missing: cobra offers it, and the shell shows it.
		{[]string{"apps", "push", ""}, []string{"--app"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"scenario", "play", ""}, []string{"--to"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"listen", "--routes", ""}, nil, cobra.ShellCompDirectiveDefault},
		{[]string{"check", "http://x", "--junit", ""}, nil, cobra.ShellCompDirectiveDefault},
		{[]string{"send", "--body", ""}, nil, cobra.ShellCompDirectiveDefault},
		{[]string{"scenario", "play", "--to", "x", ""}, []string{"json"}, cobra.ShellCompDirectiveFilterFileExt},
	} {
		got := completeHere(t, tc.words...)
		if !slices.Equal(got.values, tc.want) || got.directive != tc.directive {
			t.Errorf("%q: %q directive %d, want %q directive %d", tc.words, got.values, got.directive, tc.want, tc.directive)
		}
	}
	got := completeHere(t, "scenario", "save", "run.json", "--redact", "$.data.run")
	if !slices.Equal(got.values, []string{"$.data.run_id"}) {
		t.Errorf("--redact $.data.run: %q", got.values)
	}
}

// Profiles and sessions come from ~/.service: the configuration file's
// profiles, and the sessions with stored tokens.
func TestCompletion_ProfilesAndSessions(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	if got := completeHere(t, "webhooks", "list", "--profile", ""); len(got.values) != 0 || got.directive != noFiles {
		t.Errorf("--profile without a configuration file: %q %d", got.values, got.directive)
	}
	svc := filepath.Join(home, ".service")
	writeFile(t, filepath.Join(svc, "config.yaml"), "endpoint: https://api.example.test\nprofiles:\n  staging:\n    endpoint: https://staging.example.test\n  local:\n    endpoint: http://127.0.0.1:4010\n")
	got := completeHere(t, "webhooks", "list", "--profile", "")
	if !slices.Equal(got.values, []string{"local", "staging"}) || got.descs[1] != "https://staging.example.test" {
		t.Errorf("--profile: %q %q", got.values, got.descs)
	}
	if got := completeHere(t, "listen", "--profile", "s"); !slices.Equal(got.values, []string{"staging"}) {
		t.Errorf("listen --profile s: %q", got.values)
	}
	writeFile(t, filepath.Join(svc, "auth", "work", "tokens.json"), `{"access_token":"a","expires_at":"2000-01-01T00:00:00Z"}`)
	writeFile(t, filepath.Join(svc, "auth", "default", "tokens.json"), `{"access_token":"b"}`)
	os.MkdirAll(filepath.Join(svc, "auth", "empty"), 0o700)
	got = completeHere(t, "login", "--session", "")
	if !slices.Equal(got.values, []string{"default", "work"}) || !strings.Contains(got.descs[1], "expired") {
		t.Errorf("--session: %q %q", got.values, got.descs)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Webhook and conversation ids come from the service when an API key is
// configured; without one, or with the service down, completion offers
// nothing and says nothing.
func TestCompletion_ServiceIDs(t *testing.T) {
	base, c := newTestService(t)
	ctx := context.Background()
	for _, w := range []cloud.WebhookInput{{ID: "hook-a", EndpointURL: "http://127.0.0.1:9/a"}, {ID: "hook-b", EndpointURL: "http://127.0.0.1:9/b"}} {
		if _, err := c.CreateWebhook(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	got := completeHere(t, "webhooks", "get", "--endpoint", base, "--api-key", svcKey, "")
	if !slices.Equal(got.values, []string{"hook-a", "hook-b"}) || got.descs[0] != "http://127.0.0.1:9/a" || got.directive != noFiles {
		t.Errorf("webhooks get: %q %q %d", got.values, got.descs, got.directive)
	}
	t.Setenv(cloud.EnvEndpoint, base)
	t.Setenv(cloud.EnvAPIKey, svcKey)
	if got := completeHere(t, "webhooks", "delete", "hook-a", ""); !slices.Equal(got.values, []string{"hook-b"}) {
		t.Errorf("webhooks delete hook-a: %q, want the other one", got.values)
	}
	if got := completeHere(t, "listen", "--webhook", "hook-b"); !slices.Equal(got.values, []string{"hook-b"}) {
		t.Errorf("listen --webhook: %q", got.values)
	}
	if _, err := c.Trigger(ctx, "run.status"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a conversation of hook-a", func() bool {
		cs, err := c.ListConversations(ctx, "hook-a")
		return err == nil && len(cs.Items) > 0
	})
	cs, _ := c.ListConversations(ctx, "hook-a")
	if got := completeHere(t, "conversations", "get", "hook-a", ""); len(got.values) == 0 || got.values[0] != cs.Items[0].ID {
		t.Errorf("conversations get hook-a: %q, want %s first", got.values, cs.Items[0].ID)
	}

	// Not configured, or down: nothing.
	t.Setenv(cloud.EnvEndpoint, "")
	t.Setenv(cloud.EnvAPIKey, "")
	if got := completeHere(t, "webhooks", "get", ""); len(got.values) != 0 || got.directive != noFiles {
		t.Errorf("webhooks get, not configured: %q %d", got.values, got.directive)
	}
	if got := completeHere(t, "webhooks", "get", "--endpoint", "http://"+closedAddr(t), "--api-key", "k", ""); len(got.values) != 0 || got.directive != noFiles {
		t.Errorf("webhooks get, service down: %q %d", got.values, got.directive)
	}
}

// A sign-in whose access token expired is not refreshed by completion: a
// refresh cut short (the completion's deadline, a Ctrl-C) could spend a
// refresh token the identity provider rotates, and end the session.
func TestCompletion_NeverRefreshesASession(t *testing.T) {
	var calls atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"new","refresh_token":"r2","expires_in":3600,"token_type":"Bearer"}`)
	}))
	defer idp.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, `{"items":[{"id":"hook-secret"}]}`)
	}))
	defer api.Close()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv(cloud.EnvAPIKey, "")
	tokens := filepath.Join(home, ".service", "auth", "default", "tokens.json")
	rec, _ := json.Marshal(map[string]any{"access_token": "old", "refresh_token": "r1", "expires_at": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339),
		"token_endpoint": idp.URL + "/token", "client_id": "devhook-cli"})
	writeFile(t, tokens, string(rec))
	if got := completeHere(t, "webhooks", "get", "--endpoint", api.URL, ""); len(got.values) != 0 {
		t.Errorf("with an expired sign-in: %q", got.values)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("completion made %d requests with an expired sign-in, want none", n)
	}
	if b, _ := os.ReadFile(tokens); !bytes.Equal(b, rec) {
		t.Errorf("the token file changed: %s", b)
	}
	// Unexpired, it is used as it is.
	rec, _ = json.Marshal(map[string]any{"access_token": "fresh", "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	writeFile(t, tokens, string(rec))
	if got := completeHere(t, "webhooks", "get", "--endpoint", api.URL, ""); !slices.Equal(got.values, []string{"hook-secret"}) {
		t.Errorf("with an unexpired sign-in: %q", got.values)
	}
}

// A stopped relay's parked deliveries and their channels; nothing while
// the relay runs (it holds relay.db) or for a cluster's.
func TestCompletion_ParkedDeliveries(t *testing.T) {
	dir := t.TempDir()
	db := mustRelayStore(t, dir)
	ids := parkSome(t, db) // parked, queued, parked
	if got := completeHere(t, "relay", "parked", "show", "--data", dir, ""); len(got.values) != 0 || got.directive != noFiles {
		t.Errorf("while the relay holds relay.db: %q %d", got.values, got.directive)
	}
	db.Close()
	got := completeHere(t, "relay", "parked", "drop", "--data", dir, "")
	if slices.Sort(got.values); !slices.Equal(got.values, slices.Sorted(slices.Values([]string{ids[0], ids[2]}))) ||
		!strings.Contains(got.descs[0], "cannot be sent to the agent") {
		t.Errorf("relay parked drop: %q %q, want %s and %s", got.values, got.descs, ids[0], ids[2])
	}
	if got := completeHere(t, "relay", "parked", "list", "--data", dir, "--channel", "b"); !slices.Equal(got.values, []string{"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}) {
		t.Errorf("--channel b: %q", got.values)
	}
	if got := completeHere(t, "relay", "parked", "show", "--nats", "nats://127.0.0.1:1", ""); len(got.values) != 0 {
		t.Errorf("--nats: %q", got.values)
	}
}
