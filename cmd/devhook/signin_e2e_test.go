package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSignInEndToEnd signs in with the devhook binary against the
// emulator's identity provider over HTTPS, its CA trusted only through the
// system-certs switch, with a test browser following the printed URL; then
// lists the organizations with the stored token, lists webhooks with the
// session and no API key, and after the access token is made to expire,
// the next command refreshes it by itself.
func TestSignInEndToEnd(t *testing.T) {
	bin := devhookBinary(t)
	emu, _ := startEmulate(t, "--tls", "--team", "team-e2e=E2E Team")
	base, ca := emu["base"], emu["ca"]
	if !strings.HasPrefix(base, "https://") || ca == "" {
		t.Fatalf("emulate --tls printed base %q, CA %q", base, ca)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	browserClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	home := t.TempDir()
	env := []string{"HOME=" + home, "SSL_CERT_FILE=" + ca, "SSL_CERT_DIR=" + filepath.Join(home, "no-certs")}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && !strings.HasPrefix(k, "SERVICE_") && !strings.HasPrefix(k, "SSL_CERT_") {
			env = append(env, kv)
		}
	}
	run := func(extraEnv []string, args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(append([]string(nil), env...), extraEnv...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	systemCerts := []string{"SERVICE_SYSTEM_CERTS=1"}
	disc := base + "/.well-known/openid-configuration"

	// Without the switch, the built-in roots do not trust the emulator.
	_, stderr, err := run(nil, "login", "--no-browser", "--callback-addr", "127.0.0.1:0", "--oidc-discovery-url", disc)
	if err == nil || !strings.Contains(stderr, "certificate") || !strings.Contains(stderr, "SERVICE_SYSTEM_CERTS") {
		t.Fatalf("login without the system-certs switch: %v\n%s", err, stderr)
	}

	// Sign in: --email's domain has single sign-on, so the sign-in goes
	// through its identity provider.
	login := exec.Command(bin, "login", "--no-browser", "--callback-addr", "127.0.0.1:0", "--oidc-discovery-url", disc,
		"--email", "someone@sso.devhook.test", "--endpoint", base)
	login.Env = append(append([]string(nil), env...), systemCerts...)
	var loginOut bytes.Buffer
	login.Stdout = &loginOut
	pipe, err := login.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		u, sc := signInURL(t, pipe)
		if u == "" {
			done <- login.Wait()
			return
		}
		if !strings.Contains(u, "identity_provider=devhook-sso") || !strings.Contains(u, "code_challenge_method=S256") {
			t.Errorf("sign-in URL %s lacks identity_provider=devhook-sso or S256", u)
		}
		testBrowser(t, browserClient, u)
		for sc.Scan() {
		}
		done <- login.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("login: %v; printed %s", err, loginOut.String())
		}
	case <-time.After(30 * time.Second):
		login.Process.Kill()
		t.Fatal("login did not finish within 30s")
	}
	if !strings.Contains(loginOut.String(), "Signed in as developer@sso.devhook.test") {
		t.Errorf("login printed %q", loginOut.String())
	}
	tokens := filepath.Join(home, ".service", "auth", "default", "tokens.json")
	first := readTokens(t, home, "default")
	if fi, err := os.Stat(tokens); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode: %v %v", fi.Mode().Perm(), err)
	}

	// The organizations, with the stored token.
	out, stderr, err := run(systemCerts, "orgs", "--endpoint", base)
	if err != nil || !strings.Contains(out, "E2E Team") || !strings.Contains(out, "team-e2e") || !strings.Contains(out, "admin") {
		t.Fatalf("orgs: %v\n%s%s", err, out, stderr)
	}
	// The profile's system_certs does the same as the variable.
	os.WriteFile(filepath.Join(home, ".service", "config.yaml"), []byte("endpoint: "+base+"\nsystem_certs: true\n"), 0o600)
	if out, stderr, err := run(nil, "sso", "someone@sso.devhook.test"); err != nil || !strings.Contains(out, "devhook-sso") {
		t.Fatalf("sso with system_certs in the profile: %v\n%s%s", err, out, stderr)
	}

	// An API command with the session and no API key.
	if out, stderr, err := run(nil, "webhooks", "create", "signed-in-hook", "--url", "https://hooks.example.com/x"); err != nil {
		t.Fatalf("webhooks create with the session: %v\n%s%s", err, out, stderr)
	}
	if out, stderr, err := run(nil, "webhooks", "list"); err != nil || !strings.Contains(out, "signed-in-hook") {
		t.Fatalf("webhooks list with the session: %v\n%s%s", err, out, stderr)
	}
	if got := readTokens(t, home, "default"); got["access_token"] != first["access_token"] {
		t.Errorf("a valid access token was refreshed")
	}

	// The access token expires: the next command refreshes it by itself.
	expired := readTokens(t, home, "default")
	expired["expires_at"] = time.Now().UTC().Add(-time.Minute).Format("2006-01-02T15:04:05+00:00")
	b, _ := json.Marshal(expired)
	if err := os.WriteFile(tokens, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := run(nil, "webhooks", "list"); err != nil || !strings.Contains(out, "signed-in-hook") {
		t.Fatalf("webhooks list with an expired access token: %v\n%s%s", err, out, stderr)
	}
	now := readTokens(t, home, "default")
	exp, err := time.Parse(time.RFC3339, now["expires_at"].(string))
	if now["access_token"] == first["access_token"] || now["refresh_token"] == first["refresh_token"] || err != nil || time.Until(exp) < 50*time.Minute {
		t.Errorf("after the refresh the tokens are %v, want new access and refresh tokens good for an hour", now)
	}
	if fi, err := os.Stat(tokens); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode after the refresh: %v %v", fi.Mode().Perm(), err)
	}
	if out, _, err := run(nil, "token"); err != nil || strings.TrimSpace(out) != now["access_token"] {
		t.Errorf("token printed %q (%v), want the refreshed access token", out, err)
	}

	// The refresh token is used up elsewhere: invalid_grant removes the
	// tokens and says to sign in again.
	now["expires_at"] = time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	now["refresh_token"] = first["refresh_token"] // rotated away: good no more
	b, _ = json.Marshal(now)
	os.WriteFile(tokens, b, 0o600)
	if _, stderr, err := run(nil, "webhooks", "list"); err == nil || !strings.Contains(stderr, "devhook login") || !strings.Contains(stderr, "invalid_grant") {
		t.Errorf("webhooks list with a used refresh token: %v\n%s", err, stderr)
	}
	if _, err := os.Stat(tokens); !os.IsNotExist(err) {
		t.Errorf("the tokens were not removed after invalid_grant: %v", err)
	}
}
