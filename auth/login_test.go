package auth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/emulator"
)

// clock is a settable time source shared by the emulator and the client.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// idp is the emulator's identity provider over HTTPS, with hooks to count
// or replace the token endpoint's answers.
type idp struct {
	srv   *httptest.Server
	clock *clock
	// tokenHook, when set, answers token requests instead of the emulator.
	tokenHook atomic.Pointer[http.HandlerFunc]
	tokenHits atomic.Int64
}

func newIdP(t *testing.T, cfg emulator.Config) *idp {
	t.Helper()
	v := &idp{clock: &clock{t: time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)}}
	cfg.Now = v.clock.Now
	if cfg.APIKeys == nil {
		cfg.APIKeys = []string{"key"}
	}
	if cfg.SSODomains == nil {
		cfg.SSODomains = map[string]string{"corp.test": "corp-idp"}
	}
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/oauth2/token" {
			v.tokenHits.Add(1)
			if h := v.tokenHook.Load(); h != nil {
				(*h)(w, r)
				return
			}
		}
		e.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		v.srv.Close()
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return v
}

func (v *idp) discoveryURL() string { return v.srv.URL + "/.well-known/openid-configuration" }

// browser is the test's browser: it follows the URL it is sent to, with
// its cookies, through the provider's redirects to the callback server.
type browser struct {
	client *http.Client
	mu     sync.Mutex
	opened []string
	// follow false: the browser is shown the URL and does nothing.
	follow bool
}

func newBrowser(t *testing.T, v *idp) *browser {
	jar, _ := cookiejar.New(nil)
	c := v.srv.Client()
	bc := &http.Client{Transport: c.Transport, Jar: jar, Timeout: 10 * time.Second}
	return &browser{client: bc, follow: true}
}

func (b *browser) open(ctx context.Context, u string) error {
	b.mu.Lock()
	b.opened = append(b.opened, u)
	b.mu.Unlock()
	if !b.follow {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

func (b *browser) last(t *testing.T) *url.URL {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.opened) == 0 {
		t.Fatal("the browser was not opened")
	}
	u, err := url.Parse(b.opened[len(b.opened)-1])
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func newClient(t *testing.T, v *idp, b *browser, mod func(*auth.Config)) *auth.Client {
	t.Helper()
	cfg := auth.Config{
		DiscoveryURL: v.discoveryURL(),
		HTTPClient:   v.srv.Client(),
		CallbackAddr: "127.0.0.1:0",
		Now:          v.clock.Now,
	}
	if b != nil {
		cfg.OpenBrowser = b.open
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := auth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// email reads the e-mail claim of an id token.
func email(t *testing.T, idToken string) string {
	t.Helper()
	parts := strings.Split(idToken, ".")
	if len(parts) != 3 {
		t.Fatalf("id token %q is not a JWT", idToken)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	s, _ := m["email"].(string)
	return s
}

func TestLogin(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	b := newBrowser(t, v)
	c := newClient(t, v, b, nil)

	tok, err := c.Login(ctx(t), auth.LoginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := b.last(t)
	q := u.Query()
	if u.Path != "/oauth2/authorize" {
		t.Errorf("browser opened %s, want the authorization endpoint", u)
	}
	for k, want := range map[string]string{"response_type": "code", "client_id": auth.DefaultClientID,
		"scope": "openid email profile", "code_challenge_method": "S256"} {
		if q.Get(k) != want {
			t.Errorf("authorization parameter %s = %q, want %q", k, q.Get(k), want)
		}
	}
	if ru, err := url.Parse(q.Get("redirect_uri")); err != nil || ru.Scheme != "http" || ru.Hostname() != "127.0.0.1" || ru.Path != "/" {
		t.Errorf("redirect_uri %q, want http://127.0.0.1:PORT/", q.Get("redirect_uri"))
	}
	if len(q.Get("state")) < 16 || len(q.Get("code_challenge")) != 43 || q.Has("identity_provider") {
		t.Errorf("state %q, code_challenge %q, identity_provider %q", q.Get("state"), q.Get("code_challenge"), q.Get("identity_provider"))
	}
	now := v.clock.Now()
	if tok.AccessToken == "" || tok.RefreshToken == "" || tok.TokenType != "Bearer" || !tok.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Errorf("tokens %+v, want access and refresh tokens expiring at %s", tok, now.Add(time.Hour))
	}
	if email(t, tok.IDToken) != emulator.DefaultUserEmail {
		t.Errorf("signed in as %q", email(t, tok.IDToken))
	}
	// The access token works at the API.
	req, _ := http.NewRequest("GET", v.srv.URL+"/v1/internal/me/organization", nil)
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	resp, err := v.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("organizations with the access token: %d", resp.StatusCode)
	}

	// The callback server is gone once Login has returned.
	if ru, err := url.Parse(q.Get("redirect_uri")); err == nil {
		if conn, err := net.DialTimeout("tcp", ru.Host, time.Second); err == nil {
			conn.Close()
			t.Errorf("the callback server on %s still accepts connections after Login", ru.Host)
		}
	}

	// A second sign-in has a fresh verifier and state.
	if _, err := c.Login(ctx(t), auth.LoginOptions{}); err != nil {
		t.Fatal(err)
	}
	q2 := b.last(t).Query()
	if q2.Get("state") == q.Get("state") || q2.Get("code_challenge") == q.Get("code_challenge") {
		t.Error("the second sign-in reused the state or the verifier")
	}
}

// TestLoginIdentityProviderAndForce: identity_provider goes into the
// authorization request; the provider's browser session then signs the
// next sign-in in as the same user, unless Force sends the browser through
// the end-session endpoint first.
func TestLoginIdentityProviderAndForce(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	b := newBrowser(t, v)
	c := newClient(t, v, b, nil)

	tok, err := c.Login(ctx(t), auth.LoginOptions{IdentityProvider: "corp-idp"})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.last(t).Query().Get("identity_provider"); got != "corp-idp" {
		t.Errorf("identity_provider = %q", got)
	}
	if got := email(t, tok.IDToken); !strings.HasSuffix(got, "@corp.test") {
		t.Errorf("signed in through corp-idp as %q", got)
	}
	tok, err = c.Login(ctx(t), auth.LoginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := email(t, tok.IDToken); !strings.HasSuffix(got, "@corp.test") {
		t.Errorf("without force, the browser session signed in %q, want the corp.test user", got)
	}
	tok, err = c.Login(ctx(t), auth.LoginOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	u := b.last(t)
	if u.Path != "/logout" || u.Query().Get("client_id") != auth.DefaultClientID || u.Query().Get("code_challenge") == "" ||
		u.Query().Get("redirect_uri") == "" || u.Query().Get("state") == "" {
		t.Errorf("with force the browser opened %s, want the end-session endpoint with client_id and the authorization parameters", u)
	}
	if got := email(t, tok.IDToken); got != emulator.DefaultUserEmail {
		t.Errorf("with force, signed in as %q, want a fresh sign-in (%s)", got, emulator.DefaultUserEmail)
	}
}

func TestLoginErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    auth.LoginOptions
		follow  bool
		timeout time.Duration
		token   http.HandlerFunc // the token endpoint's answer
		check   func(t *testing.T, err error)
	}{
		{
			name: "provider error", opts: auth.LoginOptions{IdentityProvider: "no-such-idp"}, follow: true,
			check: func(t *testing.T, err error) {
				var pe *auth.ProviderError
				if !errors.As(err, &pe) || pe.Code != "invalid_request" || !strings.Contains(err.Error(), "invalid_request") {
					t.Errorf("err = %v, want a *ProviderError naming invalid_request", err)
				}
			},
		},
		{
			name: "timeout", follow: false, timeout: 50 * time.Millisecond,
			check: func(t *testing.T, err error) {
				// What to do (run devhook login again) is the command's to say.
				if !errors.Is(err, auth.ErrTimeout) || !strings.Contains(err.Error(), "did not come back") {
					t.Errorf("err = %v, want ErrTimeout saying what happened", err)
				}
			},
		},
		{
			name: "exchange fails", follow: true,
			token: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, `{"message":"token store down"}`)
			},
			check: func(t *testing.T, err error) {
				var he *auth.HTTPError
				if !errors.As(err, &he) || he.Status != 500 || !strings.Contains(err.Error(), "token store down") || !strings.Contains(err.Error(), "500") {
					t.Errorf("err = %v, want an *HTTPError with status 500 and the body", err)
				}
			},
		},
		{
			name: "exchange refused", follow: true,
			token: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"error":"invalid_grant"}`)
			},
			check: func(t *testing.T, err error) {
				var he *auth.HTTPError
				if !errors.As(err, &he) || he.Status != 400 || !errors.Is(err, auth.ErrInvalidGrant) {
					t.Errorf("err = %v, want a 400 *HTTPError matching ErrInvalidGrant", err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newIdP(t, emulator.Config{})
			if tc.token != nil {
				v.tokenHook.Store(&tc.token)
			}
			b := newBrowser(t, v)
			b.follow = tc.follow
			c := newClient(t, v, b, func(cfg *auth.Config) { cfg.BrowserTimeout = tc.timeout })
			tok, err := c.Login(ctx(t), tc.opts)
			if err == nil {
				t.Fatalf("Login = %+v, want an error", tok)
			}
			tc.check(t, err)
		})
	}
}

// TestLoginCallback: a redirect with the wrong state ends the sign-in with
// an error; requests without a code or an error are not answers.
func TestLoginCallback(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	hc := &http.Client{Timeout: 5 * time.Second}
	var favicon int
	c := newClient(t, v, nil, func(cfg *auth.Config) {
		cfg.OpenBrowser = func(ctx context.Context, authURL string) error {
			u, _ := url.Parse(authURL)
			cb := u.Query().Get("redirect_uri")
			resp, err := hc.Get(cb + "favicon.ico")
			if err != nil {
				return err
			}
			resp.Body.Close()
			favicon = resp.StatusCode
			resp, err = hc.Get(cb + "?code=abc&state=forged")
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		}
	})
	_, err := c.Login(ctx(t), auth.LoginOptions{})
	if err == nil || !strings.Contains(err.Error(), "state") {
		t.Errorf("Login with a forged state = %v, want an error about the state", err)
	}
	if favicon != http.StatusNotFound {
		t.Errorf("GET /favicon.ico on the callback server: %d, want 404", favicon)
	}
}

// TestLoginCanceled: a canceled context ends the wait with its error, not
// a timeout, and stops the callback server.
func TestLoginCanceled(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	c, cancel := context.WithCancel(context.Background())
	var callback string
	cl := newClient(t, v, nil, func(cfg *auth.Config) {
		cfg.OpenBrowser = func(_ context.Context, u string) error {
			pu, _ := url.Parse(u)
			cb, _ := url.Parse(pu.Query().Get("redirect_uri"))
			callback = cb.Host
			cancel()
			return nil
		}
	})
	_, err := cl.Login(c, auth.LoginOptions{})
	if !errors.Is(err, context.Canceled) || errors.Is(err, auth.ErrTimeout) {
		t.Errorf("Login with a canceled context = %v, want context.Canceled", err)
	}
	if conn, err := net.DialTimeout("tcp", callback, time.Second); err == nil {
		conn.Close()
		t.Errorf("the callback server on %s still accepts connections", callback)
	}
}

// TestLoginCallbackPortBusy: a busy callback port is an error that says so.
func TestLoginCallbackPortBusy(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	busy := httptest.NewServer(http.NotFoundHandler())
	defer busy.Close()
	c := newClient(t, v, newBrowser(t, v), func(cfg *auth.Config) { cfg.CallbackAddr = busy.Listener.Addr().String() })
	if _, err := c.Login(ctx(t), auth.LoginOptions{}); err == nil || !strings.Contains(err.Error(), "callback server") {
		t.Errorf("Login on a busy port = %v", err)
	}
}

func TestDiscoveryFallback(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	fb := auth.Endpoints{Authorization: v.srv.URL + "/oauth2/authorize", Token: v.srv.URL + "/oauth2/token"}
	for _, tc := range []struct {
		name     string
		fallback *auth.Endpoints
		wantErr  bool
	}{
		{"with fallback", &fb, false},
		{"without fallback", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, v)
			c := newClient(t, v, b, func(cfg *auth.Config) {
				cfg.DiscoveryURL = v.srv.URL + "/no-such-discovery"
				cfg.Fallback = tc.fallback
			})
			tok, err := c.Login(ctx(t), auth.LoginOptions{})
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "discovery") {
					t.Errorf("Login = %v, want an error about discovery", err)
				}
				return
			}
			if err != nil || tok.AccessToken == "" {
				t.Errorf("Login with the fallback endpoints: %v", err)
			}
		})
	}
	// The default discovery URL comes with the built-in endpoints.
	c, err := auth.New(auth.Config{HTTPClient: &http.Client{Transport: failing{}}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Endpoints(ctx(t))
	if err != nil || e != auth.DefaultEndpoints() {
		t.Errorf("Endpoints with the default pool unreachable = %+v, %v; want the built-in ones", e, err)
	}
}

type failing struct{}

func (failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, errors.New("offline") }

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

func TestCheckSSO(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	hc := v.srv.Client()
	for _, tc := range []struct {
		name, endpoint, domain string
		want                   auth.SSO
		wantErr                string
	}{
		{"enabled", v.srv.URL, "corp.test", auth.SSO{Domain: "corp.test", Enabled: true, Identifier: "corp-idp"}, ""},
		{"case", v.srv.URL, "CORP.test", auth.SSO{Domain: "corp.test", Enabled: true, Identifier: "corp-idp"}, ""},
		{"not enabled", v.srv.URL, "example.com", auth.SSO{Domain: "example.com"}, ""},
		{"bare host", strings.TrimPrefix(v.srv.URL, "https://"), "corp.test", auth.SSO{Domain: "corp.test", Enabled: true, Identifier: "corp-idp"}, ""},
		{"http refused", "http://" + strings.TrimPrefix(v.srv.URL, "https://"), "corp.test", auth.SSO{}, "https"},
		{"not a domain", v.srv.URL, "you@corp.test", auth.SSO{}, "not an e-mail domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := auth.CheckSSO(ctx(t), hc, tc.endpoint, tc.domain)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("CheckSSO = %+v, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("CheckSSO = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	// Any non-2xx answer is an HTTP error: 404 is not "no single
	// sign-on" (that is 200 without domain_identifier).
	for _, status := range []int{http.StatusNotFound, http.StatusBadGateway, http.StatusUnauthorized} {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, http.StatusText(status), status)
		}))
		got, err := auth.CheckSSO(ctx(t), srv.Client(), srv.URL, "corp.test")
		srv.Close()
		var he *auth.HTTPError
		if !errors.As(err, &he) || he.Status != status {
			t.Errorf("CheckSSO with a %d = %+v, %v; want an *HTTPError", status, got, err)
		}
	}
	// 200 with {} is a domain without single sign-on.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	got, err := auth.CheckSSO(ctx(t), srv.Client(), srv.URL, "corp.test")
	if err != nil || got != (auth.SSO{Domain: "corp.test"}) {
		t.Errorf("CheckSSO of {} = %+v, %v; want not enabled", got, err)
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
