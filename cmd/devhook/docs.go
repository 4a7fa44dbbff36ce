package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

// The command reference in docs/commands (Markdown, a page per command)
// and docs/man (man pages) is generated from the command tree itself, so
// it cannot drift from the code: TestGeneratedDocsAreCurrent fails when
// what is committed differs from what this would write now.
//
//go:generate go run . gen-docs ../../docs

// docDefault is a flag annotation: the default to print in the docs when
// the flag's real default depends on the machine (such as --max-conns, from
// the open-files limit).
const docDefault = "devhook_docs_default"

func newGenDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write the command reference (DIR/commands, Markdown) and man pages (DIR/man)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeDocs(args[0])
		},
	}
}

// writeDocs writes the reference of a fresh command tree into
// dir/commands and dir/man, replacing what was there.
func writeDocs(dir string) error {
	root := docTree()
	md := filepath.Join(dir, "commands")
	man := filepath.Join(dir, "man")
	for _, d := range []string{md, man} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := doc.GenMarkdownTree(root, md); err != nil {
		return fmt.Errorf("markdown reference: %w", err)
	}
	if err := os.WriteFile(filepath.Join(md, "README.md"), commandIndex(root), 0o644); err != nil {
		return err
	}
	// The man pages' footer date is fixed, so that they are the same on
	// every machine and every day; git says when a page last changed.
	manDate := time.Date(2026, time.November, 25, 0, 0, 0, 0, time.UTC)
	header := &doc.GenManHeader{Title: "DEVHOOK", Section: "1", Date: &manDate, Source: "devhook", Manual: "devhook manual"}
	if err := doc.GenManTree(root, header, man); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	return nil
}

// docTree is the command tree as the docs show it: the same on every
// machine (no home directory, no limits of this machine, no auto-generated
// date line).
func docTree() *cobra.Command {
	root := newRootCmd(io.Discard, io.Discard)
	root.InitDefaultCompletionCmd()
	home, _ := os.UserHomeDir()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		fix := func(f *pflag.Flag) {
			if d, ok := f.Annotations[docDefault]; ok && len(d) == 1 {
				f.DefValue = d[0]
			} else if home != "" && strings.HasPrefix(f.DefValue, home+string(filepath.Separator)) {
				f.DefValue = "~" + strings.TrimPrefix(f.DefValue, home)
			}
		}
		c.LocalFlags().VisitAll(fix)
		c.PersistentFlags().VisitAll(fix)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// commandIndex is docs/commands/README.md: every command under the
// headings of devhook --help, linked to its page.
func commandIndex(root *cobra.Command) []byte {
	var b strings.Builder
	b.WriteString("# devhook command reference\n\n")
	b.WriteString("Generated from the code by `go generate ./cmd/devhook`: do not edit by hand.\n")
	b.WriteString("The same pages are man pages in [../man](../man) (`man ./docs/man/devhook-listen.1`).\n\n")
	b.WriteString("[devhook](devhook.md): " + root.Short + "\n")
	groups := append(root.Groups(), &cobra.Group{ID: "", Title: "Other commands:"})
	for _, g := range groups {
		var rows []string
		for _, c := range root.Commands() {
			if c.GroupID != g.ID || !c.IsAvailableCommand() {
				continue
			}
			var list func(c *cobra.Command, depth int)
			list = func(c *cobra.Command, depth int) {
				name := strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
				rows = append(rows, fmt.Sprintf("%s- [%s](%s): %s", strings.Repeat("  ", depth), c.CommandPath(), name, c.Short))
				for _, sub := range c.Commands() {
					if sub.IsAvailableCommand() {
						list(sub, depth+1)
					}
				}
			}
			list(c, 0)
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", strings.TrimSuffix(g.Title, ":"), strings.Join(rows, "\n"))
	}
	return []byte(b.String())
}
