package devhook_test

import (
	"net/url"
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
