package relayclient

// How an agent reaches its relay: one way for the HTTP calls (Open,
// Check) and the WebSocket (Dial), so that a network where one works and
// the other does not cannot happen.
//
// A proxy is chosen for each connection as net/http chooses one:
// HTTPS_PROXY for an https relay, HTTP_PROXY for an http one, none for a
// host NO_PROXY names or a loopback address (the variables are read when
// the connection is made). Through an http or https proxy the connection
// is a CONNECT tunnel, for the HTTP calls as for the WebSocket (which has
// no other way through a proxy): a proxy that refuses the tunnel is seen
// at the first call, not halfway. Credentials in the proxy's URL
// (http://user:password@proxy:3128) go as Proxy-Authorization: Basic.
// socks5:// proxies work too. TLS to the relay (wss, https) runs inside
// the tunnel, with Network.TLS (a private CA: listen --relay-ca).
//
// When the relay cannot be reached, the error is an *UnreachableError
// that names the relay (and the proxy), says what happened in words and
// what to check: a proxy only when one is in play (used, or possibly
// needed to reach a relay beyond this machine; never for a loopback
// relay). The agent says it once, and only counts the tries that fail
// alike (agent/conn.go).

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpproxy"
	"golang.org/x/net/proxy"
)

// Network configures how an agent reaches its relay. The zero value
// uses the proxy of the environment, the system's roots and a TCP dialer
// with a 10 s timeout.
type Network struct {
	// Proxy returns the proxy for a connection to the relay at u (scheme
	// http or https, host:port), or nil for none. Default: the environment's
	// HTTP_PROXY, HTTPS_PROXY and NO_PROXY, read at each connection.
	Proxy func(u *url.URL) (*url.URL, error)
	// TLS, when set, is used for an https relay: RootCAs to trust a
	// private CA. ServerName is set for each relay.
	TLS *tls.Config
	// DialContext makes the TCP connections, to the relay or to its
	// proxy. Default: a net.Dialer with a 10 s timeout.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

const dialTimeout = 10 * time.Second

// HTTPClient returns a client for the relay's HTTP API that reaches it as
// Dial does, with this timeout for each call.
func (n Network) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: n.transport()}
}

func (n Network) transport() *http.Transport {
	return &http.Transport{
		// No Proxy: dial tunnels through the proxy itself, as for the
		// WebSocket.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return n.dial(ctx, "http", addr)
		},
		DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := n.dial(ctx, "https", addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, n.tlsConfig(addr))
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		},
		// Open and Check are one call each now and then: no connection
		// is kept for later (and no goroutine with it).
		DisableKeepAlives: true, TLSHandshakeTimeout: dialTimeout,
	}
}

// tlsConfig is Network.TLS (or the defaults) for the relay at addr.
func (n Network) tlsConfig(addr string) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if n.TLS != nil {
		c = n.TLS.Clone()
	}
	if c.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		c.ServerName = host
	}
	return c
}

// hopError is a failure on the way to the relay: reaching the proxy
// (toProxy), the proxy refusing the tunnel (status), or reaching the
// relay.
type hopError struct {
	addr    string   // the relay's host:port
	proxy   *url.URL // nil: no proxy
	toProxy bool
	status  string // the proxy's answer to CONNECT, when not 200
	code    int
	err     error
}

func (e *hopError) Error() string {
	switch {
	case e.status != "":
		return fmt.Sprintf("proxy %s answered CONNECT %s with %s", e.proxy.Redacted(), e.addr, e.status)
	case e.toProxy:
		return fmt.Sprintf("proxy %s: %v", e.proxy.Redacted(), e.err)
	}
	return e.err.Error()
}

func (e *hopError) Unwrap() error { return e.err }

// proxyFor is the proxy for a connection to addr by scheme, or nil.
func (n Network) proxyFor(scheme, addr string) (*url.URL, error) {
	u := &url.URL{Scheme: scheme, Host: addr}
	if n.Proxy != nil {
		return n.Proxy(u)
	}
	p, err := httpproxy.FromEnvironment().ProxyFunc()(u)
	if err != nil {
		return nil, fmt.Errorf("the proxy in %s: %w", proxyVar(scheme), err)
	}
	return p, nil
}

// proxyVar is the environment variable that names the proxy for scheme.
func proxyVar(scheme string) string {
	if scheme == "https" {
		return "HTTPS_PROXY"
	}
	return "HTTP_PROXY"
}

func (n Network) netDial(ctx context.Context, addr string) (net.Conn, error) {
	if n.DialContext != nil {
		return n.DialContext(ctx, "tcp", addr)
	}
	return (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", addr)
}

// dial connects to addr, the relay's host:port for scheme (http or
// https), through the proxy when there is one. TLS to the relay is the
// caller's.
func (n Network) dial(ctx context.Context, scheme, addr string) (net.Conn, error) {
	p, err := n.proxyFor(scheme, addr)
	if err != nil {
		return nil, err
	}
	if p == nil {
		c, err := n.netDial(ctx, addr)
		if err != nil {
			return nil, &hopError{addr: addr, err: err}
		}
		return c, nil
	}
	switch p.Scheme {
	case "http", "https":
		return n.tunnel(ctx, p, addr)
	case "socks5", "socks5h":
		var auth *proxy.Auth
		if p.User != nil {
			pw, _ := p.User.Password()
			auth = &proxy.Auth{User: p.User.Username(), Password: pw}
		}
		d, err := proxy.SOCKS5("tcp", proxyAddr(p), auth, dialerFunc(n.netDial))
		if err != nil {
			return nil, &hopError{addr: addr, proxy: p, toProxy: true, err: err}
		}
		c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, &hopError{addr: addr, proxy: p, toProxy: true, err: err}
		}
		return c, nil
	}
	return nil, fmt.Errorf("the proxy %s (%s) has scheme %q: use http://, https:// or socks5://", p.Redacted(), proxyVar(scheme), p.Scheme)
}

// dialerFunc makes a dial function a proxy.Dialer and ContextDialer.
type dialerFunc func(ctx context.Context, addr string) (net.Conn, error)

func (f dialerFunc) Dial(_, addr string) (net.Conn, error) { return f(context.Background(), addr) }
func (f dialerFunc) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	return f(ctx, addr)
}

// proxyAddr is the proxy's host:port, with the scheme's port when the
// URL has none.
func proxyAddr(p *url.URL) string {
	if p.Port() != "" {
		return p.Host
	}
	port := map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[p.Scheme]
	return net.JoinHostPort(p.Hostname(), port)
}

// tunnel opens a CONNECT tunnel to addr through the http(s) proxy p.
func (n Network) tunnel(ctx context.Context, p *url.URL, addr string) (net.Conn, error) {
	fail := func(err error) error { return &hopError{addr: addr, proxy: p, toProxy: true, err: err} }
	c, err := n.netDial(ctx, proxyAddr(p))
	if err != nil {
		return nil, fail(err)
	}
	if p.Scheme == "https" {
		tc := tls.Client(c, &tls.Config{ServerName: p.Hostname(), MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fail(err)
		}
		c = tc
	}
	// The exchange is bounded by ctx and by the dial timeout.
	deadline := time.Now().Add(dialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if p.User != nil {
		pw, _ := p.User.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.User.Username()+":"+pw)))
	}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, fail(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fail(fmt.Errorf("reading the answer to CONNECT: %w", err))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, &hopError{addr: addr, proxy: p, status: resp.Status, code: resp.StatusCode,
			err: fmt.Errorf("CONNECT %s: %s", addr, resp.Status)}
	}
	if !stop() {
		c.Close()
		return nil, fail(ctx.Err())
	}
	c.SetDeadline(time.Time{})
	if br.Buffered() > 0 { // the relay spoke first: keep what was read
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// bufferedConn is a tunnel whose first bytes were read with the proxy's
// answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// UnreachableError is the error of Open, Check and Dial when the relay
// could not be reached: which relay, through which proxy, what happened
// and what to check. It is not check.UnreachableError, which is about
// the developer's handler: this one is about the relay and the network
// (proxy, DNS, TLS) on the way to it.
type UnreachableError struct {
	Relay  string // the relay's URL, as given
	Proxy  string // the proxy's URL without its password; "" for none
	Reason string // what happened
	Check  string // what to check
	// UnknownAuthority is set when the certificate the relay (or a proxy
	// that inspects TLS) showed is signed by an authority this machine
	// does not trust: a CA to trust (Network.TLS) is the fix, which the
	// program that sets it names for its user.
	UnknownAuthority bool
	Err              error
}

func (e *UnreachableError) Error() string {
	s := "cannot reach the relay " + e.Relay
	if e.Proxy != "" {
		s += " through the proxy " + e.Proxy
	}
	return s + ": " + e.Reason + ". " + e.Check + " (" + e.Err.Error() + ")"
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// unreachable explains err, met while reaching the relay at relayURL, as
// an *UnreachableError; an error that is not about reaching it comes back
// as it is.
func unreachable(relayURL string, err error) error {
	var ue *UnreachableError
	if err == nil || errors.As(err, &ue) || errors.Is(err, context.Canceled) {
		return err // explained already, or stopped on purpose
	}
	u, perr := url.Parse(relayURL)
	if perr != nil {
		return err
	}
	scheme := u.Scheme
	if scheme == "ws" || scheme == "wss" {
		scheme = map[string]string{"ws": "http", "wss": "https"}[scheme]
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[scheme])
	}
	e := &UnreachableError{Relay: relayURL, Err: err}
	var hop *hopError
	if errors.As(err, &hop) {
		host = hop.addr
		if hop.proxy != nil {
			e.Proxy = hop.proxy.Redacted()
		}
	}
	viaProxy := e.Proxy != ""
	// A proxy is never used for a relay on this machine: no word of one.
	proxyHint := !viaProxy && !loopbackHost(u.Hostname())
	pvar := proxyVar(scheme)
	noProxy := fmt.Sprintf("a proxy in the way? This network may reach out only through one (%s=http://proxy:port; NO_PROXY lists hosts reached directly)", pvar)
	var (
		dnsErr  *net.DNSError
		unknown x509.UnknownAuthorityError
		badHost x509.HostnameError
		invalid x509.CertificateInvalidError
		recErr  tls.RecordHeaderError
		netErr  net.Error
	)
	switch {
	case hop != nil && hop.status != "" && hop.code == http.StatusProxyAuthRequired:
		e.Reason = "the proxy answered " + hop.status + " to CONNECT " + host
		if hop.proxy.User == nil {
			e.Check = fmt.Sprintf("The proxy needs credentials: put them in %s as http://user:password@%s", pvar, hop.proxy.Host)
		} else {
			e.Check = fmt.Sprintf("The proxy refused the user %q and its password: check them in %s (special characters in the password are %%-encoded)", hop.proxy.User.Username(), pvar)
		}
	case hop != nil && hop.status != "":
		e.Reason = "the proxy answered " + hop.status + " to CONNECT " + host
		e.Check = fmt.Sprintf("The proxy could not or would not open a tunnel to the relay: check the relay's address; a proxy may allow tunnels to port 443 only, or to some hosts only; NO_PROXY=%s reaches the relay directly", u.Hostname())
	case hop != nil && hop.toProxy && errors.Is(err, syscall.ECONNREFUSED):
		e.Reason = "nothing accepts connections at the proxy's address"
		e.Check = fmt.Sprintf("Check the proxy in %s, or name the relay's host in NO_PROXY to reach it directly", pvar)
	case hop != nil && hop.toProxy && errors.As(err, &dnsErr):
		e.Reason = fmt.Sprintf("the proxy's name %s does not resolve", dnsErr.Name)
		e.Check = fmt.Sprintf("Check the proxy in %s", pvar)
	case hop != nil && hop.toProxy && strings.HasPrefix(hop.proxy.Scheme, "socks"):
		e.Reason = "the SOCKS5 proxy refused or failed the connection to " + host
		e.Check = fmt.Sprintf("Check the proxy and its user and password in %s, and the relay's address", pvar)
	case hop != nil && hop.toProxy:
		e.Reason = "the proxy could not be reached or did not answer"
		e.Check = fmt.Sprintf("Check the proxy in %s, or name the relay's host in NO_PROXY to reach it directly", pvar)
	case errors.As(err, &unknown):
		e.Reason = "its certificate is signed by an authority this machine does not trust"
		if unknown.Cert != nil {
			e.Reason += " (" + unknown.Cert.Issuer.String() + ")"
		}
		e.Check = "A relay with a certificate of a private CA: trust that CA (a PEM file of its certificate). A proxy that inspects TLS signs with its own CA: trust that one"
		e.UnknownAuthority = true
	case errors.As(err, &badHost):
		e.Reason = "its certificate is not for " + u.Hostname()
		if badHost.Certificate != nil {
			e.Reason += " but for " + strings.Join(append(append([]string(nil), badHost.Certificate.DNSNames...), ipStrings(badHost.Certificate.IPAddresses)...), ", ")
		}
		e.Check = "Check the relay's address: use the name its certificate is for"
	case errors.As(err, &invalid):
		e.Reason = "its certificate is not valid: " + invalid.Error()
		e.Check = "The relay's certificate may have expired (or this machine's clock is wrong): the relay's operator renews it"
	case errors.As(err, &recErr) || strings.Contains(err.Error(), "server gave HTTP response") || strings.Contains(err.Error(), "first record does not look like a TLS handshake"):
		e.Reason = host + " does not speak TLS"
		e.Check = "A relay without TLS has an http:// URL"
	case errors.Is(err, syscall.ECONNREFUSED):
		e.Reason = "nothing accepts connections at " + host + " (connection refused)"
		e.Check = "Is the relay running, and is this its address and port?"
		if proxyHint {
			e.Check += " Or " + noProxy
		}
	case errors.As(err, &dnsErr):
		e.Reason = fmt.Sprintf("the name %s does not resolve", dnsErr.Name)
		e.Check = "Check the relay's address"
		if proxyHint {
			e.Check += "; or " + noProxy
		}
	case errors.As(err, &netErr) && netErr.Timeout() || errors.Is(err, context.DeadlineExceeded):
		e.Reason = "no answer from " + host + " in time"
		switch {
		case viaProxy:
			e.Check = "Is the relay running at this address? The proxy or a firewall may hold the connection"
		case proxyHint:
			e.Check = "Is the relay running at this address? A firewall may drop the connection, or " + noProxy
		default:
			e.Check = "Is the relay running at this address, and not stopped or overloaded?"
		}
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		e.Reason = "the connection to " + host + " failed"
		e.Check = "Is the relay running at this address?"
		if proxyHint {
			e.Check += " Or " + noProxy
		}
	default:
		var opErr *net.OpError
		var tlsErr *tls.CertificateVerificationError
		if !errors.As(err, &opErr) && !errors.As(err, &tlsErr) && hop == nil {
			return err // not about reaching the relay
		}
		e.Reason = "the connection to " + host + " failed"
		e.Check = "Check the relay's address"
	}
	return e
}

// loopbackHost reports whether host names this machine (localhost, a
// loopback address), which no proxy stands in the way of: the
// environment's proxy is never used for it.
func loopbackHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

func ipStrings(ips []net.IP) []string {
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}
