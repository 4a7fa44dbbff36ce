package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every devhook command line in the README and the guides in docs/ (in
// code blocks and in `inline code`) names real commands, flags and
// arguments as the code has them now, so that the guides cannot drift
// from the commands; go run ./cmd/devhook counts as devhook.
func TestDocsCommandLinesParse(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	n := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, spans := commandTexts(string(b))
		for _, text := range append(blocks, spans...) {
			whole := len(blocks) > 0 && text == blocks[0]
			if whole {
				blocks = blocks[1:]
			}
			text = strings.ReplaceAll(text, "go run ./cmd/devhook", "devhook")
			for _, args := range exampleCommandLines(text) {
				if !parsesAsWritten(args) {
					continue
				}
				n++
				var err error
				if whole {
					_, err = parseExample(args)
				} else {
					err = namesRealFlags(args)
				}
				if err != nil {
					t.Errorf("%s: %q: %v", filepath.Base(file), strings.Join(args, " "), err)
				}
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d devhook command lines found in the README and docs/", n)
	}
}

// parsesAsWritten is false for a line with a placeholder for words (…,
// [OPTIONS], (A | B)) that is meant to be read, not run.
func parsesAsWritten(args []string) bool {
	for _, a := range args {
		if strings.ContainsAny(a, "…[]()") && !strings.HasPrefix(a, "http") {
			return false
		}
	}
	return true
}

// namesRealFlags checks a command named in running text (`devhook relay
// --max-body`), which need not be complete: the command exists and has
// every flag named.
func namesRealFlags(args []string) error {
	c := newRootCmd(io.Discard, io.Discard)
	for _, a := range args[1:] {
		sub, _, err := c.Find([]string{a})
		if err != nil || sub == c {
			break
		}
		c = sub
	}
	for _, a := range args[1:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if name != "help" && c.Flags().Lookup(name) == nil && c.InheritedFlags().Lookup(name) == nil {
				return fmt.Errorf("%s has no flag --%s", c.CommandPath(), name)
			}
		}
	}
	return nil
}

// commandTexts returns the code blocks of a Markdown text, and its inline
// code spans that start with devhook.
func commandTexts(md string) (blocks, spans []string) {
	parts := strings.Split(md, "```")
	for i, p := range parts {
		if i%2 == 1 { // inside a fence; drop its info string
			if j := strings.IndexByte(p, '\n'); j >= 0 {
				p = p[j+1:]
			}
			// A shell prompt is not part of the command.
			p = strings.ReplaceAll(p, "\n$ ", "\n")
			p = strings.TrimPrefix(p, "$ ")
			blocks = append(blocks, p)
			continue
		}
		s := strings.Split(p, "`")
		for k := 1; k < len(s); k += 2 {
			if strings.HasPrefix(s[k], "devhook ") || strings.HasPrefix(s[k], "go run ./cmd/devhook ") {
				spans = append(spans, s[k])
			}
		}
	}
	return blocks, spans
}

func TestDocsStateStatusNone(t *testing.T) {
	b, err := os.ReadFile("../../docs/LISTEN.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "--status none`") {
		t.Error("docs/LISTEN.md does not state --status none")
	}
}
