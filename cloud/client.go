// Package cloud is a client of the service's API: webhooks, their secrets
// and conversations, the event trigger, applications, runs and the
// organizations of the caller (docs/INTERFACE.md: the interface, and what
// devhook chose where it says nothing).
//
//	c, err := cloud.New(cloud.Config{Endpoint: "http://127.0.0.1:4010", Credentials: cloud.APIKey("key")})
//	hooks, err := c.ListWebhooks(ctx)
//
// Every call has a timeout. An answer other than 2xx is an *auth.HTTPError with
// the status, the service's message and a hint at what to do; a call that
// gets no answer is an error naming the address.
package cloud

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/devhook/devhook/auth"
)

// DefaultTimeout bounds each call when Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// maxAnswer is the most of an answer read.
const maxAnswer = 16 << 20

// Credentials give the bearer credential of each call: an API key, or
// (once sign-in exists) a signed-in session's access token.
type Credentials interface {
	Token(ctx context.Context) (string, error)
}

// APIKey is a Credentials that is the key itself.
type APIKey string

// Token returns the key.
func (k APIKey) Token(context.Context) (string, error) { return string(k), nil }

// ErrNoCredentials is returned by New when no credentials are given.
var ErrNoCredentials = errors.New("no API key")

// ErrNoEndpoint is returned by New when no endpoint is given.
var ErrNoEndpoint = errors.New("no endpoint")

// Config configures a Client. Zero values mean defaults.
type Config struct {
	// Endpoint is the API base URL, such as https://api.example.com or
	// http://127.0.0.1:4010. A bare host gets https://. Required.
	Endpoint string
	// Credentials sign every call. Required.
	Credentials Credentials
	// Team, when set, is sent as the service-account header: the call acts
	// for that team. It must be the team's id (see ResolveTeam).
	Team string
	// HTTPClient makes the calls; nil means a client with Timeout.
	HTTPClient *http.Client
	// Timeout bounds each call; 0 means DefaultTimeout.
	Timeout time.Duration
	// UserAgent; empty means "devhook".
	UserAgent string
}

// Client calls the service's API.
type Client struct {
	cfg  Config
	base *url.URL
	http *http.Client
}

// New validates cfg and returns a client.
func New(cfg Config) (*Client, error) {
	if cfg.Endpoint == "" {
		return nil, ErrNoEndpoint
	}
	if cfg.Credentials == nil {
		return nil, ErrNoCredentials
	}
	base, err := ParseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "devhook"
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: cfg.Timeout}
	}
	return &Client{cfg: cfg, base: base, http: hc}, nil
}

// ParseEndpoint parses an API base URL; a bare host (with or without a
// port) gets https://.
func ParseEndpoint(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q is not an http or https URL (such as https://api.example.com or http://127.0.0.1:4010)", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// Endpoint returns the API base URL the client calls.
func (c *Client) Endpoint() string { return c.base.String() }

// Team returns the team id the client acts for, or "".
func (c *Client) Team() string { return c.cfg.Team }

// WithTeam returns a client acting for the team id.
func (c *Client) WithTeam(id string) *Client {
	cc := *c
	cc.cfg.Team = id
	return &cc
}

// IsLoopback reports whether the endpoint is on this machine.
func (c *Client) IsLoopback() bool { return IsLoopbackHost(c.base.Hostname()) }

// IsLoopbackHost reports whether host names this machine: localhost or a
// loopback address.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var ae *auth.HTTPError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// IsConflict reports whether err is a 409 answer.
func IsConflict(err error) bool {
	var ae *auth.HTTPError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict
}

// path joins escaped segments onto the base path.
func path(segs ...string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// do sends one call and returns the answer's body. in, when not nil, is
// sent as JSON. query may be nil.
func (c *Client) do(ctx context.Context, method, p string, query url.Values, in any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	u := *c.base
	u.RawPath = c.base.EscapedPath() + p
	u.Path, _ = url.PathUnescape(u.RawPath)
	if query != nil {
		u.RawQuery = query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode the request to %s %s: %w", method, u.Path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	tok, err := c.cfg.Credentials.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("get a credential for %s %s: %w", method, u.Path, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.Team != "" {
		req.Header.Set("service-account", c.cfg.Team)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s %s: no answer from %s within %s: %w", method, u.Path, c.base.Host, c.cfg.Timeout, err)
		}
		return nil, fmt.Errorf("%s %s: cannot reach the service at %s (is the endpoint right, and is it running?): %w", method, u.Path, c.base.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer from %s: %w", method, u.Path, c.base.Host, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, c.apiError(method, u.Path, resp.StatusCode, b)
	}
	return json.RawMessage(b), nil
}

func (c *Client) apiError(method, p string, status int, body []byte) *auth.HTTPError {
	e := &auth.HTTPError{Method: method, URL: p, Status: status}
	var m struct {
		Error   any    `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &m) == nil && (m.Error != nil || m.Message != "") {
		switch v := m.Error.(type) {
		case string:
			e.Message = v
		case nil:
		default:
			b, _ := json.Marshal(v)
			e.Message = string(b)
		}
		if e.Message == "" {
			e.Message = m.Message
		}
	} else {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 300 {
			e.Message = e.Message[:300] + "…"
		}
	}
	switch status {
	case http.StatusUnauthorized:
		if _, key := c.cfg.Credentials.(APIKey); key {
			e.Hint = "the API key is missing, wrong or revoked: API keys come from the account settings in the web console (with devhook emulate, from the keys it prints); give one with --api-key, SERVICE_API_KEY or apikey in ~/.service/config.yaml"
		} else {
			e.Hint = "the service refused the signed-in session: sign in again with devhook login, or give an API key with --api-key or SERVICE_API_KEY"
		}
		if c.cfg.Team != "" {
			e.Hint += "; check --team too"
		}
	case http.StatusForbidden:
		e.Hint = "the key or team has no access to this; check --team"
	case http.StatusNotFound:
		switch {
		case strings.HasPrefix(p, "/v1/webhooks/"):
			e.Hint = "list the webhooks with: devhook webhooks list"
		case strings.HasPrefix(p, "/v1/applications/") && strings.Contains(p, "/runs/"):
			e.Hint = "check the application and the run: devhook runs list APP lists an application's runs"
		case strings.HasPrefix(p, "/v1/applications/"):
			e.Hint = "check the application id; create one with: devhook apps create ID --name NAME"
		default:
			e.Hint = "is the endpoint " + c.base.String() + " the service's API?"
		}
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		e.Hint = "the service is busy or down: try again in a moment"
	}
	return e
}

// explain gives an answer of status to one call its meaning for that
// call (a 409 to a create is an id taken; to a cancel, a run that has
// ended), beside the service's message: what a status means depends on
// the call, so the calls say it, not apiError.
func explain(err error, status int, hint string) error {
	var ae *auth.HTTPError
	if errors.As(err, &ae) && ae.Status == status {
		ae.Hint = hint
	}
	return err
}

// call sends one call and decodes the answer into out (when not nil). It
// returns the raw answer too.
func (c *Client) call(ctx context.Context, method, p string, query url.Values, in, out any) (json.RawMessage, error) {
	raw, err := c.do(ctx, method, p, query, in)
	if err != nil {
		return nil, err
	}
	if out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("%s %s: the answer is not the JSON expected: %w", method, p, err)
		}
	}
	return raw, nil
}
