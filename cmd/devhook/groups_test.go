package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestGroupsOnlyPrintHelp: no command both runs something and holds
// subcommands. Every command with subcommands, run alone, prints its help
// and starts nothing (a context already cancelled makes a server that
// started anyway return at once, and its banner shows).
func TestGroupsOnlyPrintHelp(t *testing.T) {
	var groups [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.HasSubCommands() && len(path) > 0 {
			groups = append(groups, path)
		}
		for _, sub := range c.Commands() {
			if !sub.Hidden && sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub, append(append([]string(nil), path...), sub.Name()))
			}
		}
	}
	walk(newRootCmd(nil, nil), nil)
	if len(groups) < 5 {
		t.Fatalf("only %d groups found: %v", len(groups), groups)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, path := range groups {
		var out, errOut bytes.Buffer
		root := newRootCmd(&out, &errOut)
		root.SetArgs(path)
		if err := root.ExecuteContext(ctx); err != nil {
			t.Errorf("devhook %s: %v", strings.Join(path, " "), err)
		}
		if !strings.Contains(out.String(), "Available Commands:") || strings.Contains(out.String(), "devhook relay on") {
			t.Errorf("devhook %s printed no help, or ran something:\n%s%s", strings.Join(path, " "), out.String(), errOut.String())
		}
	}
}

// TestRelayServerMovedToServe: the relay server is devhook relay serve;
// devhook relay with a flag of the server's says where it went.
func TestRelayServerMovedToServe(t *testing.T) {
	_, _, err := devhookCmd(t, "relay", "--addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "devhook relay serve --addr") {
		t.Errorf("devhook relay --addr: %v, want the error to name devhook relay serve --addr", err)
	}
	_, _, err = devhookCmd(t, "relay", "--adr", "x")
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --adr") {
		t.Errorf("devhook relay --adr: %v", err)
	}
	if _, _, err := devhookCmd(t, "relay", "parked", "list", "--nope"); err == nil || strings.Contains(err.Error(), "relay serve") {
		t.Errorf("devhook relay parked list --nope: %v, want an unknown flag error of its own", err)
	}
}

// TestDebianUnitRunsTheRelayServer: the systemd unit of the Debian package
// runs a command that parses, with each DEVHOOK_RELAY_ARGS its settings
// file sets or suggests, and that command is the relay server.
func TestDebianUnitRunsTheRelayServer(t *testing.T) {
	unit, err := os.ReadFile("../../packaging/deb/devhook-relay.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=/usr/bin/(devhook .*)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("the unit has no ExecStart=/usr/bin/devhook line")
	}
	defaults, err := os.ReadFile("../../packaging/deb/devhook-relay.default")
	if err != nil {
		t.Fatal(err)
	}
	settings := regexp.MustCompile(`(?m)^#?\s*DEVHOOK_RELAY_ARGS="([^"]*)"`).FindAllSubmatch(defaults, -1)
	if len(settings) < 2 {
		t.Fatalf("the settings file sets or suggests %d DEVHOOK_RELAY_ARGS, want 2 or more", len(settings))
	}
	for _, s := range settings {
		line := strings.ReplaceAll(string(m[1]), "$DEVHOOK_RELAY_ARGS", string(s[1]))
		path, err := parseExample(strings.Fields(line))
		if err != nil || path != "devhook relay serve" {
			t.Errorf("%s: runs %q, %v; want devhook relay serve", line, path, err)
		}
	}
}
