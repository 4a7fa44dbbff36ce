package auth_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/auth"
)

func TestUseSystemCerts(t *testing.T) {
	for _, tc := range []struct {
		env     string
		profile bool
		want    bool
	}{
		{"", false, false},
		{"", true, true},
		{"1", false, true},
		{"true", false, true},
		{"TRUE", false, true},
		{" Yes \n", false, true},
		{"yes", true, true},
		{"0", true, true},
		{"false", true, true},
		{"no", false, false},
		{"2", false, false},
		{"y", false, false},
		{"on", false, false},
	} {
		if got := auth.UseSystemCerts(tc.env, tc.profile); got != tc.want {
			t.Errorf("UseSystemCerts(%q, %v) = %v, want %v", tc.env, tc.profile, got, tc.want)
		}
	}
}

// TestBuiltInRoots: the built-in bundle is the Mozilla roots, which do not
// include a test server's own authority.
func TestBuiltInRoots(t *testing.T) {
	pool, err := auth.RootCAs(false)
	if err != nil {
		t.Fatal(err)
	}
	if pool.Equal(nil) || len(pool.Subjects()) < 100 { //nolint:staticcheck // counting is enough here
		t.Errorf("the built-in bundle has %d roots", len(pool.Subjects())) //nolint:staticcheck
	}
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	hc, err := auth.NewHTTPClient(false, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Get(srv.URL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("the built-in bundle trusted a test server: %v", err)
	}
}

func TestHTTPSEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		notHTTPS bool
		bad      bool
	}{
		{in: "api.example.com", want: "https://api.example.com"},
		{in: "api.example.com:8443", want: "https://api.example.com:8443"},
		{in: "https://api.example.com/", want: "https://api.example.com"},
		{in: "HTTPS://api.example.com/base", want: "https://api.example.com/base"},
		{in: "http://api.example.com", notHTTPS: true},
		{in: "http://127.0.0.1:4010", notHTTPS: true},
		{in: "ftp://api.example.com", notHTTPS: true},
		{in: "", bad: true},
		{in: "https://", bad: true},
	} {
		u, err := auth.HTTPSEndpoint(tc.in)
		switch {
		case tc.notHTTPS:
			if !errors.Is(err, auth.ErrNotHTTPS) {
				t.Errorf("HTTPSEndpoint(%q) = %v, %v; want ErrNotHTTPS", tc.in, u, err)
			}
		case tc.bad:
			if err == nil || errors.Is(err, auth.ErrNotHTTPS) {
				t.Errorf("HTTPSEndpoint(%q) = %v, %v; want an error", tc.in, u, err)
			}
		default:
			if err != nil || u.String() != tc.want {
				t.Errorf("HTTPSEndpoint(%q) = %v, %v; want %s", tc.in, u, err, tc.want)
			}
		}
	}
}
