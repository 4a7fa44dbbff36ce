package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The README's commands table names every flag of these commands, in the
// rows that start with the command.
func TestREADMECommandsTableListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `devhook ") {
			rows = append(rows, line)
		}
	}
	root := newRootCmd(nil, nil)
	for _, path := range []string{"listen", "relay", "emulate", "receive", "send", "check", "replay", "deliveries list", "deliveries show", "scenario save", "scenario play", "scenario show"} {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for _, r := range rows {
			if strings.HasPrefix(r, "| `devhook "+path+" ") || strings.HasPrefix(r, "| `devhook "+path+"`") {
				text += r
			}
		}
		if text == "" {
			t.Errorf("the README's commands table has no row for devhook %s", path)
			continue
		}
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" || f.Hidden {
				return
			}
			if !strings.Contains(text, "--"+f.Name+" ") && !strings.Contains(text, "--"+f.Name+"]") &&
				!strings.Contains(text, "--"+f.Name+"`") && !strings.Contains(text, "--"+f.Name+"\\|") {
				t.Errorf("the README's commands table does not list devhook %s --%s", path, f.Name)
			}
		})
	}
	if !strings.Contains(string(b), "`--status none`") {
		t.Error("the README does not state --status none")
	}
}
