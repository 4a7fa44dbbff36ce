package main

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionString(t *testing.T) {
	for _, tt := range []struct {
		name    string
		stamped string
		info    *debug.BuildInfo
		want    string
	}{
		{"no build info", "", nil, "unknown (built without module information)"},
		{"stamped, no build info", "v1.5.0", nil, "v1.5.0"},
		{"go install …@v1.4.0", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"go install …@pseudo-version", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261124120000-0123456789ab"}}, "v0.0.0-20261124120000-0123456789ab"},
		{"release build of a tag", "v1.5.0", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			"v1.5.0 (commit 0123456789ab, 2026-11-23T10:00:00Z)"},
		{"from a checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel) (commit 0123456789ab, 2026-11-23T10:00:00Z, modified)"},
	} {
		if got := versionString(tt.stamped, tt.info); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestVersionCommandAndFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, _, err := devhookCmd(t, args...)
		if err != nil || !strings.HasPrefix(out, "devhook ") || strings.Count(out, "\n") != 1 {
			t.Errorf("devhook %s: %v %q", args[0], err, out)
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, _, err := devhookCmd(t, "completion", shell)
		if err != nil || !strings.Contains(out, "devhook") || len(out) < 500 {
			t.Errorf("completion %s: %v, %d bytes", shell, err, len(out))
		}
	}
}

func TestUnknownFlagSuggests(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"listen", "--foward", "8080"}, "did you mean --forward?"},
		{[]string{"deliveries", "list", "--stauts", "502"}, "did you mean --status?"},
		{[]string{"replay", "x", "--resgin"}, "did you mean --resign?"},
		{[]string{"send", "--zzzzzz"}, "see devhook send --help"},
	} {
		_, _, err := devhookCmd(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("devhook %s: %v, want %q", strings.Join(tt.args, " "), err, tt.want)
		}
	}
}

func TestUnknownSubcommandIsAnError(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"deliveries", "lsit"}, "did you mean list?"},
		{[]string{"deliveries", "frobnicate"}, "the commands are delete, export, list, show"},
		{[]string{"webhooks", "nope"}, "unknown command"},
		{[]string{"runs", "strat"}, "did you mean start?"},
	} {
		_, _, err := devhookCmd(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("devhook %s: %v, want an error with %q", strings.Join(tt.args, " "), err, tt.want)
		}
	}
	out, _, err := devhookCmd(t, "deliveries")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("devhook deliveries: %v, want its help\n%s", err, out)
	}
}

func TestReceiveWithoutSecretWarns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, secret := range []string{"", "whsec_x"} {
		var out, errOut strings.Builder
		cmd := newRootCmd(&out, &errOut)
		args := []string{"receive", "--addr", "127.0.0.1:0"}
		if secret != "" {
			args = append(args, "--secret", secret)
		}
		cmd.SetArgs(args)
		t.Setenv("DEVHOOK_SECRET", "")
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(errOut.String(), "answers 500 to every request")
		if warned != (secret == "") {
			t.Errorf("receive with secret %q: stderr %q", secret, errOut.String())
		}
	}
}
