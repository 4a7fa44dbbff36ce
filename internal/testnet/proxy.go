// Package testnet holds what tests of the network between an agent and
// its relay need: a real forward proxy (CONNECT tunnels, Basic
// credentials, host names only it resolves) and a private CA.
package testnet

import (
	"bufio"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	// User and Password, when User is set, are required in
	// Proxy-Authorization: Basic; without them the proxy answers 407.
	User, Password string
	// Hosts maps host names to the IP address the proxy connects to for
	// them. A name not in Hosts is looked up in DNS by the proxy (a .test
	// name fails, and the proxy answers 502).
	Hosts map[string]string
}

// Proxy is a forward proxy on 127.0.0.1 that opens a TCP connection for
// each CONNECT it accepts and pipes bytes both ways, as a company proxy
// does. Any other method gets 405: devhook tunnels everything.
type Proxy struct {
	cfg   ProxyConfig
	ln    net.Listener
	socks bool // a SOCKS5 proxy rather than an HTTP one

	mu       sync.Mutex
	closed   bool
	conns    map[net.Conn]struct{}
	connects []string // CONNECT targets it opened a tunnel to
	refused  []string // requests it refused, with the status
	wg       sync.WaitGroup
}

// StartProxy starts an HTTP proxy, closed when the test ends.
func StartProxy(tb testing.TB, cfg ProxyConfig) *Proxy {
	tb.Helper()
	return start(tb, cfg, false)
}

// StartSOCKS5 starts a SOCKS5 proxy (RFC 1928; with User, the
// username/password method of RFC 1929), closed when the test ends.
func StartSOCKS5(tb testing.TB, cfg ProxyConfig) *Proxy {
	tb.Helper()
	return start(tb, cfg, true)
}

func start(tb testing.TB, cfg ProxyConfig, socks bool) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{cfg: cfg, ln: ln, socks: socks, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// URL is the proxy's URL with its credentials (user and password given),
// as HTTPS_PROXY holds it.
func (p *Proxy) URL(user, password string) string {
	u := &url.URL{Scheme: "http", Host: p.ln.Addr().String()}
	if p.socks {
		u.Scheme = "socks5"
	}
	if user != "" {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Connects returns the targets of the tunnels the proxy opened so far.
func (p *Proxy) Connects() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.connects...)
}

// Refused returns the requests the proxy refused so far ("407 CONNECT
// host:port").
func (p *Proxy) Refused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track adds c to the connections Close closes; false (and c closed)
// when the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.serve(c)
		}()
	}
}

func (p *Proxy) refuse(c net.Conn, status int, what string, header string) {
	p.mu.Lock()
	p.refused = append(p.refused, http.StatusText(status)+" "+what)
	p.mu.Unlock()
	io.WriteString(c, "HTTP/1.1 "+strconv.Itoa(status)+" "+http.StatusText(status)+"\r\n"+header+"Content-Length: 0\r\nConnection: close\r\n\r\n")
}

// serve answers one client connection: one CONNECT (or SOCKS5
// request), then the tunnel.
func (p *Proxy) serve(c net.Conn) {
	br := bufio.NewReader(c)
	var up net.Conn
	if p.socks {
		up = p.socksHandshake(c, br)
	} else {
		up = p.connectHandshake(c, br)
	}
	if up == nil {
		return
	}
	defer p.untrack(up)
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, br) // what the client sent after the handshake, buffered or not
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	io.Copy(c, up)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	<-done
}

// dialTarget connects to host:port as the proxy resolves it, and
// records the tunnel; nil when it cannot.
func (p *Proxy) dialTarget(target string) net.Conn {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return nil
	}
	if ip, ok := p.cfg.Hosts[host]; ok {
		host = ip
	}
	up, err := net.Dial("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil
	}
	if !p.track(up) {
		return nil
	}
	p.mu.Lock()
	p.connects = append(p.connects, target)
	p.mu.Unlock()
	return up
}

// connectHandshake reads a CONNECT request and answers it; it returns the
// connection to the target, or nil when refused.
func (p *Proxy) connectHandshake(c net.Conn, br *bufio.Reader) net.Conn {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil
	}
	what := req.Method + " " + req.Host
	if req.Method != http.MethodConnect {
		p.refuse(c, http.StatusMethodNotAllowed, what, "")
		return nil
	}
	if p.cfg.User != "" && !p.authorized(req.Header.Get("Proxy-Authorization")) {
		p.refuse(c, http.StatusProxyAuthRequired, what, "Proxy-Authenticate: Basic realm=\"devhook-test\"\r\n")
		return nil
	}
	up := p.dialTarget(req.Host)
	if up == nil {
		p.refuse(c, http.StatusBadGateway, what, "")
		return nil
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		p.untrack(up)
		return nil
	}
	return up
}

func (p *Proxy) authorized(h string) bool {
	enc, ok := strings.CutPrefix(h, "Basic ")
	if !ok {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return false
	}
	user, pw, _ := strings.Cut(string(b), ":")
	return user == p.cfg.User && pw == p.cfg.Password
}
