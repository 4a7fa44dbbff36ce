package devhook_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/devhook/devhook"
)

func TestTargetURL(t *testing.T) {
	for _, tt := range []struct{ target, path, query, want string }{
		{"http://localhost:8080", "/hook", "a=1", "http://localhost:8080/hook?a=1"},
		{"http://localhost:8080/", "", "", "http://localhost:8080/"},
		{"http://localhost:8080/webhooks", "/", "", "http://localhost:8080/webhooks"},
		{"http://localhost:8080/webhooks/", "/run", "", "http://localhost:8080/webhooks/run"},
		{"https://h.example/a%2Fb", "/c", "", "https://h.example/a%2Fb/c"},
		{"http://localhost:8080/x?keep=1#frag", "/y", "", "http://localhost:8080/x/y?keep=1"},
		{"http://localhost:8080/hooks?token=abc", "/x", "y=1", "http://localhost:8080/hooks/x?token=abc&y=1"},
		{"http://localhost:8080/hooks?token=abc", "/", "", "http://localhost:8080/hooks?token=abc"},
		{"http://localhost:8080?token=a%26b", "/x", "y=1&y=2", "http://localhost:8080/x?token=a%26b&y=1&y=2"},
		{"http://localhost:8080/hooks?token=abc&", "/x", "y=1", "http://localhost:8080/hooks/x?token=abc&y=1"},
	} {
		u, err := url.Parse(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := devhook.TargetURL(u, tt.path, tt.query); got != tt.want {
			t.Errorf("TargetURL(%s, %q, %q) = %s, want %s", tt.target, tt.path, tt.query, got, tt.want)
		}
	}
}

// A delivery path with dot segments, in any of the forms a receiver or a
// proxy in front of it may resolve, never leaves the target's path.
func TestTargetURL_StaysUnderTheTargetPath(t *testing.T) {
	base, err := url.Parse("http://localhost:8080/base")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{"/x/../../../escape", "http://localhost:8080/base/escape"},
		{"/%2e%2e/%2e%2e/escape", "http://localhost:8080/base/escape"},
		{"/%2E%2e/.%2E/escape", "http://localhost:8080/base/escape"},
		{"/a/b/%2e./escape", "http://localhost:8080/base/a/escape"},
		{"/x%2f..%2f..%2fescape", "http://localhost:8080/base/escape"},
		{"/x%2F..%5C..%5cescape", "http://localhost:8080/base/escape"},
		{`/x\..\..\escape`, "http://localhost:8080/base/escape"},
		{"/%252e%252e/escape", "http://localhost:8080/base/escape"},
		{"/..;/..;/escape", "http://localhost:8080/base/escape"},
		{"/./a/./b", "http://localhost:8080/base/a/b"},
		{"/a/b/..", "http://localhost:8080/base/a/"},
		{"/..", "http://localhost:8080/base"},
		{"/a/../b%20c/", "http://localhost:8080/base/b%20c/"},
		// No dot segment: left byte for byte as it came.
		{"/a..b/.well-known/%2Fx/%7e", "http://localhost:8080/base/a..b/.well-known/%2Fx/%7e"},
		{"/...", "http://localhost:8080/base/..."},
	} {
		got := devhook.TargetURL(base, tt.path, "")
		if got != tt.want {
			t.Errorf("TargetURL(%s, %q) = %s, want %s", base, tt.path, got, tt.want)
		}
		// Resolved as a receiver resolving dot segments (after decoding
		// as often as it likes) would, it stays under /base.
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("TargetURL(%q) = %q: %v", tt.path, got, err)
		}
		if devhook.HasDotSegment(u.EscapedPath()) {
			t.Errorf("TargetURL(%q) = %q still has a dot segment", tt.path, got)
		}
		if p := u.ResolveReference(&url.URL{}).Path; p != "/base" && !strings.HasPrefix(p, "/base/") {
			t.Errorf("TargetURL(%q) = %q resolves to %q, outside /base", tt.path, got, p)
		}
	}
}

func TestHasDotSegment(t *testing.T) {
	for path, want := range map[string]bool{
		"/":                 false,
		"/hook":             false,
		"/a..b/c.":          false,
		"/.well-known/x":    false,
		"/...":              false,
		"/a%2Fb":            false,
		"/%2e%2e%2e":        false,
		"/..":               true,
		"/.":                true,
		"/a/./b":            true,
		"/a/../b":           true,
		"/%2e":              true,
		"/%2E%2e":           true,
		"/.%2E/x":           true,
		"/a%2f..":           true,
		"/a%2F%2e%2e%2Fb":   true,
		"/a%5c..%5Cb":       true,
		`/a\..\b`:           true,
		"/a%255c..":         true,
		"/%252e%252e/x":     true,
		"/..;x/y":           true,
		"/%2e;/y":           true,
		"/%25252525252e%2e": true, // decodes more often than a receiver would try
		"/%zz/%2/%":         false,
		"/%252e%252ex":      false,
		"/x/%2e%2e.hidden":  false,
	} {
		if got := devhook.HasDotSegment(path); got != want {
			t.Errorf("HasDotSegment(%q) = %v, want %v", path, got, want)
		}
	}
}
