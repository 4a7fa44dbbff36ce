package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// relayTLS is the relay's HTTPS: certificates from an ACME CA for --domain
// (autocert: TLS-ALPN-01 on the HTTPS port, HTTP-01 on the HTTP port), or
// from --tls-cert/--tls-key files, reloaded when they change.
type relayTLS struct {
	config *tls.Config
	// httpHandler serves the plain HTTP port: ACME HTTP-01 challenges,
	// and a redirect to HTTPS for everything else.
	httpHandler http.Handler
}

// newRelayTLS sets up HTTPS from the options. client talks to the ACME
// directory.
// httpsAddr is the address HTTPS is served on.
func (o *relayOptions) newRelayTLS(logger *log.Logger, client *http.Client, httpsAddr string) (*relayTLS, error) {
	var rt relayTLS
	redirect := redirectHandler(o.domain, httpsAddr)
	// HTTP/1.1 only, as the plain relay: agents' WebSockets need it, and
	// senders post one request at a time.
	protos := []string{"http/1.1"}
	switch {
	case o.domain != "":
		m := &autocert.Manager{
			Prompt:     autocert.AcceptTOS,
			Cache:      autocert.DirCache(filepath.Join(o.dataDir, "acme")),
			HostPolicy: autocert.HostWhitelist(o.domain),
			Email:      o.acmeEmail,
			Client:     &acme.Client{DirectoryURL: o.acmeDirectory, HTTPClient: client},
		}
		challenges := m.HTTPHandler(redirect)
		rt.httpHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// autocert checks the Host against the domain, port included:
			// the challenge may reach a port other than 80 (forwarded).
			if h, _, err := net.SplitHostPort(r.Host); err == nil {
				r2 := *r
				r2.Host = h
				r = &r2
			}
			challenges.ServeHTTP(w, r)
		})
		rt.config = &tls.Config{
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				c, err := m.GetCertificate(hello)
				if err != nil && hello.ServerName != "" {
					logger.Printf("relay: certificate for %q: %v", hello.ServerName, err)
				}
				return c, err
			},
			NextProtos: append(protos, acme.ALPNProto),
		}
	default:
		cf := &certFiles{cert: o.tlsCert, key: o.tlsKey, logf: logger.Printf}
		if _, err := cf.get(nil); err != nil {
			return nil, err
		}
		rt.httpHandler = redirect
		rt.config = &tls.Config{GetCertificate: cf.get, NextProtos: protos}
	}
	rt.config.MinVersion = tls.VersionTLS12
	return &rt, nil
}

// validDomain checks --domain: a host name, without scheme, port or path.
func validDomain(d string) error {
	if strings.ContainsAny(d, ":/ ") || !strings.Contains(strings.Trim(d, "."), ".") || net.ParseIP(d) != nil {
		return fmt.Errorf("--domain %q must be a DNS name such as hooks.example.com (no scheme, port or path), pointing at this machine", d)
	}
	return nil
}

// publicURLFor is the public URL of a relay serving domain on httpsAddr.
func publicURLFor(domain, httpsAddr string) string {
	if _, port, err := net.SplitHostPort(httpsAddr); err == nil && port != "443" && port != "" && port != "0" {
		return "https://" + net.JoinHostPort(domain, port)
	}
	return "https://" + domain
}

// redirectHandler sends every plain HTTP request to the same path over
// HTTPS, with 308 so that a POST stays a POST with its body.
func redirectHandler(domain, httpsAddr string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := domain
		if host == "" {
			host = r.Host
			if h, _, err := net.SplitHostPort(r.Host); err == nil {
				host = h
			}
		}
		u := strings.TrimSuffix(publicURLFor(host, httpsAddr), "/") + r.URL.RequestURI()
		w.Header().Set("Location", u)
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusPermanentRedirect)
	})
}

// certFiles serves a certificate kept in files by something else (certbot,
// a secret mount) and loads it again when either file changes, so that a
// renewal needs no restart.
type certFiles struct {
	cert, key string
	logf      func(string, ...any)

	mu      sync.Mutex
	current *tls.Certificate
	stamp   string // modification times and sizes of the two files
}

func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	stamp, err := fileStamp(c.cert, c.key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && stamp == c.stamp && c.current != nil {
		return c.current, nil
	}
	if err == nil {
		var pair tls.Certificate
		pair, err = tls.LoadX509KeyPair(c.cert, c.key)
		if err == nil {
			c.current, c.stamp = &pair, stamp
			return c.current, nil
		}
	}
	err = fmt.Errorf("load --tls-cert %s and --tls-key %s: %w", c.cert, c.key, err)
	if c.current == nil {
		return nil, err
	}
	// Mid-renewal, one file may be new and the other not yet: keep
	// serving the last good pair and try again at the next handshake.
	c.logf("relay: %v; still serving the certificate loaded before", err)
	return c.current, nil
}

func fileStamp(paths ...string) (string, error) {
	var b strings.Builder
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		if !fi.Mode().IsRegular() && fi.Mode()&os.ModeSymlink == 0 {
			return "", errors.New(p + " is not a file")
		}
		fmt.Fprintf(&b, "%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return b.String(), nil
}

// acmeHTTPClient is the client for the ACME directory.
func acmeHTTPClient() *http.Client { return &http.Client{Timeout: 30 * time.Second} }
