package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/emulator"
)

const svcKey = "cmd-test-key"

// svcTeam's id is a UUID, as the service's are: an id that is one is sent
// without a lookup, so it works on an http:// endpoint too.
var svcTeam = emulator.Team{ID: "5b0f3c2e-8a44-4c1e-9a57-2f1d6b7c9e10", Name: "Team A", Role: "admin"}

// newTestService runs an emulator with short runs, and points HOME at an
// empty directory and the SERVICE_ variables at nothing, so that no test
// reads the real ~/.service.
func newTestService(t *testing.T) (string, *cloud.Client) {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	for _, k := range []string{cloud.EnvAPIKey, cloud.EnvEndpoint, cloud.EnvProfile, cloud.EnvSystemCerts} {
		t.Setenv(k, "")
	}
	e, err := emulator.New(emulator.Config{APIKeys: []string{svcKey}, QueueTime: 20 * time.Millisecond, RunTime: 20 * time.Millisecond,
		RetryDelays: []time.Duration{}, Teams: []emulator.Team{svcTeam}})
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
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(svcKey)})
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL, c
}

// runCmd runs the command in this process and returns what it printed.
func runCmd(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd(&out, &errb)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// step is one command and what it must print, or the error it must give.
type step struct {
	args    []string
	stdin   string
	want    []string // in stdout
	wantErr []string // in the error; none means it must succeed
}

func runSteps(t *testing.T, steps []step) {
	t.Helper()
	for _, s := range steps {
		out, _, err := runCmd(t, s.stdin, s.args...)
		name := strings.Join(s.args, " ")
		if len(s.wantErr) == 0 && err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(s.wantErr) > 0 {
			if err == nil {
				t.Errorf("%s: no error; printed %s", name, out)
				continue
			}
			for _, w := range s.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not say %q", name, err, w)
				}
			}
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output does not have %q:\n%s", name, w, out)
			}
		}
	}
}

func TestWebhooksCommands(t *testing.T) {
	base, _ := newTestService(t)
	g := []string{"--endpoint", base, "--api-key", svcKey}
	cmd := func(args ...string) []string { return append(args, g...) }
	odd := "hook/with space"
	runSteps(t, []step{
		{args: cmd("webhooks", "list"), want: []string{"no webhooks"}},
		{args: cmd("webhooks", "create", odd, "--url", "http://127.0.0.1:9/a", "--description", "mine"),
			want: []string{"created webhook hook/with space → http://127.0.0.1:9/a", "devhook webhooks secret 'hook/with space'"}},
		{args: cmd("webhooks", "create", odd, "--url", "http://127.0.0.1:9/a"), wantErr: []string{"409", "already exists", "choose another"}},
		{args: cmd("webhooks", "create", "bad", "--url", "nope"), wantErr: []string{"400", "endpoint_url"}},
		{args: cmd("webhooks", "create", "bad", "--url", "http://x/", "--event-type", "run.other"), wantErr: []string{"400", "run.other"}},
		{args: cmd("webhooks", "list"), want: []string{"ID", "ENDPOINT URL", odd, "http://127.0.0.1:9/a", "run.status", "mine"}},
		{args: cmd("webhooks", "list", "--json"), want: []string{`"items": [`, `"id": "hook/with space"`}},
		{args: cmd("webhooks", "get", odd), want: []string{"endpoint_url", "http://127.0.0.1:9/a", "description", "mine"}},
		{args: cmd("webhooks", "get", odd, "--json"), want: []string{`"created_at"`}},
		{args: cmd("webhooks", "get", "nope"), wantErr: []string{"404", `no webhook with id "nope"`, "devhook webhooks list"}},
		{args: cmd("webhooks", "update", odd, "--url", "http://127.0.0.1:9/b"), want: []string{"http://127.0.0.1:9/b", "mine"}},
		{args: cmd("webhooks", "update", odd), wantErr: []string{"nothing to change"}},
		{args: cmd("webhooks", "update", "nope", "--url", "http://x/"), wantErr: []string{"404"}},
		{args: cmd("webhooks", "secret", odd), want: []string{"\n"}},
		{args: cmd("webhooks", "secret", odd, "--json"), want: []string{`"secret"`}},
		{args: cmd("webhooks", "secret", "nope"), wantErr: []string{"404"}},
		{args: cmd("conversations", "list", odd), want: []string{"no conversations yet"}},
		{args: cmd("conversations", "list", "nope"), wantErr: []string{"404"}},
		{args: cmd("conversations", "get", odd, "nope"), wantErr: []string{"404", "no conversation"}},
		{args: cmd("trigger"), want: []string{"triggered run.status: sent to 1 webhook(s)"}},
		{args: cmd("trigger", "run.status", "--json"), want: []string{`"webhooks": 1`}},
		{args: cmd("trigger", "run.other"), wantErr: []string{"400", "run.status"}},
		{args: cmd("webhooks", "delete", odd), want: []string{"deleted webhook hook/with space"}},
		{args: cmd("webhooks", "delete", odd), wantErr: []string{"404"}},
		{args: []string{"webhooks", "list", "--endpoint", base, "--api-key", "wrong"}, wantErr: []string{"401", "web console", "--api-key"}},
	})
	// A created id by default is devhook-<random>.
	out, _, err := runCmd(t, "", cmd("webhooks", "create", "--url", "http://127.0.0.1:9/")...)
	if err != nil || !strings.HasPrefix(out, "created webhook devhook-") {
		t.Errorf("create without id: %q %v", out, err)
	}
}

func TestConversationsCommands(t *testing.T) {
	base, c := newTestService(t)
	recv := httptest.NewServer(&bodies{})
	defer recv.Close()
	if _, err := c.CreateWebhook(t.Context(), cloud.WebhookInput{ID: "h", EndpointURL: recv.URL, Description: ""}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Trigger(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	var cs cloud.Conversations
	waitUntil(t, "a conversation", func() bool {
		cs, _ = c.ListConversations(t.Context(), "h")
		return len(cs.Items) == 1
	})
	g := []string{"--endpoint", base, "--api-key", svcKey}
	runSteps(t, []step{
		{args: append([]string{"conversations", "list", "h"}, g...), want: []string{"STATUS", cs.Items[0].ID, "succeeded", "200"}},
		{args: append([]string{"conversations", "list", "h", "--json"}, g...), want: []string{`"webhook_id": "h"`}},
		{args: append([]string{"conversations", "get", "h", cs.Items[0].ID}, g...),
			want: []string{"endpoint_url", recv.URL, "request body:", `"event_type": "run.status"`, "response body:\nok"}},
		{args: append([]string{"conversations", "get", "h", cs.Items[0].ID, "--json"}, g...), want: []string{`"response_body": "ok"`}},
	})
}

func TestAppsAndRunsCommands(t *testing.T) {
	base, _ := newTestService(t)
	t.Setenv(cloud.EnvEndpoint, base)
	t.Setenv(cloud.EnvAPIKey, svcKey)
	input := filepath.Join(t.TempDir(), "input.json")
	os.WriteFile(input, []byte(`{"hello":"file"}`), 0o600)
	notJSON := filepath.Join(t.TempDir(), "input.txt")
	os.WriteFile(notJSON, []byte(`hello`), 0o600)
	runSteps(t, []step{
		{args: []string{"apps", "create", "app", "--name", "My app"}, want: []string{"created application app", "devhook runs start app"}},
		{args: []string{"apps", "create", "app"}, wantErr: []string{"409", "already exists"}},
		{args: []string{"apps", "get", "app"}, want: []string{"My app", "default_instance", "latest"}},
		{args: []string{"apps", "get", "app", "--json"}, want: []string{`"type": "custom"`}},
		{args: []string{"apps", "get", "nope"}, wantErr: []string{"404", "devhook apps create"}},
		{args: []string{"runs", "start", "app", "--input", input, "--wait", "--poll", "10ms"},
			want: []string{"status       succeeded", `"hello": "file"`}},
		{args: []string{"runs", "start", "app", "--input", "-", "--wait", "--poll", "10ms", "--json"}, stdin: `{"hello":"stdin"}`,
			want: []string{`"status_v2": "succeeded"`, `"hello": "stdin"`}},
		{args: []string{"runs", "start", "app", "--input", "-", "--json"}, stdin: `[1]`, want: []string{`"status_v2": "queued"`}},
		{args: []string{"runs", "start", "app", "--input", notJSON}, wantErr: []string{"not JSON"}},
		{args: []string{"runs", "start", "app", "--input", filepath.Join(t.TempDir(), "none")}, wantErr: []string{"read the run's input"}},
		{args: []string{"runs", "start", "app", "--input", input, "--option", "novalue"}, wantErr: []string{"NAME=VALUE"}},
		{args: []string{"runs", "start", "nope", "--input", input}, wantErr: []string{"404"}},
		{args: []string{"runs", "start", "app", "--input", input, "--instance", "nope"}, wantErr: []string{"404", "nope"}},
		{args: []string{"runs", "get", "app", "nope"}, wantErr: []string{"404"}},
	})

	// start prints the run id alone; get reads it.
	out, _, err := runCmd(t, "", "runs", "start", "app", "--input", input, "--option", "duration=1s")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	if strings.ContainsAny(id, " \n") || id == "" {
		t.Fatalf("runs start printed %q, not a run id", out)
	}
	waitUntil(t, "the run to succeed", func() bool {
		out, _, err := runCmd(t, "", "runs", "get", "app", id)
		return err == nil && strings.Contains(out, "succeeded")
	})
	out, _, _ = runCmd(t, "", "runs", "get", "app", id, "--json")
	var rec map[string]any
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec["id"] != id {
		t.Errorf("runs get --json: %v %s", err, out)
	}
}

// Settings come from flag, then environment, then the profile; the team
// by name; and each missing or broken setting is a clear error.
func TestCloudSettings(t *testing.T) {
	base, c := newTestService(t)
	home := os.Getenv("HOME")
	if _, err := c.WithTeam(svcTeam.ID).CreateWebhook(t.Context(), cloud.WebhookInput{ID: "team-hook", EndpointURL: "http://127.0.0.1:9/"}); err != nil {
		t.Fatal(err)
	}
	writeServiceConfig := func(text string) {
		os.MkdirAll(filepath.Join(home, ".service"), 0o700)
		if err := os.WriteFile(filepath.Join(home, ".service", "config.yaml"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	runSteps(t, []step{
		{args: []string{"webhooks", "list"}, wantErr: []string{"no endpoint", "--endpoint", "SERVICE_ENDPOINT", "devhook emulate"}},
		{args: []string{"webhooks", "list", "--endpoint", base}, wantErr: []string{"no API key", "--api-key", "SERVICE_API_KEY", "web console"}},
		{args: []string{"webhooks", "list", "--endpoint", "http://127.0.0.1:1", "--api-key", "k"}, wantErr: []string{"cannot reach the service at 127.0.0.1:1"}},
		{args: []string{"webhooks", "list", "--endpoint", base, "--api-key", svcKey, "--team", svcTeam.ID}, want: []string{"team-hook"}},
		// A team's name is looked up with the organizations call, over
		// HTTPS only, as devhook orgs: not over base's plain http.
		{args: []string{"webhooks", "list", "--endpoint", base, "--api-key", svcKey, "--team", "Team A"},
			wantErr: []string{`look up team "Team A"`, "HTTPS only", "give the team's id", "(from --team)"}},
	})

	writeServiceConfig("apikey: wrong\nendpoint: " + base + "\nteam: " + svcTeam.ID + "\nprofiles:\n  good:\n    apikey: " + svcKey + "\n    endpoint: " + base + "\n")
	runSteps(t, []step{
		{args: []string{"webhooks", "list"}, wantErr: []string{"401"}},                           // the default profile's key
		{args: []string{"webhooks", "list", "--api-key", svcKey}, want: []string{"team-hook"}},   // flag over profile; the profile's team
		{args: []string{"webhooks", "list", "--profile", "good"}, want: []string{"no webhooks"}}, // a named profile
		{args: []string{"webhooks", "list", "--profile", "bad"}, wantErr: []string{`no profile "bad"`, "good"}},
	})
	t.Setenv(cloud.EnvProfile, "good")
	runSteps(t, []step{{args: []string{"webhooks", "list"}, want: []string{"no webhooks"}}})
	t.Setenv(cloud.EnvAPIKey, "wrong")
	runSteps(t, []step{{args: []string{"webhooks", "list"}, wantErr: []string{"401"}}}) // environment over profile

	writeServiceConfig("apikey: k\nendpoint: [oops\n")
	runSteps(t, []step{{args: []string{"webhooks", "list"}, wantErr: []string{filepath.Join(home, ".service", "config.yaml"), "line"}}})
}

// runs start --wait prints the run's id at once, on standard error, so
// that an interrupt leaves it on screen, and then in the result; not on
// every status line. Canceling the run once it has ended says so, in the
// service's words and what they mean, not that an id is taken.
func TestRunsStartWaitPrintsTheIDAtOnceAndInTheResult(t *testing.T) {
	base, _ := newTestService(t)
	t.Setenv(cloud.EnvEndpoint, base)
	t.Setenv(cloud.EnvAPIKey, svcKey)
	if _, _, err := runCmd(t, "", "apps", "create", "app"); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runCmd(t, `{"x":1}`, "runs", "start", "app", "--input", "-", "--wait", "--poll", "10ms")
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr)
	}
	var id string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "run" {
			id = f[1]
		}
	}
	first, _, _ := strings.Cut(stderr, "\n")
	if id == "" || strings.Count(out, id) != 1 || strings.Count(stderr, id) != 1 || first != "started run "+id+" of app on instance latest; waiting for it to end" {
		t.Fatalf("run id %q: want it once in the result and once at the start of standard error:\n%s\n%s", id, out, stderr)
	}
	if !strings.Contains(stderr, "succeeded") && !strings.Contains(out, "succeeded") {
		t.Errorf("no status shown:\n%s%s", out, stderr)
	}
	_, _, err = runCmd(t, "", "runs", "cancel", "app", id)
	if err == nil || !strings.Contains(err.Error(), "409 Conflict: ") ||
		!strings.Contains(err.Error(), "the run has ended already, so there is nothing to cancel: devhook runs get app "+id) || strings.Contains(err.Error(), "id is taken") {
		t.Errorf("runs cancel of a run that succeeded: %v", err)
	}
}

// --team NAME is looked up over HTTPS, as devhook orgs does: against
// devhook emulate --tls, its CA trusted through the system-certs switch,
// a team's name resolves to its id, and a name it does not know is said
// so with the teams it does.
func TestTeamByName_OverHTTPS(t *testing.T) {
	bin := devhookBinary(t)
	emu, _ := startEmulate(t, "--tls", "--team", "team-tls=Team TLS")
	base, ca, key := emu["base"], emu["ca"], emu["key"]
	if !strings.HasPrefix(base, "https://") || ca == "" || key == "" {
		t.Fatalf("emulate --tls printed %v", emu)
	}
	env := []string{"HOME=" + t.TempDir(), "SSL_CERT_FILE=" + ca, "SERVICE_SYSTEM_CERTS=1", "SERVICE_PROFILE=", "SERVICE_API_KEY=", "SERVICE_ENDPOINT="}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("webhooks", "list", "--endpoint", base, "--api-key", key, "--team", "Team TLS"); err != nil || !strings.Contains(out, "no webhooks") {
		t.Errorf("--team by name over https: %v\n%s", err, out)
	}
	if out, err := run("webhooks", "list", "--endpoint", base, "--api-key", key, "--team", "Team X"); err == nil || !strings.Contains(out, `no team "Team X" among yours: Team TLS (team-tls)`) {
		t.Errorf("--team by an unknown name over https: %v\n%s", err, out)
	}
}
