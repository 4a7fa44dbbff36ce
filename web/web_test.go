package web_test

import (
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/devhook/devhook/web"
)

var (
	moduleScript = regexp.MustCompile(`<script type="module" src="([^"]+)"></script>`)
	importFrom   = regexp.MustCompile(`(?m)^import\s[^;]*?\sfrom\s+'([^']+)';`)
	htmlSink     = regexp.MustCompile(`\.(inner|outer)HTML\s*\+?=|insertAdjacentHTML\(|document\.write|\beval\(|new Function\(`)
)

// TestModulesEmbedded follows the page's module graph from index.html: each
// import must name an embedded file, and each embedded module must be
// reached, so that a module the embed pattern or an import forgets shows
// here and not only in a browser.
func TestModulesEmbedded(t *testing.T) {
	files := web.FS()
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	m := moduleScript.FindSubmatch(index)
	if m == nil {
		t.Fatal("index.html loads no module script")
	}
	reached := map[string]bool{}
	queue := []string{string(m[1])}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if reached[name] {
			continue
		}
		reached[name] = true
		src, err := fs.ReadFile(files, name)
		if err != nil {
			t.Errorf("%s is loaded but not embedded: %v", name, err)
			continue
		}
		imports := importFrom.FindAllSubmatch(src, -1)
		for _, im := range imports {
			spec := string(im[1])
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") {
				t.Errorf("%s imports %q: modules import each other by relative path", name, spec)
				continue
			}
			queue = append(queue, path.Join(path.Dir(name), spec))
		}
	}
	err = fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(name, ".js") && !reached[name] {
			t.Errorf("%s is embedded but no module imports it", name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reached) < 2 {
		t.Errorf("the module graph has %d modules: the import pattern finds none", len(reached))
	}
}

// TestNoHTMLFromStrings holds the page's rule: content goes in as text,
// never parsed as HTML.
func TestNoHTMLFromStrings(t *testing.T) {
	files := web.FS()
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(name, ".js") {
			return err
		}
		src, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		if m := htmlSink.Find(src); m != nil {
			t.Errorf("%s: %s", name, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
