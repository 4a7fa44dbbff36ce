package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testBrowser follows a sign-in URL as a browser would: redirects and
// cookies, up to the callback server.
func testBrowser(t *testing.T, client *http.Client, u string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Transport: client.Transport, Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		t.Errorf("the browser could not follow %s: %v", u, err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// signInURL reads the sign-in URL that login --no-browser prints.
func signInURL(t *testing.T, stderr io.Reader) (string, *bufio.Scanner) {
	t.Helper()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "http://") || strings.HasPrefix(line, "https://") {
			return line, sc
		}
	}
	return "", sc
}

// login runs devhook login --no-browser in this process; browse, when not
// nil, is the browser that follows the printed URL.
func login(t *testing.T, browse func(u string), args ...string) (string, error) {
	t.Helper()
	pr, pw := io.Pipe()
	var out bytes.Buffer
	cmd := newRootCmd(&out, pw)
	cmd.SetArgs(append([]string{"login", "--no-browser", "--callback-addr", "127.0.0.1:0"}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := cmd.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()
	u, sc := signInURL(t, pr)
	if u != "" && browse != nil {
		browse(u)
	}
	for sc.Scan() {
	}
	err := <-done
	return out.String(), err
}

func readTokens(t *testing.T, home, session string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, ".service", "auth", session, "tokens.json"))
	if err != nil {
		t.Fatalf("tokens of session %s: %v", session, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSignInCommands: login, token, an API command without an API key,
// logout, against the emulator over plain HTTP.
func TestSignInCommands(t *testing.T) {
	base, _ := newTestService(t)
	home := os.Getenv("HOME")
	disc := base + "/.well-known/openid-configuration"
	browse := func(u string) { testBrowser(t, http.DefaultClient, u) }

	out, err := login(t, browse, "--oidc-discovery-url", disc)
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	if !strings.Contains(out, "Signed in as developer@devhook.test (session default)") {
		t.Errorf("login printed %q", out)
	}
	tok := readTokens(t, home, "default")
	if tok["access_token"] == "" || tok["refresh_token"] == "" || tok["token_type"] != "Bearer" || !strings.HasSuffix(tok["expires_at"].(string), "+00:00") {
		t.Errorf("stored tokens %v", tok)
	}
	for p, want := range map[string]os.FileMode{filepath.Join(home, ".service", "auth"): 0o700,
		filepath.Join(home, ".service", "auth", "default"): 0o700, filepath.Join(home, ".service", "auth", "default", "tokens.json"): 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("mode of %s: %v %v, want %o", p, fi.Mode().Perm(), err, want)
		}
	}

	runSteps(t, []step{
		{args: []string{"token"}, want: []string{tok["access_token"].(string)}},
		{args: []string{"webhooks", "create", "mine", "--url", "http://127.0.0.1:9/", "--endpoint", base}, want: []string{"mine"}},
		{args: []string{"webhooks", "list", "--endpoint", base}, want: []string{"mine"}},
		// An API key still wins: its account has no such webhook.
		{args: []string{"webhooks", "get", "mine", "--endpoint", base, "--api-key", svcKey}, wantErr: []string{"404"}},
		{args: []string{"logout"}, want: []string{"Signed out of session default"}},
		{args: []string{"logout"}, want: []string{"was not signed in"}},
		{args: []string{"token"}, wantErr: []string{"not signed in", "devhook login"}},
		{args: []string{"webhooks", "list", "--endpoint", base}, wantErr: []string{"no API key", "devhook login"}},
	})
}

// TestSignInSessions: the session comes from --session, else the profile's
// auth_session, else default; bad names are refused before anything else.
func TestSignInSessions(t *testing.T) {
	base, _ := newTestService(t)
	home := os.Getenv("HOME")
	disc := base + "/.well-known/openid-configuration"
	browse := func(u string) { testBrowser(t, http.DefaultClient, u) }
	os.MkdirAll(filepath.Join(home, ".service"), 0o700)
	os.WriteFile(filepath.Join(home, ".service", "config.yaml"),
		[]byte("endpoint: "+base+"\nprofiles:\n  work:\n    endpoint: "+base+"\n    auth_session: work-session\n  evil:\n    auth_session: ../../escape\n  empty:\n    auth_session: \"\"\n"), 0o600)

	for _, tc := range []struct {
		name    string
		args    []string
		session string // where the tokens must land
		wantErr string
	}{
		{"flag", []string{"--session", "mine"}, "mine", ""},
		{"profile", []string{"--profile", "work"}, "work-session", ""},
		{"flag over profile", []string{"--profile", "work", "--session", "other"}, "other", ""},
		{"traversal", []string{"--session", "../x"}, "", "invalid session name"},
		{"dot dot", []string{"--session", ".."}, "", "invalid session name"},
		{"backslash", []string{"--session", `a\b`}, "", "invalid session name"},
		{"profile traversal", []string{"--profile", "evil"}, "", "invalid session name"},
		{"empty flag", []string{"--session", ""}, "", "--session: invalid session name \"\": it is empty"},
		{"empty in the profile", []string{"--profile", "empty"}, "", "auth_session of profile empty in "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := login(t, browse, append([]string{"--oidc-discovery-url", disc}, tc.args...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("login %v = %v, want %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			readTokens(t, home, tc.session)
		})
	}
	if _, err := os.Stat(filepath.Join(home, "escape")); err == nil {
		t.Error("a session name escaped the auth directory")
	}
	// The profile's session is what its API commands use.
	runSteps(t, []step{
		{args: []string{"webhooks", "list", "--profile", "work"}, want: []string{"no webhooks"}},
		{args: []string{"logout", "--session", "../x"}, wantErr: []string{"invalid session name"}},
	})

	// An empty session name is an error wherever it comes from, and
	// nothing is deleted: the default session's tokens stay.
	if _, err := login(t, browse, "--oidc-discovery-url", disc); err != nil {
		t.Fatal(err)
	}
	runSteps(t, []step{
		{args: []string{"logout", "--session", ""}, wantErr: []string{"--session", "invalid session name", "empty"}},
		{args: []string{"logout", "--profile", "empty"}, wantErr: []string{"auth_session of profile empty", "empty"}},
		{args: []string{"token", "--session", ""}, wantErr: []string{"invalid session name"}},
		{args: []string{"webhooks", "list", "--profile", "empty", "--endpoint", base}, wantErr: []string{"auth_session of profile empty"}},
	})
	readTokens(t, home, "default")
}

// TestSignInErrors: each failure says what went wrong and what to do.
func TestSignInErrors(t *testing.T) {
	base, _ := newTestService(t)
	home := os.Getenv("HOME")
	disc := base + "/.well-known/openid-configuration"
	host := strings.TrimPrefix(base, "http://")
	browse := func(u string) { testBrowser(t, http.DefaultClient, u) }

	for _, tc := range []struct {
		name    string
		args    []string
		browse  bool
		wantErr []string
	}{
		{"timeout", []string{"--timeout", "50ms"}, false, []string{"timed out", "devhook login", "--no-browser"}},
		{"provider error", []string{"--identity-provider", "nope"}, true, []string{"refused the sign-in", "invalid_request", "nope"}},
		{"sso over http", []string{"--email", "me@corp.test", "--endpoint", base}, false, []string{"https", "http://" + host}},
		{"sso without endpoint", []string{"--email", "me@corp.test"}, false, []string{"needs the service's API", "--endpoint"}},
		{"bad email", []string{"--email", "nobody"}, false, []string{"not an e-mail address"}},
		{"discovery down", []string{"--oidc-discovery-url", "http://127.0.0.1:1/.well-known/openid-configuration"}, false, []string{"discovery document", "--oidc-discovery-url"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b func(string)
			if tc.browse {
				b = browse
			}
			_, err := login(t, b, append([]string{"--oidc-discovery-url", disc}, tc.args...)...)
			if err == nil {
				t.Fatal("login succeeded")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	// The organization and single sign-on calls go over HTTPS only.
	runSteps(t, []step{
		{args: []string{"orgs", "--endpoint", base}, wantErr: []string{"must use https"}},
		{args: []string{"orgs", "--endpoint", "ftp://" + host}, wantErr: []string{"must use https"}},
		{args: []string{"sso", "corp.test", "--endpoint", base}, wantErr: []string{"must use https"}},
		{args: []string{"sso", "corp.test"}, wantErr: []string{"no endpoint", "--endpoint"}},
	})

	// A malformed configuration file is an error naming the file and line.
	cfg := filepath.Join(home, ".service", "config.yaml")
	os.MkdirAll(filepath.Dir(cfg), 0o700)
	os.WriteFile(cfg, []byte("endpoint: x\nauth_session: [oops\n"), 0o600)
	runSteps(t, []step{
		{args: []string{"login"}, wantErr: []string{cfg, "line"}},
		{args: []string{"token"}, wantErr: []string{cfg, "line"}},
		{args: []string{"logout"}, wantErr: []string{cfg, "line"}},
	})
}
