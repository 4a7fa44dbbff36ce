package auth_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/emulator"
)

// signIn signs in against v and saves the tokens as session "default".
func signIn(t *testing.T, v *idp, c *auth.Client, s *auth.Store) *auth.Tokens {
	t.Helper()
	tok, err := c.Login(ctx(t), auth.LoginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(auth.DefaultSession, tok); err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestRefresh(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noRotate bool
	}{
		{"new refresh token", false},
		{"no refresh token in the answer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newIdP(t, emulator.Config{NoRotateRefresh: tc.noRotate})
			c := newClient(t, v, newBrowser(t, v), nil)
			s := mustStore(t, t.TempDir())
			old := signIn(t, v, c, s)
			v.clock.Advance(10 * time.Minute)
			nt, err := c.Refresh(ctx(t), old)
			if err != nil {
				t.Fatal(err)
			}
			if nt.AccessToken == old.AccessToken || !nt.ExpiresAt.Equal(v.clock.Now().Add(time.Hour)) {
				t.Errorf("refreshed %+v", nt)
			}
			if tc.noRotate && nt.RefreshToken != old.RefreshToken {
				t.Errorf("refresh token %q, want the old one kept (%q)", nt.RefreshToken, old.RefreshToken)
			}
			if !tc.noRotate && (nt.RefreshToken == old.RefreshToken || nt.RefreshToken == "") {
				t.Errorf("refresh token %q, want the new one", nt.RefreshToken)
			}
			// The kept or new refresh token works again.
			if _, err := c.Refresh(ctx(t), nt); err != nil {
				t.Errorf("refresh with the resulting refresh token: %v", err)
			}
			// With rotation, the old one is used up: invalid_grant.
			_, err = c.Refresh(ctx(t), old)
			if tc.noRotate && err != nil {
				t.Errorf("refresh with the kept token again: %v", err)
			}
			if !tc.noRotate && !errors.Is(err, auth.ErrInvalidGrant) {
				t.Errorf("refresh with a used token: %v, want ErrInvalidGrant", err)
			}
		})
	}
}

func TestSessionToken(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	c := newClient(t, v, newBrowser(t, v), nil)
	dir := t.TempDir()
	s := mustStore(t, dir)
	sess, err := c.Session(s, auth.DefaultSession)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Session(s, "../x"); !errors.Is(err, auth.ErrInvalidSession) {
		t.Errorf("Session(../x) = %v", err)
	}

	// Not signed in.
	if _, err := sess.Token(ctx(t)); !errors.Is(err, auth.ErrNotSignedIn) || !strings.Contains(err.Error(), "devhook login") {
		t.Errorf("Token before sign-in = %v, want ErrNotSignedIn saying devhook login", err)
	}

	tok := signIn(t, v, c, s)
	hits := v.tokenHits.Load()
	// Valid for 31 s more: no refresh.
	v.clock.Advance(time.Hour - 31*time.Second)
	got, err := sess.Token(ctx(t))
	if err != nil || got != tok.AccessToken || v.tokenHits.Load() != hits {
		t.Fatalf("Token of a valid session = %q, %v (token calls %d → %d); want the stored token, no refresh", got, err, hits, v.tokenHits.Load())
	}
	// 30 s left: expired, refreshed and saved.
	v.clock.Advance(time.Second)
	got, err = sess.Token(ctx(t))
	if err != nil || got == tok.AccessToken {
		t.Fatalf("Token of an expired session = %q, %v; want a new token", got, err)
	}
	saved, _ := s.Load(auth.DefaultSession)
	if saved.AccessToken != got || saved.RefreshToken == tok.RefreshToken || !saved.ExpiresAt.Equal(v.clock.Now().Add(time.Hour)) {
		t.Errorf("saved after refresh: %+v", saved)
	}
	if m := mode(t, filepath.Join(dir, "default", "tokens.json")); m != 0o600 {
		t.Errorf("mode after refresh %o", m)
	}

	// The refresh token is refused: the tokens go, the error says log in.
	saved.ExpiresAt = v.clock.Now()
	saved.RefreshToken = "rt_revoked"
	if err := s.Save(auth.DefaultSession, saved); err != nil {
		t.Fatal(err)
	}
	_, err = sess.Token(ctx(t))
	if !errors.Is(err, auth.ErrInvalidGrant) || !strings.Contains(err.Error(), "devhook login") {
		t.Errorf("Token with a refused refresh token = %v, want ErrInvalidGrant saying devhook login", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "default", "tokens.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tokens are still stored after invalid_grant: %v", err)
	}

	// Another failure of the refresh is an HTTP error; the tokens stay.
	signIn(t, v, c, s)
	v.clock.Advance(2 * time.Hour)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "maintenance")
	})
	v.tokenHook.Store(&h)
	_, err = sess.Token(ctx(t))
	var he *auth.HTTPError
	if !errors.As(err, &he) || he.Status != 503 || errors.Is(err, auth.ErrInvalidGrant) || !strings.Contains(err.Error(), "maintenance") {
		t.Errorf("Token with the token endpoint down = %v, want a 503 *HTTPError", err)
	}
	if got, _ := s.Load(auth.DefaultSession); got == nil {
		t.Error("a failed refresh removed the tokens")
	}
}

// TestRefreshKeepsEveryField: refresh returns the token response body
// plus expires_at, so every field of the answer (scope, expires_in, ones
// devhook has no name for) is in what Refresh returns and in what a
// session stores; the old record's own extra fields stay where the answer
// does not have them.
func TestRefreshKeepsEveryField(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var form url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		form = r.PostForm
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"at2","token_type":"bearer","expires_in":"120","scope":"openid email","id_token":"idt",
			"custom":{"nested":[1,2]},"session_state":"s-1"}`)
	}))
	defer srv.Close()
	c, err := auth.New(auth.Config{HTTPClient: srv.Client(), Now: func() time.Time { return now }, ClientID: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	old := &auth.Tokens{AccessToken: "at1", RefreshToken: "rt1", TokenType: "Bearer", TokenEndpoint: srv.URL,
		Extra: map[string]json.RawMessage{"scope": json.RawMessage(`"old"`), "written_by": json.RawMessage(`"another client"`)}}
	nt, err := c.Refresh(ctx(t), old)
	if err != nil {
		t.Fatal(err)
	}
	if form.Get("grant_type") != "refresh_token" || form.Get("refresh_token") != "rt1" || form.Get("client_id") != "cli" {
		t.Errorf("refresh form %v", form)
	}
	if nt.AccessToken != "at2" || nt.RefreshToken != "rt1" || nt.TokenType != "Bearer" || nt.IDToken != "idt" || !nt.ExpiresAt.Equal(now.Add(2*time.Minute)) {
		t.Errorf("refreshed %+v", nt)
	}
	b, err := json.Marshal(nt)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(b, &got)
	for k, want := range map[string]any{
		"scope": "openid email", "expires_in": "120", "session_state": "s-1", "written_by": "another client",
		"expires_at": "2026-11-26T12:02:00+00:00", "id_token": "idt", "refresh_token": "rt1",
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (record %s)", k, got[k], want, b)
		}
	}
	if c, ok := got["custom"].(map[string]any); !ok || len(c["nested"].([]any)) != 2 {
		t.Errorf("custom = %v, want the answer's object (record %s)", got["custom"], b)
	}

	// What a session saves after its refresh is that same record.
	s := mustStore(t, t.TempDir())
	old.ExpiresAt = now
	if err := s.Save("s", old); err != nil {
		t.Fatal(err)
	}
	sess, err := c.Session(s, "s")
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := sess.Token(ctx(t)); err != nil || tok != "at2" {
		t.Fatalf("Token = %q, %v", tok, err)
	}
	saved, err := s.Load("s")
	if err != nil {
		t.Fatal(err)
	}
	if string(saved.Extra["session_state"]) != `"s-1"` || string(saved.Extra["custom"]) == "" || string(saved.Extra["expires_in"]) != `"120"` {
		t.Errorf("saved extra fields %s", saved.Extra)
	}
}
