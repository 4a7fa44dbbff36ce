package main

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/devhook/devhook/relay"
)

// relayNetwork is how listen reaches its relay, for the channel's HTTP
// calls and the WebSocket alike: the environment's proxy, and --relay-ca.
func (o *listenOptions) relayNetwork() (relay.Network, error) {
	var n relay.Network
	if o.relayCA == "" {
		return n, nil
	}
	pool, err := caPool("--relay-ca", o.relayCA)
	if err != nil {
		return n, err
	}
	n.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return n, nil
}

// caPool is the system's roots and the CA certificates of the PEM file
// given with flag.
func caPool(flag, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", flag, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", flag, file)
	}
	return pool, nil
}

// builtinPublic checks --public-url: the address where something this
// machine runs (a tunnel) takes requests and passes them to --relay-addr.
// It returns the base URL without a trailing slash, or "" without it.
func (o *listenOptions) builtinPublic() (string, error) {
	if o.publicURL == "" {
		return "", nil
	}
	if o.relayURL != "" {
		return "", errors.New("--public-url is the built-in relay's public address; a relay given with --relay has its own (devhook relay serve --public-url): drop one of them")
	}
	u, err := url.Parse(o.publicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", fmt.Errorf("--public-url %q must be an http:// or https:// URL, such as https://hooks.example.com", o.publicURL)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--public-url %q has a path or a query: give the address alone (https://%s); the tunnel passes every path to --relay-addr as it is, and deliveries go to its /c/<channel>/", o.publicURL, u.Host)
	}
	return u.Scheme + "://" + u.Host, nil
}

// newOpenToken is the built-in relay's open token when it is public: no
// one but this listen (which opens its channel in process) may open a
// channel through the tunnel.
func newOpenToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make the built-in relay's open token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
