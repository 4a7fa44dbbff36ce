package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ErrNotHTTPS is the error of an organization or single sign-on endpoint
// whose scheme is not https.
var ErrNotHTTPS = errors.New("the endpoint must use https")

// HTTPSEndpoint parses the endpoint of the organization and single sign-on
// calls: a bare host (with or without a port) gets https://; any scheme
// other than https is ErrNotHTTPS.
func HTTPSEndpoint(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("no endpoint: give the service's API host with --endpoint, %s or endpoint: in ~/.service/config.yaml", "SERVICE_ENDPOINT")
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q is not a host name or an https URL", s)
	}
	if !strings.EqualFold(u.Scheme, "https") {
		return nil, fmt.Errorf("%w: %q uses %s; sign-in calls go over HTTPS only (give a bare host or an https:// URL; devhook emulate --tls serves HTTPS)", ErrNotHTTPS, s, u.Scheme)
	}
	u.Scheme = "https"
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// SSO is the outcome of a single sign-on check.
type SSO struct {
	Domain  string
	Enabled bool
	// Identifier is the domain_identifier: the identity_provider of a
	// sign-in through the domain's single sign-on.
	Identifier string
}

// CheckSSO asks {endpoint}/v1/enterprise/sso/domain whether the e-mail
// domain has single sign-on. It needs no credential. The check answers
// 200 with or without domain_identifier; any non-2xx answer (404 too) is
// an *HTTPError. The endpoint must be HTTPS.
func CheckSSO(ctx context.Context, hc *http.Client, endpoint, domain string) (SSO, error) {
	domain = strings.ToLower(strings.TrimSpace(domain))
	out := SSO{Domain: domain}
	if domain == "" || strings.ContainsAny(domain, "@/ ") {
		return out, fmt.Errorf("%q is not an e-mail domain (such as example.com)", domain)
	}
	base, err := HTTPSEndpoint(endpoint)
	if err != nil {
		return out, err
	}
	u := *base
	u.Path += "/v1/enterprise/sso/domain"
	u.RawQuery = url.Values{"domain": {domain}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return out, fmt.Errorf("check single sign-on for %s: %w", domain, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return out, fmt.Errorf("check single sign-on for %s (is the endpoint right? %s=1 trusts the system's certificates): %w", domain, EnvSystemCerts, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return out, fmt.Errorf("check single sign-on for %s: reading the answer: %w", domain, err)
	}
	if resp.StatusCode/100 != 2 {
		return out, &HTTPError{Op: "check single sign-on for " + domain, URL: u.String(), Status: resp.StatusCode, Message: compactJSON(b)}
	}
	var m struct {
		DomainIdentifier string `json:"domain_identifier"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return out, fmt.Errorf("check single sign-on for %s: the answer is not JSON: %w", domain, err)
	}
	out.Identifier = m.DomainIdentifier
	out.Enabled = m.DomainIdentifier != ""
	return out, nil
}

// EmailDomain returns the domain of an e-mail address.
func EmailDomain(email string) (string, error) {
	i := strings.LastIndexByte(email, '@')
	if i <= 0 || i == len(email)-1 {
		return "", fmt.Errorf("%q is not an e-mail address (such as you@example.com)", email)
	}
	return strings.ToLower(email[i+1:]), nil
}
