package emulator_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

const redirectURI = "http://127.0.0.1:56734/"

// pkce is one sign-in's verifier and its S256 challenge.
type pkce struct{ verifier, challenge string }

func newPKCE(seed string) pkce {
	v := strings.Repeat(seed, 64)[:64]
	sum := sha256.Sum256([]byte(v))
	return pkce{verifier: v, challenge: base64.RawURLEncoding.EncodeToString(sum[:])}
}

func authParams(p pkce, extra ...string) url.Values {
	q := url.Values{"response_type": {"code"}, "client_id": {"devhook-cli"}, "redirect_uri": {redirectURI},
		"scope": {"openid email profile"}, "state": {"st-123"}, "code_challenge": {p.challenge}, "code_challenge_method": {"S256"}}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			q.Del(extra[i])
		} else {
			q.Set(extra[i], extra[i+1])
		}
	}
	return q
}

// get follows no redirect and returns the answer and its Location.
func get(t *testing.T, c *http.Client, u string) (*http.Response, *url.URL) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	loc, _ := resp.Location()
	return resp, loc
}

// authorize runs the authorization request and returns the redirect's query.
func (v *env) authorize(q url.Values) url.Values {
	v.t.Helper()
	resp, loc := get(v.t, noRedirect, v.srv.URL+"/oauth2/authorize?"+q.Encode())
	if resp.StatusCode != http.StatusFound || loc == nil {
		v.t.Fatalf("authorize: %d, want a 302 redirect", resp.StatusCode)
	}
	if !strings.HasPrefix(loc.String(), redirectURI+"?") {
		v.t.Fatalf("redirected to %s, want %s", loc, redirectURI)
	}
	return loc.Query()
}

func (v *env) token(form url.Values) (int, map[string]any, []byte) {
	v.t.Helper()
	resp, err := noRedirect.PostForm(v.srv.URL+"/oauth2/token", form)
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		v.t.Fatalf("token answer %s: %v", b, err)
	}
	return resp.StatusCode, m, b
}

func codeForm(code string, p pkce) url.Values {
	return url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {p.verifier},
		"redirect_uri": {redirectURI}, "client_id": {"devhook-cli"}}
}

func wantInvalidGrant(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	if status != 400 || strings.TrimSpace(string(body)) != `{"error":"invalid_grant"}` {
		t.Errorf(`%s: %d %s, want 400 {"error":"invalid_grant"}`, what, status, body)
	}
}

// claims decodes an id token's payload.
func claims(t *testing.T, idToken string) map[string]any {
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
	return m
}

func TestDiscovery(t *testing.T) {
	v := newEnv(t, testConfig())
	var d map[string]any
	v.do("GET", "/.well-known/openid-configuration", nil, 200, &d)
	for k, path := range map[string]string{"authorization_endpoint": "/oauth2/authorize", "token_endpoint": "/oauth2/token",
		"end_session_endpoint": "/logout", "issuer": ""} {
		if d[k] != v.srv.URL+path {
			t.Errorf("%s = %v, want %s (absolute, from the request's host)", k, d[k], v.srv.URL+path)
		}
	}
	if !equalJSON(d["code_challenge_methods_supported"], []string{"S256"}) {
		t.Errorf("code_challenge_methods_supported %v", d["code_challenge_methods_supported"])
	}
	// With a base URL it is used as is; no credential is needed.
	cfg := testConfig()
	cfg.BaseURL = "https://service.test/"
	v2 := newEnv(t, cfg)
	status, _, b := v2.request("", "GET", "/.well-known/openid-configuration", nil)
	json.Unmarshal(b, &d)
	if status != 200 || d["token_endpoint"] != "https://service.test/oauth2/token" {
		t.Errorf("discovery with BaseURL: %d %s", status, b)
	}
}

func TestSignIn(t *testing.T) {
	clock := newClock(time.Now())
	cfg := testConfig()
	cfg.Now = clock.Now
	cfg.SSODomains = map[string]string{"corp.test": "corp-idp"}
	v := newEnv(t, cfg)
	p := newPKCE("abc")

	q := v.authorize(authParams(p))
	if q.Get("state") != "st-123" || q.Get("code") == "" || q.Get("error") != "" {
		t.Fatalf("redirect query %v", q)
	}
	status, tok, raw := v.token(codeForm(q.Get("code"), p))
	if status != 200 {
		t.Fatalf("token: %d %s", status, raw)
	}
	sameKeys(t, "token answer", raw, "access_token", "id_token", "refresh_token", "token_type", "expires_in")
	if tok["token_type"] != "Bearer" || tok["expires_in"] != 3600.0 {
		t.Errorf("token answer %s", raw)
	}
	c := claims(t, tok["id_token"].(string))
	if c["email"] != emulator.DefaultUserEmail || c["aud"] != "devhook-cli" || c["sub"] == "" || c["iss"] != v.srv.URL {
		t.Errorf("id token claims %v", c)
	}

	// The access token and the id token both work as bearer credentials.
	for _, k := range []string{"access_token", "id_token"} {
		status, _, b := v.request(tok[k].(string), "GET", "/v1/internal/me/organization", nil)
		if status != 200 {
			t.Errorf("organization with %s: %d %s", k, status, b)
		}
	}
	// The signed-in user's account is their own, apart from the API keys'.
	status, _, b := v.request(tok["access_token"].(string), "POST", "/v1/webhooks", webhookBody("mine", "http://127.0.0.1:9/"))
	if status != 201 {
		t.Fatalf("create as user: %d %s", status, b)
	}
	v.do("GET", "/v1/webhooks/mine", nil, 404, nil)

	// A code is good once.
	status, _, raw = v.token(codeForm(q.Get("code"), p))
	wantInvalidGrant(t, "used code", status, raw)

	// Refresh: new tokens, the refresh token rotates.
	refresh := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)}, "client_id": {"devhook-cli"}}
	status, tok2, raw := v.token(refresh)
	if status != 200 || tok2["access_token"] == tok["access_token"] || tok2["refresh_token"] == "" {
		t.Fatalf("refresh: %d %s", status, raw)
	}
	status, _, raw = v.token(refresh)
	wantInvalidGrant(t, "used refresh token", status, raw)
	status, _, raw = v.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"rt_unknown"}})
	wantInvalidGrant(t, "unknown refresh token", status, raw)
	status, _, raw = v.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok2["access_token"].(string)}})
	wantInvalidGrant(t, "access token as refresh token", status, raw)

	// Tokens expire: the API refuses an expired access token, the token
	// endpoint an expired code or refresh token.
	q = v.authorize(authParams(p))
	clock.Advance(time.Hour)
	status, _, b = v.request(tok2["access_token"].(string), "GET", "/v1/webhooks", nil)
	wantError(t, "expired access token", status, b, 401)
	status, _, raw = v.token(codeForm(q.Get("code"), p))
	wantInvalidGrant(t, "expired code", status, raw)
	clock.Advance(31 * 24 * time.Hour)
	status, _, raw = v.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok2["refresh_token"].(string)}})
	wantInvalidGrant(t, "expired refresh token", status, raw)
}

func TestPKCEAndTokenErrors(t *testing.T) {
	cfg := testConfig()
	cfg.ClientID = "devhook-cli"
	v := newEnv(t, cfg)
	p := newPKCE("xyz")

	code := v.authorize(authParams(p)).Get("code")
	status, _, raw := v.token(codeForm(code, newPKCE("wrong")))
	wantInvalidGrant(t, "wrong verifier", status, raw)
	status, _, raw = v.token(codeForm(code, p))
	wantInvalidGrant(t, "right verifier after a wrong one", status, raw)

	mismatch := []struct {
		name string
		edit func(url.Values)
	}{
		{"plain verifier as challenge", func(f url.Values) { f.Set("code_verifier", p.challenge) }},
		{"other redirect_uri", func(f url.Values) { f.Set("redirect_uri", "http://127.0.0.1:1/") }},
		{"other client", func(f url.Values) { f.Set("client_id", "someone-else") }},
		{"unknown code", func(f url.Values) { f.Set("code", "nope") }},
	}
	for _, m := range mismatch {
		code := v.authorize(authParams(p)).Get("code")
		f := codeForm(code, p)
		m.edit(f)
		status, _, raw := v.token(f)
		wantInvalidGrant(t, m.name, status, raw)
	}

	requestErrors := []struct {
		name string
		form url.Values
		want string
	}{
		{"no grant_type", url.Values{"code": {"x"}}, "invalid_request"},
		{"other grant", url.Values{"grant_type": {"password"}}, "unsupported_grant_type"},
		{"no verifier", url.Values{"grant_type": {"authorization_code"}, "code": {"x"}, "redirect_uri": {redirectURI}, "client_id": {"c"}}, "invalid_request"},
		{"no refresh token", url.Values{"grant_type": {"refresh_token"}}, "invalid_request"},
	}
	for _, e := range requestErrors {
		status, m, raw := v.token(e.form)
		if status != 400 || m["error"] != e.want {
			t.Errorf("%s: %d %s, want 400 %s", e.name, status, raw, e.want)
		}
	}
	// JSON is not a token request; GET is not allowed.
	resp, err := http.Post(v.srv.URL+"/oauth2/token", "application/json", strings.NewReader(`{"grant_type":"refresh_token"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("JSON token request: %d", resp.StatusCode)
	}
	status, _, b := v.request("", "GET", "/oauth2/token", nil)
	wantError(t, "GET token", status, b, 405)

	// Authorization requests that cannot be redirected are answered 400.
	for name, q := range map[string]url.Values{
		"no redirect_uri":       authParams(p, "redirect_uri", ""),
		"non-loopback http":     authParams(p, "redirect_uri", "http://evil.test/"),
		"unknown client":        authParams(p, "client_id", "other"),
		"no client":             authParams(p, "client_id", ""),
		"redirect with fragmnt": authParams(p, "redirect_uri", redirectURI+"#x"),
	} {
		resp, _ := get(t, noRedirect, v.srv.URL+"/oauth2/authorize?"+q.Encode())
		if resp.StatusCode != 400 {
			t.Errorf("authorize with %s: %d, want 400", name, resp.StatusCode)
		}
	}
	// The others redirect back with the error and the state.
	for name, tc := range map[string]struct {
		q    url.Values
		want string
	}{
		"no challenge":          {authParams(p, "code_challenge", ""), "invalid_request"},
		"plain method":          {authParams(p, "code_challenge_method", "plain"), "invalid_request"},
		"token response":        {authParams(p, "response_type", "token"), "unsupported_response_type"},
		"no openid scope":       {authParams(p, "scope", "email"), "invalid_scope"},
		"unknown provider":      {authParams(p, "identity_provider", "nope"), "invalid_request"},
		"no state still errors": {authParams(p, "state", "", "code_challenge", ""), "invalid_request"},
	} {
		q := v.authorize(tc.q)
		if q.Get("error") != tc.want || q.Get("code") != "" || q.Get("state") != tc.q.Get("state") {
			t.Errorf("authorize with %s: redirect query %v, want error %s", name, q, tc.want)
		}
	}
}

// TestIdentityProviderAndEndSession: identity_provider chooses who signs in;
// the end-session endpoint clears the session and chains into a fresh
// authorization with every parameter.
func TestIdentityProviderAndEndSession(t *testing.T) {
	cfg := testConfig()
	cfg.SSODomains = map[string]string{"corp.test": "corp-idp"}
	cfg.UserEmail = "dev@home.test"
	v := newEnv(t, cfg)
	p := newPKCE("sso")
	jar := newJar(t)
	browser := &http.Client{Jar: jar, Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	signIn := func(u string) string {
		t.Helper()
		// Follow redirects inside the provider, stop at the callback.
		for range 5 {
			resp, loc := get(t, browser, u)
			if resp.StatusCode != http.StatusFound {
				t.Fatalf("%s: %d", u, resp.StatusCode)
			}
			if strings.HasPrefix(loc.String(), redirectURI) {
				q := loc.Query()
				if q.Get("state") != "st-123" || q.Get("code") == "" {
					t.Fatalf("callback %v", q)
				}
				status, tok, raw := v.token(codeForm(q.Get("code"), p))
				if status != 200 {
					t.Fatalf("token: %d %s", status, raw)
				}
				return claims(t, tok["id_token"].(string))["email"].(string)
			}
			u = loc.String()
		}
		t.Fatal("too many redirects")
		return ""
	}
	authURL := v.srv.URL + "/oauth2/authorize?"
	if got := signIn(authURL + authParams(p, "identity_provider", "corp-idp").Encode()); got != "dev@corp.test" {
		t.Errorf("signed in through corp-idp as %q, want dev@corp.test", got)
	}
	// The browser session keeps the provider's user.
	if got := signIn(authURL + authParams(p).Encode()); got != "dev@corp.test" {
		t.Errorf("second sign-in as %q, want the session's dev@corp.test", got)
	}
	// force: end the session with client_id and every authorization
	// parameter; the provider redirects into a fresh authorization.
	q := authParams(p)
	resp, loc := get(t, browser, v.srv.URL+"/logout?"+q.Encode())
	if resp.StatusCode != http.StatusFound || loc.Path != "/oauth2/authorize" || loc.Host != strings.TrimPrefix(v.srv.URL, "http://") {
		t.Fatalf("end session: %d to %v", resp.StatusCode, loc)
	}
	if !equalJSON(loc.Query(), q) {
		t.Errorf("end session chained with %v, want %v", loc.Query(), q)
	}
	if got := signIn(loc.String()); got != "dev@home.test" {
		t.Errorf("after end session signed in as %q, want the default dev@home.test", got)
	}
	// Without authorization parameters it just signs out.
	resp, _ = get(t, browser, v.srv.URL+"/logout")
	if resp.StatusCode != 200 {
		t.Errorf("plain end session: %d", resp.StatusCode)
	}
}

func TestOrganizationsAndSSO(t *testing.T) {
	teams := []emulator.Team{
		{ID: "11111111-1111-4111-8111-111111111111", Name: "One", Role: "admin"},
		{ID: "22222222-2222-4222-8222-222222222222", Name: "Two", Role: "member", PendingInvite: true},
	}
	cfg := testConfig()
	cfg.Teams = teams
	cfg.SSODomains = map[string]string{"Corp.Test": "corp-idp"}
	v := newEnv(t, cfg)

	var orgs []json.RawMessage
	v.do("GET", "/v1/internal/me/organization", nil, 200, &orgs)
	if len(orgs) != 2 {
		t.Fatalf("organizations: %d", len(orgs))
	}
	for i, o := range orgs {
		sameKeys(t, "organization", o, "id", "name", "role", "pending_invite")
		var got emulator.Team
		json.Unmarshal(o, &got)
		if got != teams[i] {
			t.Errorf("organization %d: %+v, want %+v", i, got, teams[i])
		}
	}
	// The default: one team.
	var def []emulator.Team
	newEnv(t, testConfig()).do("GET", "/v1/internal/me/organization", nil, 200, &def)
	if len(def) != 1 || def[0] != emulator.DefaultTeam() {
		t.Errorf("default organizations %+v", def)
	}
	status, _, b := v.request(testKey, "POST", "/v1/internal/me/organization", nil)
	wantError(t, "POST organization", status, b, 405)

	// The single sign-on check needs no credential.
	for _, tc := range []struct {
		query string
		want  int
		body  string
	}{
		{"domain=corp.test", 200, `{"domain_identifier":"corp-idp"}`},
		{"domain=CORP.TEST", 200, `{"domain_identifier":"corp-idp"}`},
		// A domain without single sign-on: 200 with no domain_identifier.
		{"domain=other.test", 200, `{}`},
		{"", 400, ""}, {"domain=", 400, ""},
	} {
		status, _, b := v.request("", "GET", "/v1/enterprise/sso/domain?"+tc.query, nil)
		if tc.want == 200 {
			if status != 200 || strings.TrimSpace(string(b)) != tc.body {
				t.Errorf("sso %s: %d %s; want 200 %s", tc.query, status, b, tc.body)
			}
			continue
		}
		wantError(t, "sso "+tc.query, status, b, tc.want)
	}
}

// TestSignatureVectors checks this package's independent verifier against
// the spec's vectors, so that a delivery it accepts is one the reference
// receiver accepts.
func TestSignatureVectors(t *testing.T) {
	b, err := os.ReadFile("../signature/testdata/signature-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vec struct {
		Secret string
		Body   string
		Cases  []struct {
			Name    string
			Header  *string
			Secret  *string `json:"secret_override"`
			Body    *string
			NowMS   int64 `json:"now_ms"`
			SkewMS  int64 `json:"skew_ms"`
			Status  int
			Text    string
			Verdict string
		}
	}
	if err := json.Unmarshal(b, &vec); err != nil {
		t.Fatal(err)
	}
	if len(vec.Cases) < 5 {
		t.Fatalf("only %d vectors", len(vec.Cases))
	}
	for _, c := range vec.Cases {
		secret, body, header := vec.Secret, vec.Body, ""
		if c.Secret != nil {
			secret = *c.Secret
		}
		if c.Body != nil {
			body = *c.Body
		}
		if c.Header != nil {
			header = *c.Header
		}
		status, text := checkSignature(secret, header, []byte(body), c.NowMS, c.SkewMS)
		if status != c.Status || (c.Text != "" && text != c.Text) {
			t.Errorf("%s: %d %q, want %d %q", c.Name, status, text, c.Status, c.Text)
		}
	}
}

// TestRefreshRotation: by default each refresh token is good once and each
// refresh answer brings a new one; with NoRotateRefresh the answer has no
// refresh_token and the old one keeps working until it expires.
func TestRefreshRotation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noRotate bool
	}{
		{"rotate", false},
		{"no rotate", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock(time.Now())
			cfg := testConfig()
			cfg.Now = clock.Now
			cfg.NoRotateRefresh = tc.noRotate
			v := newEnv(t, cfg)
			p := newPKCE("rot")
			status, tok, raw := v.token(codeForm(v.authorize(authParams(p)).Get("code"), p))
			if status != 200 || tok["refresh_token"] == nil {
				t.Fatalf("code exchange: %d %s (the first answer always has a refresh token)", status, raw)
			}
			rt := tok["refresh_token"].(string)
			form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {"devhook-cli"}}
			status, tok2, raw := v.token(form)
			if status != 200 || tok2["access_token"] == nil {
				t.Fatalf("refresh: %d %s", status, raw)
			}
			_, hasRT := tok2["refresh_token"]
			if hasRT == tc.noRotate {
				t.Errorf("refresh answer has refresh_token: %v, want %v (%s)", hasRT, !tc.noRotate, raw)
			}
			status, tok3, raw := v.token(form)
			if tc.noRotate {
				if status != 200 || tok3["access_token"] == tok2["access_token"] {
					t.Fatalf("second refresh with the same token: %d %s, want 200 with a new access token", status, raw)
				}
				status, _, b := v.request(tok3["access_token"].(string), "GET", "/v1/webhooks", nil)
				if status != 200 {
					t.Errorf("API call with the refreshed access token: %d %s", status, b)
				}
				clock.Advance(31 * 24 * time.Hour)
				status, _, raw = v.token(form)
				wantInvalidGrant(t, "expired refresh token without rotation", status, raw)
			} else {
				wantInvalidGrant(t, "used refresh token", status, raw)
			}
		})
	}
}
