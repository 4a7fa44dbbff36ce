// Package auth signs a person in to the service and keeps their tokens, as
// the service's sign-in works (the stored token record in docs/INTERFACE.md):
//
//   - Login: the PKCE (S256) authorization-code flow through the system
//     browser, with a one-shot callback server on 127.0.0.1:56734;
//   - Store: ~/.service/auth/<session>/tokens.json, 0600 in 0700
//     directories, written atomically;
//   - Refresh and Session: an access token that is valid for at least 30
//     more seconds, refreshed and saved when it is not;
//   - CheckSSO and HTTPSEndpoint: the single sign-on check and the
//     HTTPS-only rule of the organization and single sign-on calls;
//   - RootCAs and UseSystemCerts: the operating system's certificate store
//     or the built-in Mozilla root bundle.
//
// The authorization URL is golang.org/x/oauth2's; the code exchange and
// the refresh are plain form POSTs here (token.go), so that every field of
// the token response is kept.
//
//	c, err := auth.New(auth.Config{DiscoveryURL: "https://127.0.0.1:4010/.well-known/openid-configuration"})
//	tokens, err := c.Login(ctx, auth.LoginOptions{})
//	err = store.Save("default", tokens)
package auth

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// Defaults for Config's zero values.
const (
	// DefaultDiscoveryURL is the discovery document of the service's
	// identity pool; DefaultEndpoints are used when it cannot be fetched.
	DefaultDiscoveryURL = "https://auth.service.example/.well-known/openid-configuration"
	// DefaultClientID is the service's OAuth client for command-line
	// clients.
	DefaultClientID = "devhook-cli"
	// DefaultCallbackAddr is the callback server's address; the redirect
	// URI is http://127.0.0.1:56734/.
	DefaultCallbackAddr = "127.0.0.1:56734"
	// DefaultBrowserTimeout is how long Login waits for the browser.
	DefaultBrowserTimeout = 300 * time.Second
	// DefaultTimeout bounds each call to the identity provider.
	DefaultTimeout = 30 * time.Second
)

// DefaultScopes are the scopes asked for.
func DefaultScopes() []string { return []string{"openid", "email", "profile"} }

// Endpoints are the identity provider's endpoints, from its discovery
// document.
type Endpoints struct {
	Authorization string `json:"authorization_endpoint"`
	Token         string `json:"token_endpoint"`
	EndSession    string `json:"end_session_endpoint"`
}

// DefaultEndpoints are the built-in endpoints of the service's identity
// pool, used when its discovery document cannot be fetched.
func DefaultEndpoints() Endpoints {
	return Endpoints{
		Authorization: "https://auth.service.example/oauth2/authorize",
		Token:         "https://auth.service.example/oauth2/token",
		EndSession:    "https://auth.service.example/logout",
	}
}

// Config configures a Client. Zero values mean defaults.
type Config struct {
	// DiscoveryURL is the identity provider's discovery document; empty
	// means DefaultDiscoveryURL.
	DiscoveryURL string
	// Fallback are the endpoints used when discovery fails. Nil means
	// DefaultEndpoints when DiscoveryURL is the default, and none (the
	// failure is an error) for another provider.
	Fallback *Endpoints
	// ClientID is the OAuth client; empty means DefaultClientID.
	ClientID string
	// Scopes; nil means DefaultScopes.
	Scopes []string
	// HTTPClient calls the identity provider; nil means a client with
	// DefaultTimeout that trusts the built-in root bundle.
	HTTPClient *http.Client
	// CallbackAddr is where the callback server listens; empty means
	// DefaultCallbackAddr. Tests use 127.0.0.1:0.
	CallbackAddr string
	// BrowserTimeout is how long Login waits for the browser's redirect;
	// 0 means DefaultBrowserTimeout.
	BrowserTimeout time.Duration
	// OpenBrowser shows the person the URL; nil means OpenSystemBrowser.
	// It should return soon: Login waits for the redirect after it.
	OpenBrowser func(ctx context.Context, url string) error

	Now  func() time.Time // nil = time.Now
	Rand io.Reader        // verifier and state; nil = crypto/rand
}

// Client signs in and refreshes against one identity provider.
type Client struct {
	cfg Config

	mu        sync.Mutex
	endpoints *Endpoints // discovered, once it worked
}

// New validates cfg and returns a client. It makes no call.
func New(cfg Config) (*Client, error) {
	if cfg.DiscoveryURL == "" {
		cfg.DiscoveryURL = DefaultDiscoveryURL
		if cfg.Fallback == nil {
			d := DefaultEndpoints()
			cfg.Fallback = &d
		}
	}
	if u, err := url.Parse(cfg.DiscoveryURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("the discovery URL %q is not an absolute https URL (such as https://host/.well-known/openid-configuration)", cfg.DiscoveryURL)
	}
	if cfg.ClientID == "" {
		cfg.ClientID = DefaultClientID
	}
	if cfg.Scopes == nil {
		cfg.Scopes = DefaultScopes()
	}
	if cfg.HTTPClient == nil {
		hc, err := NewHTTPClient(false, DefaultTimeout)
		if err != nil {
			return nil, err
		}
		cfg.HTTPClient = hc
	}
	if cfg.CallbackAddr == "" {
		cfg.CallbackAddr = DefaultCallbackAddr
	}
	if cfg.BrowserTimeout < 0 {
		return nil, fmt.Errorf("the browser timeout %s is negative", cfg.BrowserTimeout)
	}
	if cfg.BrowserTimeout == 0 {
		cfg.BrowserTimeout = DefaultBrowserTimeout
	}
	if cfg.OpenBrowser == nil {
		cfg.OpenBrowser = OpenSystemBrowser
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	return &Client{cfg: cfg}, nil
}

// ClientID returns the OAuth client id in use.
func (c *Client) ClientID() string { return c.cfg.ClientID }

// Errors of the flow. The interface's "value error", "timeout error",
// "runtime error" and "HTTP error" are ErrInvalidSession and ErrNotHTTPS,
// ErrTimeout, *ProviderError and *HTTPError.
var (
	// ErrTimeout: the browser did not come back within the timeout.
	ErrTimeout = errors.New("sign-in timed out")
	// ErrInvalidGrant matches (errors.Is) an *HTTPError that is a 400
	// answer with error invalid_grant: the refresh token or code is no
	// longer good.
	ErrInvalidGrant = errors.New("invalid_grant")
	// ErrNotSignedIn: the session has no stored tokens.
	ErrNotSignedIn = errors.New("not signed in")
	// ErrNoEndSession: a forced sign-in needs the provider's
	// end_session_endpoint, which its discovery document does not give.
	ErrNoEndSession = errors.New("the identity provider's discovery document has no end_session_endpoint")
	// ErrBrowser: Config.OpenBrowser failed; the error wraps its cause.
	ErrBrowser = errors.New("cannot open the browser")
	// ErrDiscovery: the provider's discovery document could not be
	// fetched (and there is no fallback); the error wraps the cause.
	ErrDiscovery = errors.New("cannot fetch the discovery document")
)

// ProviderError is an error the identity provider sent back to the
// callback instead of a code.
type ProviderError struct {
	Code, Description, URI string
}

func (e *ProviderError) Error() string {
	s := "the identity provider refused the sign-in: " + e.Code
	if e.Description != "" {
		s += ": " + e.Description
	}
	if e.URI != "" {
		s += " (" + e.URI + ")"
	}
	return s
}

// HTTPError is an answer other than 2xx from the service or its identity
// provider: the token endpoint, the discovery document, the single
// sign-on check, and every call of the service's API (package cloud).
// It is the one type for the idea, here because auth is the lowest
// package that meets such answers (cloud imports auth), and because
// ErrInvalidGrant, which it matches, is an OAuth idea.
type HTTPError struct {
	// Op is what was being done, such as "exchange the code for tokens";
	// "" for a call of the service's API, which Method and URL name.
	Op     string
	Method string // the request's method, with Op ""
	URL    string // the URL (or, for an API call, the path) that answered
	Status int
	// Message is the answer's message: the service's {"error": …}, or the
	// body's text (compacted when it is JSON).
	Message string
	// Code is the OAuth error code of a token endpoint answer, if any.
	Code string
	// Hint says what to do, when there is something to say.
	Hint string
}

func (e *HTTPError) Error() string {
	var s string
	if e.Op != "" {
		s = fmt.Sprintf("%s: %s answered %d %s", e.Op, e.URL, e.Status, http.StatusText(e.Status))
	} else {
		s = fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Status, http.StatusText(e.Status))
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrInvalidGrant) true for a 400 invalid_grant.
func (e *HTTPError) Is(target error) bool {
	return target == ErrInvalidGrant && e.Status == http.StatusBadRequest && e.Code == "invalid_grant"
}

// maxBody bounds what is read of an answer.
const maxBody = 1 << 20

// Endpoints returns the provider's endpoints from its discovery document,
// or the fallback when the document cannot be had and there is one.
func (c *Client) Endpoints(ctx context.Context) (Endpoints, error) {
	c.mu.Lock()
	if c.endpoints != nil {
		e := *c.endpoints
		c.mu.Unlock()
		return e, nil
	}
	c.mu.Unlock()
	e, err := c.discover(ctx)
	if err != nil {
		if c.cfg.Fallback == nil {
			return Endpoints{}, err
		}
		return *c.cfg.Fallback, nil
	}
	c.mu.Lock()
	c.endpoints = &e
	c.mu.Unlock()
	return e, nil
}

func (c *Client) discover(ctx context.Context) (Endpoints, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.DiscoveryURL, nil)
	if err != nil {
		return Endpoints{}, fmt.Errorf("fetch the discovery document %s: %w", c.cfg.DiscoveryURL, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return Endpoints{}, fmt.Errorf("%w (check its URL, and the certificates: %s=1 trusts the system's store): %w", ErrDiscovery, EnvSystemCerts, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Endpoints{}, fmt.Errorf("read the discovery document %s: %w", c.cfg.DiscoveryURL, err)
	}
	if resp.StatusCode/100 != 2 {
		return Endpoints{}, &HTTPError{Op: "fetch the discovery document", URL: c.cfg.DiscoveryURL, Status: resp.StatusCode, Message: compactJSON(b)}
	}
	var e Endpoints
	if err := json.Unmarshal(b, &e); err != nil {
		return Endpoints{}, fmt.Errorf("the discovery document %s is not JSON: %w", c.cfg.DiscoveryURL, err)
	}
	if e.Authorization == "" || e.Token == "" {
		return Endpoints{}, fmt.Errorf("the discovery document %s lacks authorization_endpoint or token_endpoint; is it an OpenID provider's?", c.cfg.DiscoveryURL)
	}
	return e, nil
}

// oauthConfig is x/oauth2's view of the client.
func (c *Client) oauthConfig(e Endpoints, redirectURI string) *oauth2.Config {
	return &oauth2.Config{
		ClientID:    c.cfg.ClientID,
		Endpoint:    oauth2.Endpoint{AuthURL: e.Authorization, TokenURL: e.Token, AuthStyle: oauth2.AuthStyleInParams},
		RedirectURL: redirectURI,
		Scopes:      c.cfg.Scopes,
	}
}

// Refresh trades old's refresh token for new tokens, at old's token
// endpoint and client (when it has them; the discovered endpoint and the
// configured client otherwise). An answer without refresh_token keeps the
// old one. What it returns is the whole answer (every field, known or
// not) plus expires_at; old's other fields are carried over where the
// answer does not have them. A 400 invalid_grant is an
// *HTTPError matching ErrInvalidGrant; any other non-2xx is an *HTTPError
// too.
func (c *Client) Refresh(ctx context.Context, old *Tokens) (*Tokens, error) {
	if old == nil || old.RefreshToken == "" {
		return nil, errors.New("refresh: there is no refresh token; sign in again with devhook login")
	}
	tokenURL := old.TokenEndpoint
	if tokenURL == "" {
		e, err := c.Endpoints(ctx)
		if err != nil {
			return nil, fmt.Errorf("refresh: %w", err)
		}
		tokenURL = e.Token
	}
	clientID := c.cfg.ClientID
	if old.ClientID != "" {
		clientID = old.ClientID
	}
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {old.RefreshToken}, "client_id": {clientID}}
	nt, err := c.tokenRequest(ctx, "refresh the tokens", tokenURL, form)
	if err != nil {
		return nil, err
	}
	nt.ClientID = clientID
	if nt.RefreshToken == "" {
		nt.RefreshToken = old.RefreshToken
	}
	if nt.IDToken == "" {
		nt.IDToken = old.IDToken
	}
	// The old record's other fields stay, under the answer's own.
	for k, v := range old.Extra {
		if _, ok := nt.Extra[k]; ok {
			continue
		}
		if nt.Extra == nil {
			nt.Extra = make(map[string]json.RawMessage)
		}
		nt.Extra[k] = v
	}
	return nt, nil
}

// Session is the signed-in session's credentials: Token returns an access
// token valid for at least ExpiryMargin more, refreshing and saving the
// tokens first when the stored one is not. It satisfies cloud.Credentials.
type Session struct {
	name   string
	store  *Store
	client *Client

	mu sync.Mutex // one refresh at a time
}

// Session returns the credentials of the named session (see ValidSession).
func (c *Client) Session(store *Store, name string) (*Session, error) {
	if err := ValidSession(name); err != nil {
		return nil, err
	}
	return &Session{name: name, store: store, client: c}, nil
}

// Name returns the session's name.
func (s *Session) Name() string { return s.name }

// Token returns a valid access token.
func (s *Session) Token(ctx context.Context) (string, error) {
	t, err := s.Tokens(ctx)
	if err != nil {
		return "", err
	}
	return t.AccessToken, nil
}

// Tokens returns the session's tokens, refreshed and saved first when the
// access token has expired. A refresh answered invalid_grant deletes the
// stored tokens: the person must sign in again, and the error says so.
func (s *Session) Tokens(ctx context.Context) (*Tokens, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.store.Load(s.name)
	if err != nil {
		return nil, err
	}
	if t == nil || t.AccessToken == "" {
		return nil, fmt.Errorf("%w (session %q): sign in with devhook login%s, or give an API key", ErrNotSignedIn, s.name, sessionFlag(s.name))
	}
	if !t.Expired(s.client.cfg.Now()) {
		return t, nil
	}
	nt, err := s.client.Refresh(ctx, t)
	if errors.Is(err, ErrInvalidGrant) {
		if derr := s.store.Delete(s.name); derr != nil {
			return nil, fmt.Errorf("%w; and removing the stored tokens failed: %w", err, derr)
		}
		return nil, fmt.Errorf("the session %q has ended (the identity provider refused its refresh token) and its tokens were removed: sign in again with devhook login%s: %w", s.name, sessionFlag(s.name), err)
	}
	if err != nil {
		return nil, fmt.Errorf("the access token of session %q has expired and refreshing it failed: %w", s.name, err)
	}
	if err := s.store.Save(s.name, nt); err != nil {
		return nil, err
	}
	return nt, nil
}

func sessionFlag(name string) string {
	if name == DefaultSession {
		return ""
	}
	return " --session " + name
}
