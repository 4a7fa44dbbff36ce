package inspector_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/inspector"
)

func TestHostCheck(t *testing.T) {
	f := newFixture(t, fixtureOptions{config: func(c *inspector.Config) { c.AllowedHosts = []string{"devbox.lan"} }})
	tests := []struct {
		host string
		want int
	}{
		{"127.0.0.1:4040", http.StatusOK},
		{"127.0.0.1", http.StatusOK},
		{"127.9.8.7:1234", http.StatusOK},
		{"localhost:4040", http.StatusOK},
		{"LOCALHOST", http.StatusOK},
		{"localhost.:4040", http.StatusOK},
		{"app.localhost:4040", http.StatusOK},
		{"[::1]:4040", http.StatusOK},
		{"[::1]", http.StatusOK},
		{"devbox.lan:4040", http.StatusOK}, // Config.AllowedHosts
		{"", http.StatusForbidden},
		{"evil.example", http.StatusForbidden},
		{"evil.example:4040", http.StatusForbidden},
		{"127.0.0.1.evil.example", http.StatusForbidden},
		{"localhost.evil.example", http.StatusForbidden},
		{"0.0.0.0:4040", http.StatusForbidden},
		{"192.168.1.20:4040", http.StatusForbidden},
		{"[::ffff:10.0.0.1]:4040", http.StatusForbidden},
		{"devbox.lan.evil.example", http.StatusForbidden},
	}
	for _, path := range []string{"/", "/api/settings", "/api/deliveries"} {
		for _, tt := range tests {
			r := httptest.NewRequest(http.MethodGet, path, nil)
			r.Host = tt.host
			w := httptest.NewRecorder()
			f.Server.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Errorf("GET %s with Host %q: status %d, want %d (%s)", path, tt.host, w.Code, tt.want, w.Body)
			}
			if tt.want == http.StatusForbidden && !strings.Contains(w.Body.String(), `"error"`) {
				t.Errorf("GET %s with Host %q: body %q is not a JSON error", path, tt.host, w.Body)
			}
		}
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "a.b.localhost": true, "127.0.0.1": true, "127.255.0.1": true, "::1": true, "::1%lo": true,
		"localhostx": false, "0.0.0.0": false, "10.0.0.1": false, "::": false, "example.com": false, "": false,
	} {
		if got := inspector.IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestCrossOriginRefusal(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	d := newDelivery(time.Now().Add(-time.Minute), 1, runStatusBody(t, "run-x", "queued", time.Now()), true)
	put(t, f.DB, d, 200)

	tests := []struct {
		name   string
		method string
		header map[string]string
		want   int
	}{
		{"cross-site fetch", http.MethodPost, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"same-site other port", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:9999"}, http.StatusForbidden},
		{"old browser with a foreign Origin", http.MethodPost, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"form post from a rebinding page", http.MethodPost, map[string]string{"Origin": "http://attacker.example:4040", "Content-Type": "text/plain"}, http.StatusForbidden},
		{"the page itself", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "SELF"}, http.StatusOK},
		{"curl: no browser headers", http.MethodPost, nil, http.StatusOK},
		{"cross-site GET is a read", http.MethodGet, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.Replayer.callCount()
			path := "/api/deliveries/" + d.ID + "/replay"
			var body io.Reader
			if tt.method == http.MethodGet {
				path = "/api/deliveries/" + d.ID
			} else {
				body = strings.NewReader(`{}`)
			}
			req, err := http.NewRequest(tt.method, f.HTTP.URL+path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tt.header {
				if v == "SELF" {
					v = f.HTTP.URL
				}
				req.Header.Set(k, v)
			}
			res, err := f.HTTP.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.want, b)
			}
			calls := f.Replayer.callCount() - before
			switch {
			case tt.method == http.MethodPost && tt.want == http.StatusForbidden && calls != 0:
				t.Errorf("a refused request reached the replayer")
			case tt.method == http.MethodPost && tt.want == http.StatusOK && calls != 1:
				t.Errorf("replayer called %d times, want 1", calls)
			}
		})
	}
}

func TestPageAndHeaders(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for path, ctype := range map[string]string{"/": "text/html", "/js/main.js": "javascript", "/js/pages/delivery.js": "javascript", "/style.css": "text/css"} {
		res, err := f.HTTP.Client().Get(f.HTTP.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), ctype) || len(b) == 0 {
			t.Errorf("GET %s: %d %q", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
		// Asked again with its ETag, a file the browser has is a 304.
		etag := res.Header.Get("ETag")
		if len(etag) < 10 || res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: ETag %q, Cache-Control %q", path, etag, res.Header.Get("Cache-Control"))
			continue
		}
		req, _ := http.NewRequest("GET", f.HTTP.URL+path, nil)
		req.Header.Set("If-None-Match", etag)
		again, err := f.HTTP.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		again.Body.Close()
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %s: %d, want 304", path, etag, again.StatusCode)
		}
	}
	if _, err := inspector.New(inspector.Config{}); err == nil {
		t.Error("New without a store succeeded")
	}
}
