package emulator

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The identity provider signs every sign-in in at once: there is no login
// page. Its codes and browser sessions live in memory; the tokens it issues
// are kept with the rest of the state.

// authCode is an authorization code waiting to be exchanged.
type authCode struct {
	clientID, redirectURI, challenge string
	id                               identity
	expiresAt                        time.Time
}

// identity is who signed in, and through which provider.
type identity struct {
	email, provider string
}

func (id identity) subject() string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("mailto:"+id.email)).String()
}

const sessionCookie = "idp_session"

func (e *Emulator) organizations(w http.ResponseWriter, r *http.Request, c *call) error {
	writeJSON(w, http.StatusOK, e.cfg.Teams)
	return nil
}

func (e *Emulator) ssoDomain(w http.ResponseWriter, r *http.Request, c *call) error {
	domain := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("domain")))
	if domain == "" {
		return errorf(http.StatusBadRequest, "missing query parameter: domain (an e-mail domain)")
	}
	for d, ident := range e.cfg.SSODomains {
		if strings.EqualFold(d, domain) {
			writeJSON(w, http.StatusOK, map[string]string{"domain_identifier": ident})
			return nil
		}
	}
	// A domain without single sign-on is 200 with an empty object, as
	// docs/INTERFACE.md says: the check's non-2xx answers are errors only.
	writeJSON(w, http.StatusOK, map[string]string{})
	return nil
}

func (e *Emulator) discovery(w http.ResponseWriter, r *http.Request, c *call) error {
	base := e.baseURL(r)
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                base,
		"authorization_endpoint":                base + pathAuthorize,
		"token_endpoint":                        base + pathToken,
		"end_session_endpoint":                  base + pathEndSession,
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token"},
		"code_challenge_methods_supported":      []string{"S256"},
		"scopes_supported":                      []string{"openid", "email", "profile"},
		"token_endpoint_auth_methods_supported": []string{"none"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"none"},
	})
	return nil
}

// oauthError answers a token or authorization request the OAuth way.
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	body := map[string]string{"error": code}
	if desc != "" {
		body["error_description"] = desc
	}
	writeJSON(w, status, body)
}

func validRedirect(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Fragment != "" {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		h := u.Hostname()
		return h == "127.0.0.1" || h == "localhost" || h == "::1"
	}
	return false
}

func (e *Emulator) authorize(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	redirectURI, clientID := q.Get("redirect_uri"), q.Get("client_id")
	switch {
	case clientID == "":
		oauthError(w, http.StatusBadRequest, "invalid_request", "missing client_id")
		return nil
	case e.cfg.ClientID != "" && clientID != e.cfg.ClientID:
		oauthError(w, http.StatusBadRequest, "unauthorized_client", "unknown client_id")
		return nil
	case !validRedirect(redirectURI):
		oauthError(w, http.StatusBadRequest, "invalid_request", "redirect_uri must be an https URL or an http URL on a loopback address")
		return nil
	}
	back := func(params url.Values) {
		u, _ := url.Parse(redirectURI)
		rq := u.Query()
		for k, vs := range params {
			rq[k] = vs
		}
		if s := q.Get("state"); s != "" {
			rq.Set("state", s)
		}
		u.RawQuery = rq.Encode()
		http.Redirect(w, r, u.String(), http.StatusFound)
	}
	fail := func(code, desc string) error {
		back(url.Values{"error": {code}, "error_description": {desc}})
		return nil
	}
	if q.Get("response_type") != "code" {
		return fail("unsupported_response_type", "response_type must be code")
	}
	if !hasScope(q.Get("scope"), "openid") {
		return fail("invalid_scope", "scope must include openid")
	}
	if q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256" {
		return fail("invalid_request", "PKCE is required: send code_challenge with code_challenge_method S256")
	}
	id, ok := e.signIn(r, q.Get("identity_provider"))
	if !ok {
		return fail("invalid_request", "unknown identity_provider "+q.Get("identity_provider"))
	}
	code, err := e.random("", 24)
	if err != nil {
		return err
	}
	sess, err := e.random("", 16)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.codes[code] = &authCode{clientID: clientID, redirectURI: redirectURI, challenge: q.Get("code_challenge"),
		id: id, expiresAt: e.now().Add(e.cfg.CodeTTL)}
	e.sessions[sess] = id
	e.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sess, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
	back(url.Values{"code": {code}})
	return nil
}

// signIn decides who signs in: the browser session's user unless another
// identity provider is asked for; through a provider that is a single
// sign-on domain's identifier, a user of that domain.
func (e *Emulator) signIn(r *http.Request, provider string) (identity, bool) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		e.mu.Lock()
		id, ok := e.sessions[ck.Value]
		e.mu.Unlock()
		if ok && (provider == "" || provider == id.provider) {
			return id, true
		}
	}
	if provider == "" {
		return identity{email: e.cfg.UserEmail}, true
	}
	local, _, _ := strings.Cut(e.cfg.UserEmail, "@")
	for domain, ident := range e.cfg.SSODomains {
		if ident == provider {
			return identity{email: local + "@" + domain, provider: provider}, true
		}
	}
	return identity{}, false
}

func hasScope(scope, want string) bool {
	for _, s := range strings.Fields(scope) {
		if s == want {
			return true
		}
	}
	return false
}

func (e *Emulator) tokenEndpoint(w http.ResponseWriter, r *http.Request, c *call) error {
	w.Header().Set("Cache-Control", "no-store")
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		oauthError(w, http.StatusBadRequest, "invalid_request", "the token request must be form-encoded (application/x-www-form-urlencoded)")
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, e.cfg.MaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "the form cannot be read")
		return nil
	}
	f := r.PostForm
	switch f.Get("grant_type") {
	case "authorization_code":
		return e.exchangeCode(w, f, e.baseURL(r))
	case "refresh_token":
		return e.refresh(w, f, e.baseURL(r))
	case "":
		oauthError(w, http.StatusBadRequest, "invalid_request", "missing grant_type")
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "")
	}
	return nil
}

// invalidGrant is the answer clients recognize: a 400 with exactly
// {"error":"invalid_grant"}.
func invalidGrant(w http.ResponseWriter) { oauthError(w, http.StatusBadRequest, "invalid_grant", "") }

func (e *Emulator) exchangeCode(w http.ResponseWriter, f url.Values, issuer string) error {
	for _, p := range []string{"code", "redirect_uri", "code_verifier", "client_id"} {
		if f.Get(p) == "" {
			oauthError(w, http.StatusBadRequest, "invalid_request", "missing "+p)
			return nil
		}
	}
	e.mu.Lock()
	ac := e.codes[f.Get("code")]
	delete(e.codes, f.Get("code")) // a code is good for one exchange, right or wrong
	e.mu.Unlock()
	if ac == nil || !e.now().Before(ac.expiresAt) || ac.clientID != f.Get("client_id") ||
		ac.redirectURI != f.Get("redirect_uri") || !verifyPKCE(f.Get("code_verifier"), ac.challenge) {
		invalidGrant(w)
		return nil
	}
	return e.issueTokens(w, issuer, ac.id, ac.clientID, false)
}

// verifyPKCE checks BASE64URL(SHA256(verifier)) against the S256 challenge.
func verifyPKCE(verifier, challenge string) bool {
	if len(verifier) < 43 || len(verifier) > 128 {
		return false
	}
	sum := sha256.Sum256([]byte(verifier))
	got := base64.RawURLEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(got), []byte(challenge)) == 1
}

func (e *Emulator) refresh(w http.ResponseWriter, f url.Values, issuer string) error {
	rt := f.Get("refresh_token")
	if rt == "" {
		oauthError(w, http.StatusBadRequest, "invalid_request", "missing refresh_token")
		return nil
	}
	k := tokenKey(rt)
	e.mu.Lock()
	t := e.st.tokens[k]
	if t == nil || t.Kind != "refresh" || t.Used || !e.now().Before(t.ExpiresAt) ||
		(f.Get("client_id") != "" && f.Get("client_id") != t.ClientID) {
		e.mu.Unlock()
		invalidGrant(w)
		return nil
	}
	if !e.cfg.NoRotateRefresh {
		used := *t
		used.Used = true // refresh tokens rotate: each is good once
		if err := e.persist(op{bucketTokens, k, &used}); err != nil {
			e.mu.Unlock()
			return err
		}
		e.st.tokens[k] = &used
	}
	e.mu.Unlock()
	return e.issueTokens(w, issuer, identity{email: t.Email, provider: t.Provider}, t.ClientID, e.cfg.NoRotateRefresh)
}

// issueTokens answers a token request with new access and id tokens and,
// unless keepRefresh (a refresh that does not rotate), a new refresh token.
func (e *Emulator) issueTokens(w http.ResponseWriter, issuer string, id identity, clientID string, keepRefresh bool) error {
	access, err := e.random("at_", 32)
	if err != nil {
		return err
	}
	var refresh string
	if !keepRefresh {
		if refresh, err = e.random("rt_", 32); err != nil {
			return err
		}
	}
	jti, err := e.random("", 16)
	if err != nil {
		return err
	}
	now := e.now()
	exp := now.Add(e.cfg.TokenTTL)
	claims := map[string]any{"iss": issuer, "sub": id.subject(), "aud": clientID, "email": id.email,
		"email_verified": true, "iat": now.Unix(), "exp": exp.Unix(), "jti": jti}
	if id.provider != "" {
		claims["identity_provider"] = id.provider
	}
	cb, _ := json.Marshal(claims)
	// An unsigned JWT ("alg": "none"): readable, not verifiable.
	idToken := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString(cb) + "."
	rec := func(kind string, ttl time.Duration) *token {
		return &token{Kind: kind, Subject: id.subject(), Email: id.email, ClientID: clientID, Provider: id.provider, ExpiresAt: now.Add(ttl)}
	}
	ops := []op{
		{bucketTokens, tokenKey(access), rec("access", e.cfg.TokenTTL)},
		{bucketTokens, tokenKey(idToken), rec("id", e.cfg.TokenTTL)},
	}
	if refresh != "" {
		ops = append(ops, op{bucketTokens, tokenKey(refresh), rec("refresh", e.cfg.RefreshTTL)})
	}
	e.mu.Lock()
	if err := e.persist(ops...); err != nil {
		e.mu.Unlock()
		return err
	}
	for _, o := range ops {
		e.st.tokens[o.key] = o.value.(*token)
	}
	e.mu.Unlock()
	answer := map[string]any{
		"access_token": access, "id_token": idToken,
		"token_type": "Bearer", "expires_in": int64(e.cfg.TokenTTL / time.Second),
	}
	if refresh != "" {
		answer["refresh_token"] = refresh
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

// endSession clears the browser's session with the identity provider and,
// when the request carries authorization parameters, chains into a fresh
// authorization with all of them.
func (e *Emulator) endSession(w http.ResponseWriter, r *http.Request, c *call) error {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		e.mu.Lock()
		delete(e.sessions, ck.Value)
		e.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true})
	q := r.URL.Query()
	if q.Get("response_type") != "" || q.Get("redirect_uri") != "" {
		http.Redirect(w, r, e.baseURL(r)+pathAuthorize+"?"+q.Encode(), http.StatusFound)
		return nil
	}
	if to := q.Get("logout_uri"); validRedirect(to) {
		http.Redirect(w, r, to, http.StatusFound)
		return nil
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("Signed out.\n"))
	return nil
}
