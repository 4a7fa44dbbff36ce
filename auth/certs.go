package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// EnvSystemCerts set to 1, true or yes (any case, trimmed) trusts the
// operating system's certificate store.
const EnvSystemCerts = "SERVICE_SYSTEM_CERTS"

// UseSystemCerts decides which roots to trust: the environment variable's
// value (EnvSystemCerts) when it says 1, true or yes, and otherwise the
// profile's system_certs. The environment takes precedence.
func UseSystemCerts(env string, profile bool) bool {
	switch strings.ToLower(strings.TrimSpace(env)) {
	case "1", "true", "yes":
		return true
	}
	return profile
}

// RootCAs returns the roots to trust: the operating system's store (on
// Unix, SSL_CERT_FILE and SSL_CERT_DIR choose it) when system is true,
// otherwise the built-in Mozilla root bundle.
func RootCAs(system bool) (*x509.CertPool, error) {
	if system {
		p, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("load the operating system's certificates (unset %s and system_certs to use the built-in bundle): %w", EnvSystemCerts, err)
		}
		return p, nil
	}
	p := x509.NewCertPool()
	for r := range bundle.Roots() {
		c, err := x509.ParseCertificate(r.Certificate)
		if err != nil {
			return nil, fmt.Errorf("parse the built-in root certificates: %w", err)
		}
		if r.Constraint == nil {
			p.AddCert(c)
		} else {
			p.AddCertWithConstraint(c, r.Constraint)
		}
	}
	return p, nil
}

// NewHTTPClient returns a client with timeout that trusts RootCAs(system).
func NewHTTPClient(system bool, timeout time.Duration) (*http.Client, error) {
	pool, err := RootCAs(system)
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t, Timeout: timeout}, nil
}
