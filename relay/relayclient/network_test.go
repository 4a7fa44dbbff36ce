package relayclient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/internal/testnet"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// relayName is a host name nothing resolves but the test's proxy (Go
// reaches loopback addresses without a proxy, whatever the environment
// says).
const relayName = "relay.devhook.test"

// namedRelay serves a relay on 127.0.0.1, over TLS with a certificate of
// ca for relayName when ca is not nil, and returns its URL by relayName
// and its real address.
func namedRelay(t *testing.T, ca *testnet.CA) (relayURL, addr string) {
	t.Helper()
	db, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := relay.NewServer(relay.Config{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	hs := httptest.NewUnstartedServer(srv)
	scheme := "http"
	if ca != nil {
		hs.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, relayName)}}
		hs.StartTLS()
		scheme = "https"
	} else {
		hs.Start()
	}
	t.Cleanup(func() { srv.Close() })
	t.Cleanup(hs.Close)
	_, port, _ := net.SplitHostPort(hs.Listener.Addr().String())
	return scheme + "://" + relayName + ":" + port, hs.Listener.Addr().String()
}

// clearProxyEnv leaves no proxy setting of the machine in the way.
func clearProxyEnv(t *testing.T) {
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "REQUEST_METHOD"} {
		t.Setenv(k, "")
	}
}

// roundTrip opens a channel on relayURL, connects to it and has one
// delivery posted to the relay at addr answered by the agent.
func roundTrip(t *testing.T, n relayclient.Network, relayURL, addr string, ca *testnet.CA) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cr, err := relayclient.Open(ctx, n.HTTPClient(10*time.Second), relayURL, "")
	if err != nil {
		t.Fatalf("open a channel: %v", err)
	}
	if err := relayclient.Check(ctx, n.HTTPClient(10*time.Second), relayURL, cr); err != nil {
		t.Fatalf("check the channel: %v", err)
	}
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: relayURL, Credentials: cr, Network: n})
	if err != nil {
		t.Fatalf("connect to the channel: %v", err)
	}
	defer conn.Close()
	answered := make(chan error, 1)
	go func() {
		d, err := conn.Receive()
		if err == nil {
			err = conn.Respond(d.ID, http.StatusAccepted, http.Header{"X-Seen": {string(d.Body)}}, []byte("taken"))
		}
		answered <- err
	}()
	// The sender posts to the relay directly, by its address.
	sender := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	if ca != nil {
		sender.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: ca.Pool()}
	}
	resp, err := sender.Post(cr.PublicURL+"/hook", "text/plain", strings.NewReader("through the proxy"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || string(body) != "taken" || resp.Header.Get("X-Seen") != "through the proxy" {
		t.Fatalf("sender got %s %q %v", resp.Status, body, resp.Header)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
}

// The channel's HTTP calls and its WebSocket both go through the proxy
// of the environment, as CONNECT tunnels with the proxy's credentials: to
// an http relay (HTTP_PROXY) and to an https one with a private CA
// (HTTPS_PROXY, wss inside the tunnel).
func TestNetwork_ThroughTheEnvironmentsProxy(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			clearProxyEnv(t)
			var ca *testnet.CA
			var n relayclient.Network
			if scheme == "https" {
				ca = testnet.NewCA(t, "devhook test CA")
				n.TLS = &tls.Config{RootCAs: ca.Pool()}
			}
			relayURL, addr := namedRelay(t, ca)
			p := testnet.StartProxy(t, testnet.ProxyConfig{User: "dev", Password: "p@ss:word", Hosts: map[string]string{relayName: "127.0.0.1"}})
			// The other variable names a proxy that is not there: the
			// right one must be chosen.
			other := map[string]string{"http": "HTTPS_PROXY", "https": "HTTP_PROXY"}[scheme]
			t.Setenv(strings.ToUpper(scheme)+"_PROXY", p.URL("dev", "p@ss:word"))
			t.Setenv(other, "http://127.0.0.1:1")
			roundTrip(t, n, relayURL, addr, ca)
			_, port, _ := net.SplitHostPort(addr)
			if got := p.Connects(); len(got) < 3 || got[0] != relayName+":"+port {
				t.Fatalf("the proxy opened tunnels to %v, want open, check and connect to %s:%s", got, relayName, port)
			}
			if r := p.Refused(); len(r) > 0 {
				t.Fatalf("the proxy refused %v", r)
			}
		})
	}
}

// A socks5:// proxy in HTTPS_PROXY, with credentials, carries the
// channel's calls and its WebSocket; wrong credentials are said as such.
func TestNetwork_ThroughASOCKS5Proxy(t *testing.T) {
	clearProxyEnv(t)
	ca := testnet.NewCA(t, "devhook test CA")
	relayURL, addr := namedRelay(t, ca)
	p := testnet.StartSOCKS5(t, testnet.ProxyConfig{User: "dev", Password: "pw", Hosts: map[string]string{relayName: "127.0.0.1"}})
	t.Setenv("HTTPS_PROXY", p.URL("dev", "pw"))
	roundTrip(t, relayclient.Network{TLS: &tls.Config{RootCAs: ca.Pool()}}, relayURL, addr, ca)
	if got := p.Connects(); len(got) < 3 || !strings.HasPrefix(got[0], relayName+":") {
		t.Fatalf("the SOCKS5 proxy opened %v", got)
	}
	t.Setenv("HTTPS_PROXY", p.URL("dev", "wrong"))
	_, err := relayclient.Open(context.Background(), relayclient.Network{}.HTTPClient(10*time.Second), relayURL, "")
	var ue *relayclient.UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "SOCKS5 proxy refused") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("open with wrong SOCKS5 credentials: %v", err)
	}
}

// A host in NO_PROXY is reached directly; the proxy sees nothing.
func TestNetwork_NoProxyGoesDirect(t *testing.T) {
	clearProxyEnv(t)
	relayURL, addr := namedRelay(t, nil)
	p := testnet.StartProxy(t, testnet.ProxyConfig{Hosts: map[string]string{relayName: "127.0.0.1"}})
	t.Setenv("HTTP_PROXY", p.URL("", ""))
	t.Setenv("NO_PROXY", "example.com,"+relayName)
	var mu sync.Mutex
	var direct []string
	n := relayclient.Network{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		mu.Lock()
		direct = append(direct, a)
		mu.Unlock()
		if host, _, _ := net.SplitHostPort(a); host == relayName {
			a = addr // this machine's own resolver for the name
		}
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}}
	roundTrip(t, n, relayURL, addr, nil)
	if got := p.Connects(); len(got) > 0 {
		t.Fatalf("NO_PROXY names the relay, yet the proxy opened %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(direct) < 2 || !strings.HasPrefix(direct[0], relayName+":") {
		t.Fatalf("direct dials %v, want the relay by name", direct)
	}

	// Without a resolver for the name, NO_PROXY means a DNS failure,
	// said as such.
	_, err := relayclient.Open(context.Background(), relayclient.Network{}.HTTPClient(10*time.Second), relayURL, "")
	var ue *relayclient.UnreachableError
	if !errors.As(err, &ue) || ue.Proxy != "" || !strings.Contains(err.Error(), "the name "+relayName+" does not resolve") {
		t.Fatalf("open with the relay in NO_PROXY and no DNS for it: %v", err)
	}
}

// A proxy that refuses the credentials: a clear error naming the proxy
// (without the password) and its 407, for the HTTP calls and the
// WebSocket alike.
func TestNetwork_ProxyRefusesTheCredentials(t *testing.T) {
	clearProxyEnv(t)
	relayURL, _ := namedRelay(t, nil)
	p := testnet.StartProxy(t, testnet.ProxyConfig{User: "dev", Password: "right", Hosts: map[string]string{relayName: "127.0.0.1"}})
	ctx := context.Background()
	for _, tt := range []struct {
		user, password string
		want           string
	}{
		{"dev", "wrong-secret", `refused the user "dev"`},
		{"", "", "needs credentials"},
	} {
		t.Setenv("HTTP_PROXY", p.URL(tt.user, tt.password))
		_, openErr := relayclient.Open(ctx, relayclient.Network{}.HTTPClient(10*time.Second), relayURL, "")
		_, dialErr := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: relayURL, Credentials: wire.Credentials{Channel: "c", Token: "t"}})
		for _, err := range []error{openErr, dialErr} {
			var ue *relayclient.UnreachableError
			if !errors.As(err, &ue) {
				t.Fatalf("proxy user %q: %v, want an UnreachableError", tt.user, err)
			}
			msg := err.Error()
			t.Log(msg)
			for _, want := range []string{"407 Proxy Authentication Required", p.Addr(), "HTTP_PROXY", tt.want, relayURL} {
				if !strings.Contains(msg, want) {
					t.Errorf("proxy user %q: %q lacks %q", tt.user, msg, want)
				}
			}
			if tt.password != "" && strings.Contains(msg, tt.password) {
				t.Errorf("the error shows the proxy's password: %s", msg)
			}
		}
	}
	if got := p.Connects(); len(got) > 0 {
		t.Fatalf("the proxy opened tunnels without the right credentials: %v", got)
	}
}

// An unreachable relay: the error names the relay and says what happened
// and what to check, for the HTTP calls and the WebSocket alike.
func TestNetwork_UnreachableSaysWhatToCheck(t *testing.T) {
	clearProxyEnv(t)
	ca := testnet.NewCA(t, "devhook private CA")
	tlsRelay, _ := namedRelay(t, ca)
	plainRelay, plainAddr := namedRelay(t, nil)
	_, tlsPort, _ := net.SplitHostPort(strings.TrimPrefix(tlsRelay, "https://"))
	closed := closedAddr(t)
	p := testnet.StartProxy(t, testnet.ProxyConfig{Hosts: map[string]string{relayName: "127.0.0.1"}})
	blackHole := func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done() // a SYN nobody answers
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
	}
	refused := func(context.Context, string, string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	for _, tt := range []struct {
		name     string
		relayURL string
		proxy    string // HTTPS_PROXY and HTTP_PROXY
		n        relayclient.Network
		want     []string
		lacks    []string
	}{
		// A relay on this machine is never reached through a proxy: no
		// word of one (issue 37).
		{"refused", "http://" + closed, "", relayclient.Network{}, []string{"nothing accepts connections at " + closed, "Is the relay running"}, []string{"PROXY", "proxy"}},
		{"refused beyond this machine", "http://" + relayName + ":4041", "", relayclient.Network{DialContext: refused},
			[]string{"nothing accepts connections at " + relayName + ":4041", "Is the relay running", "HTTP_PROXY"}, nil},
		{"timeout on this machine", "http://127.0.0.1:4041", "", relayclient.Network{DialContext: blackHole}, []string{"no answer from 127.0.0.1:4041", "Is the relay running"}, []string{"PROXY", "proxy"}},
		{"dns", "https://" + relayName, "", relayclient.Network{}, []string{"the name " + relayName + " does not resolve", "HTTPS_PROXY"}, nil},
		{"timeout", "https://" + relayName + ":" + tlsPort, "", relayclient.Network{DialContext: blackHole}, []string{"no answer from", "firewall"}, nil},
		{"unknown authority", tlsRelay, p.URL("", ""), relayclient.Network{}, []string{"authority this machine does not trust", "devhook private CA", "trust that CA"}, nil},
		{"other name", strings.Replace(tlsRelay, relayName, "127.0.0.1", 1), "", relayclient.Network{TLS: &tls.Config{RootCAs: ca.Pool()}},
			[]string{"certificate is not for 127.0.0.1 but for " + relayName}, nil},
		{"not TLS", "https://" + plainAddr, "", relayclient.Network{}, []string{"does not speak TLS", "http://"}, nil},
		{"proxy down", plainRelay, "http://" + closed, relayclient.Network{}, []string{"through the proxy http://" + closed, "nothing accepts connections at the proxy's address", "HTTP_PROXY"}, nil},
		{"proxy cannot reach", "https://other.devhook.test:443", p.URL("", ""), relayclient.Network{}, []string{"502 Bad Gateway", "CONNECT other.devhook.test:443", "NO_PROXY=other.devhook.test"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HTTPS_PROXY", tt.proxy)
			t.Setenv("HTTP_PROXY", tt.proxy)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			timeout := 10 * time.Second
			if strings.HasPrefix(tt.name, "timeout") {
				timeout = 200 * time.Millisecond
			}
			_, openErr := relayclient.Open(ctx, tt.n.HTTPClient(timeout), tt.relayURL, "")
			dctx, dcancel := context.WithTimeout(ctx, timeout)
			defer dcancel()
			_, dialErr := relayclient.Dial(dctx, relayclient.DialConfig{RelayURL: tt.relayURL, Credentials: wire.Credentials{Channel: "c", Token: "t"}, Network: tt.n})
			for what, err := range map[string]error{"open": openErr, "dial": dialErr} {
				t.Logf("%s: %v", what, err)
				var ue *relayclient.UnreachableError
				if !errors.As(err, &ue) {
					t.Fatalf("%s: %v, want an UnreachableError", what, err)
				}
				for _, want := range append([]string{"cannot reach the relay " + tt.relayURL}, tt.want...) {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: %q lacks %q", what, err, want)
					}
				}
				for _, not := range tt.lacks {
					if strings.Contains(err.Error(), not) {
						t.Errorf("%s: %q says %q", what, err, not)
					}
				}
				if ue.UnknownAuthority != (tt.name == "unknown authority") {
					t.Errorf("%s: UnknownAuthority %v", what, ue.UnknownAuthority)
				}
				if strings.Contains(err.Error(), "--") {
					t.Errorf("%s: %q names a flag: the command that sets the network adds that", what, err)
				}
			}
		})
	}
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A proxy URL the environment gets wrong is said as such.
func TestNetwork_BadProxySetting(t *testing.T) {
	clearProxyEnv(t)
	relayURL, _ := namedRelay(t, nil)
	t.Setenv("HTTP_PROXY", "ftp://proxy.devhook.test:21")
	_, err := relayclient.Open(context.Background(), relayclient.Network{}.HTTPClient(5*time.Second), relayURL, "")
	if err == nil || !strings.Contains(err.Error(), "HTTP_PROXY") || !strings.Contains(err.Error(), "http://, https:// or socks5://") {
		t.Fatalf("open with HTTP_PROXY=ftp://…: %v", err)
	}
}

// Stopping on purpose (a cancelled context) is not an unreachable relay.
func TestNetwork_CancelledIsNotUnreachable(t *testing.T) {
	clearProxyEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	addr := closedAddr(t)
	_, openErr := relayclient.Open(ctx, relayclient.Network{}.HTTPClient(5*time.Second), "http://"+addr, "")
	_, dialErr := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: "http://" + addr, Credentials: wire.Credentials{Channel: "c", Token: "t"}})
	for _, err := range []error{openErr, dialErr} {
		var ue *relayclient.UnreachableError
		if !errors.Is(err, context.Canceled) || errors.As(err, &ue) {
			t.Errorf("with a cancelled context: %v, want context.Canceled and no UnreachableError", err)
		}
	}
}
