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
