package main

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestCommandsAreGrouped: devhook --help sorts every command under a
// heading; a new command without a place in commandGroups fails here.
func TestCommandsAreGrouped(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Hidden {
			continue
		}
		if c.GroupID == "" || !root.ContainsGroup(c.GroupID) {
			t.Errorf("devhook %s is in no group of devhook --help: add it to commandGroups", c.Name())
		}
	}
	var help strings.Builder
	root.SetOut(&help)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, g := range commandGroups() {
		if !strings.Contains(help.String(), "\n"+g.group.Title+"\n") {
			t.Errorf("devhook --help has no heading %q:\n%s", g.group.Title, help.String())
		}
	}
	if strings.Contains(help.String(), "Additional Commands:") {
		t.Errorf("devhook --help lists commands outside the groups:\n%s", help.String())
	}
}

// TestEveryCommandHasAnExampleThatParses: every command's help shows at
// least one example of itself, and every devhook command line in every
// example (also one inside $(...) or after a pipe) names a real command,
// only its flags, the arguments it takes and its required flags.
func TestEveryCommandHasAnExampleThatParses(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		lines := exampleCommandLines(c.Example)
		if len(lines) == 0 {
			t.Errorf("%s: no example in its help", c.CommandPath())
		}
		self := false
		for _, args := range lines {
			path, err := parseExample(args)
			if err != nil {
				t.Errorf("%s: example %q: %v", c.CommandPath(), strings.Join(args, " "), err)
				continue
			}
			if path == c.CommandPath() || strings.HasPrefix(path, c.CommandPath()+" ") {
				self = true
			}
		}
		if len(lines) > 0 && !self {
			t.Errorf("%s: no example runs %s itself", c.CommandPath(), c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard))
}

// parseExample parses one devhook command line (args[0] == "devhook") as
// devhook would, in a fresh command tree, without running it, and returns
// the command's path.
func parseExample(args []string) (string, error) {
	root := newRootCmd(io.Discard, io.Discard)
	c, rest, err := root.Find(args[1:])
	if err != nil {
		return "", err
	}
	if !c.Runnable() {
		return "", fmt.Errorf("%s only holds subcommands", c.CommandPath())
	}
	if err := c.ParseFlags(rest); err != nil {
		return "", err
	}
	if err := c.ValidateArgs(c.Flags().Args()); err != nil {
		return "", err
	}
	if err := c.ValidateRequiredFlags(); err != nil {
		return "", err
	}
	if err := c.ValidateFlagGroups(); err != nil {
		return "", err
	}
	return c.CommandPath(), nil
}

// exampleCommandLines returns every devhook command line of an Example
// text as words, the way a POSIX shell splits them: quotes removed, a
// backslash-newline joins lines, | ; && start a new command, a
// redirection (> FILE, 2>&1) is left out, and the text of a $(...) is a
// command line of its own (its place in the outer line is one word).
func exampleCommandLines(text string) [][]string {
	var out [][]string
	var cmds []string // raw command texts still to split
	cmds = append(cmds, strings.ReplaceAll(text, "\\\n", " "))
	for len(cmds) > 0 {
		src := cmds[0]
		cmds = cmds[1:]
		var words []string
		var word strings.Builder
		inWord := false
		flush := func() {
			if inWord {
				words = append(words, word.String())
			}
			word.Reset()
			inWord = false
		}
		end := func() {
			flush()
			if len(words) > 0 && words[0] == "devhook" {
				out = append(out, words)
			}
			words = nil
		}
		for i := 0; i < len(src); i++ {
			ch := src[i]
			switch {
			case ch == '\n' || ch == ';' || ch == '|' || ch == '&':
				end()
			case ch == ' ' || ch == '\t':
				flush()
			case ch == '>' || ch == '<': // a redirection and its file are no words of the command
				if inWord && strings.Trim(word.String(), "0123456789") == "" {
					word.Reset() // the 2 of 2>
					inWord = false
				}
				flush()
				for i+1 < len(src) && (src[i+1] == '>' || src[i+1] == '&') {
					i++
				}
				for i+1 < len(src) && (src[i+1] == ' ' || src[i+1] == '\t') {
					i++
				}
				for i+1 < len(src) && !strings.ContainsRune(" \t\n;|&", rune(src[i+1])) {
					i++
				}
			case ch == '#' && !inWord: // a comment, to the end of the line
				for i+1 < len(src) && src[i+1] != '\n' {
					i++
				}
			case ch == '\'':
				j := strings.IndexByte(src[i+1:], '\'')
				if j < 0 {
					j = len(src) - i - 1
				}
				word.WriteString(src[i+1 : i+1+j])
				inWord = true
				i += j + 1
			case ch == '$' && i+1 < len(src) && src[i+1] == '(':
				j := closing(src, i+1)
				cmds = append(cmds, src[i+2:j])
				word.WriteString("SUBST")
				inWord = true
				i = j
			case ch == '"':
				inWord = true
				for i++; i < len(src) && src[i] != '"'; i++ {
					if src[i] == '$' && i+1 < len(src) && src[i+1] == '(' {
						j := closing(src, i+1)
						cmds = append(cmds, src[i+2:j])
						word.WriteString("SUBST")
						i = j
						continue
					}
					word.WriteByte(src[i])
				}
			default:
				word.WriteByte(ch)
				inWord = true
			}
		}
		end()
	}
	return out
}

// closing is the index of the ')' that closes the '(' at open.
func closing(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return len(s) - 1
}

func TestExampleCommandLines(t *testing.T) {
	got := exampleCommandLines(`  devhook listen --forward localhost:8080 --secret "$(devhook webhooks secret my-hook)"
  echo '{"a": 1}' | devhook runs start my-app --input - --wait
  devhook check http://x \
    --secret 'a b'   # the handler's answer, and a#b
  devhook version#not a comment`)
	want := [][]string{
		{"devhook", "listen", "--forward", "localhost:8080", "--secret", "SUBST"},
		{"devhook", "runs", "start", "my-app", "--input", "-", "--wait"},
		{"devhook", "check", "http://x", "--secret", "a b"},
		{"devhook", "version#not", "a", "comment"},
		{"devhook", "webhooks", "secret", "my-hook"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if strings.Join(got[i], "\x00") != strings.Join(want[i], "\x00") {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
}
