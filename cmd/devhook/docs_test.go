package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedDocsAreCurrent is the "go generate, then diff" check: the
// committed command reference and man pages are what the code generates
// now, file for file and byte for byte.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	dir := t.TempDir()
	if err := writeDocs(dir); err != nil {
		t.Fatal(err)
	}
	const fix = "run go generate ./cmd/devhook and commit docs/"
	for _, sub := range []string{"commands", "man"} {
		want := readTree(t, filepath.Join(dir, sub))
		got := readTree(t, filepath.Join("..", "..", "docs", sub))
		for name, w := range want {
			g, ok := got[name]
			switch {
			case !ok:
				t.Errorf("docs/%s/%s is missing: %s", sub, name, fix)
			case !bytes.Equal(g, w):
				t.Errorf("docs/%s/%s is stale: %s\n%s", sub, name, fix, firstDiff(g, w))
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("docs/%s/%s documents no command: %s", sub, name, fix)
			}
		}
	}
}

// TestDocsDoNotDependOnTheMachine: the reference written with another home
// directory is the same, and names no path of this machine.
func TestDocsDoNotDependOnTheMachine(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := writeDocs(a); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("DEVHOOK_RELAY_TOKEN", "secret-token-in-env")
	if err := writeDocs(b); err != nil {
		t.Fatal(err)
	}
	ta, tb := readTree(t, a), readTree(t, b)
	if len(ta) == 0 || len(ta) != len(tb) {
		t.Fatalf("%d files, then %d", len(ta), len(tb))
	}
	for name, x := range ta {
		if !bytes.Equal(x, tb[name]) {
			t.Errorf("%s differs with another HOME:\n%s", name, firstDiff(x, tb[name]))
		}
		for _, leak := range []string{home, "secret-token-in-env"} {
			if bytes.Contains(tb[name], []byte(leak)) {
				t.Errorf("%s contains %q", name, leak)
			}
		}
	}
	// Every command and subcommand has its page and its man page.
	for _, want := range []string{"commands/devhook_listen.md", "commands/devhook_webhooks_create.md", "commands/README.md",
		"man/devhook-listen.1", "man/devhook-webhooks-create.1", "man/devhook.1"} {
		if _, ok := ta[filepath.FromSlash(want)]; !ok {
			t.Errorf("no %s", want)
		}
	}
	if s := string(ta[filepath.FromSlash("commands/devhook_listen.md")]); !strings.Contains(s, "--forward") || !strings.Contains(s, "### Examples") {
		t.Errorf("listen's page lacks its flags or examples:\n%s", s)
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		b, err := os.ReadFile(path)
		files[rel] = b
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  committed: %s\n  generated: %s", i+1, gl, wl)
		}
	}
	return ""
}
