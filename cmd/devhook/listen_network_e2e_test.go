package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/internal/testnet"
)

// relayHost is a name only the tests' proxy resolves: Go reaches
// loopback addresses without a proxy, whatever the environment says.
const relayHost = "relay.devhook.test"

// noProxyEnv leaves no proxy setting of the machine in the way; the
// processes the test starts inherit it.
func noProxyEnv(t *testing.T) {
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} {
		t.Setenv(k, "")
	}
}

// senderTo is a client that reaches every URL at addr (a relay known by a
// name nothing resolves), trusting roots for https.
func senderTo(addr string, ca *testnet.CA) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	if ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool()}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: tr}
}

// devhook listen behind a company proxy: the channel is opened and the
// WebSocket connected through HTTP_PROXY (an http relay) or HTTPS_PROXY
// (an https relay with a private CA, --relay-ca), with the proxy's
// credentials; a delivery reaches the receiver and its answer the sender.
func TestListen_ThroughAProxy(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			noProxyEnv(t)
			var ca *testnet.CA
			args := []string{"relay", "serve", "--data", t.TempDir()}
			prefix := "devhook relay on http://"
			if scheme == "https" {
				ca = testnet.NewCA(t, "devhook test CA")
				cert, key := ca.WriteFiles(t, t.TempDir(), relayHost)
				args = append(args, "--tls-cert", cert, "--tls-key", key, "--https-addr", "127.0.0.1:0", "--http-addr", "")
				prefix = "devhook relay on https://"
			} else {
				args = append(args, "--addr", "127.0.0.1:0")
			}
			r := startProc(t, args...)
			addr := strings.TrimPrefix(r.nextLine(t, prefix), prefix)
			_, port, _ := net.SplitHostPort(addr)
			relayURL := scheme + "://" + relayHost + ":" + port

			p := testnet.StartProxy(t, testnet.ProxyConfig{User: "dev", Password: "s3cret", Hosts: map[string]string{relayHost: "127.0.0.1"}})
			t.Setenv(strings.ToUpper(scheme)+"_PROXY", p.URL("dev", "s3cret"))
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				w.Header().Set("X-Seen", string(b))
				w.WriteHeader(http.StatusAccepted)
			}))
			defer recv.Close()
			listen := []string{"listen", "--json", "--relay", relayURL, "--forward", recv.URL, "--inspect", "off", "--data", t.TempDir()}
			if ca != nil {
				listen = append(listen, "--relay-ca", ca.File)
			}
			l := startProc(t, listen...)
			ready := l.nextJSON(t, "ready")
			public, _ := ready["public_url"].(string)
			if !strings.HasPrefix(public, relayURL+"/c/") {
				t.Fatalf("ready %v", ready)
			}
			resp, err := senderTo(addr, ca).Post(public+"/hook", "application/json", strings.NewReader(`{"via":"proxy"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted || resp.Header.Get("X-Seen") != `{"via":"proxy"}` {
				t.Fatalf("the sender got %s %v, want the receiver's 202", resp.Status, resp.Header)
			}
			// Opening the channel and its WebSocket: both tunnels.
			if got := p.Connects(); len(got) < 2 || got[0] != relayHost+":"+port {
				t.Fatalf("the proxy opened %v", got)
			}
			l.stop(t, 10*time.Second)
		})
	}
}

// When the relay cannot be reached, listen says which relay, what
// happened and what to check: a relay that is down, a proxy refusing the
// credentials (its 407), a private CA without --relay-ca.
func TestListen_UnreachableRelaySaysWhatToCheck(t *testing.T) {
	noProxyEnv(t)
	ca := testnet.NewCA(t, "devhook private CA")
	tlsRelay := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsRelay.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, relayHost)}}
	tlsRelay.StartTLS()
	defer tlsRelay.Close()
	_, tlsPort, _ := net.SplitHostPort(tlsRelay.Listener.Addr().String())
	p := testnet.StartProxy(t, testnet.ProxyConfig{User: "dev", Password: "right", Hosts: map[string]string{relayHost: "127.0.0.1"}})
	down := closedAddr(t)
	for _, tt := range []struct {
		name, relay, proxy string
		want               []string
	}{
		{"relay down", "http://" + down, "", []string{"cannot reach the relay http://" + down, "nothing accepts connections", "Is the relay running"}},
		{"proxy credentials", "https://" + relayHost + ":" + tlsPort, p.URL("dev", "wrong"),
			[]string{"cannot reach the relay https://" + relayHost, "through the proxy http://dev:xxxxx@" + p.Addr(), "407 Proxy Authentication Required", "HTTPS_PROXY"}},
		{"private CA", "https://" + relayHost + ":" + tlsPort, p.URL("dev", "right"),
			[]string{"authority this machine does not trust", "--relay-ca FILE"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HTTPS_PROXY", tt.proxy)
			_, _, err := devhookCmd(t, "listen", "--relay", tt.relay, "--forward", "127.0.0.1:9", "--inspect", "off", "--data", t.TempDir())
			if err == nil {
				t.Fatal("listen started")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q lacks %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "wrong") {
				t.Errorf("the error shows the proxy's password: %v", err)
			}
		})
	}
}

// tunnel stands for a tunnel the developer already runs: it takes
// requests at its own address and passes them to target, as it is.
func tunnel(t *testing.T, target string) *httptest.Server {
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	s := httptest.NewServer(rp)
	t.Cleanup(s.Close)
	return s
}

// listen --public-url: the built-in relay's public URL is the tunnel's
// address, --register points the webhook there, and a delivery through
// the tunnel reaches the receiver. Through the tunnel, nothing else of
// use is open: no channel can be opened, no metrics read.
func TestListen_PublicURLThroughATunnel(t *testing.T) {
	noProxyEnv(t)
	base, c := newTestService(t)
	ctx := t.Context()
	relayAddr := closedAddr(t)
	tn := tunnel(t, relayAddr)
	public := tn.URL
	recv := &bodies{}
	rs := httptest.NewServer(recv)
	defer rs.Close()
	data := t.TempDir()
	args := []string{"listen", "--json", "--register", "--forward", rs.URL, "--data", data, "--relay-addr", relayAddr,
		"--public-url", public + "/", "--inspect", "off", "--endpoint", base, "--api-key", svcKey}
	l := startProc(t, args...)
	ready := l.nextJSON(t, "ready")
	pub, _ := ready["public_url"].(string)
	if !strings.HasPrefix(pub, public+"/c/") || ready["local_only"] == true {
		t.Fatalf("ready %v, want the public URL under %s and not local only", ready, public)
	}
	id, _ := ready["webhook"].(string)
	wh, err := c.GetWebhook(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if wh.EndpointURL != pub {
		t.Fatalf("the webhook points at %s, want %s", wh.EndpointURL, pub)
	}
	if st, _ := sendTo(t, pub+"/hook", nil, "through the tunnel"); st != http.StatusOK {
		t.Fatalf("a delivery through the tunnel: %d", st)
	}
	if recv.count("through the tunnel") != 1 {
		t.Fatal("the receiver did not get the delivery")
	}
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "/v1/channels", http.StatusUnauthorized},
		{http.MethodGet, "/metrics", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tt.method, public+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s through the tunnel: %s, want %d", tt.method, tt.path, resp.Status, tt.want)
		}
	}
	l.stop(t, 15*time.Second)

	// The next start keeps the channel, and so the URL.
	l = startProc(t, args...)
	if again := l.nextJSON(t, "ready")["public_url"]; again != pub {
		t.Errorf("after a restart the public URL is %v, want %s", again, pub)
	}
	l.stop(t, 15*time.Second)
}

// --public-url is checked before anything starts.
func TestListen_PublicURLChecked(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--public-url", "https://hooks.example.com/base"}, "has a path"},
		{[]string{"--public-url", "hooks.example.com"}, "must be an http:// or https:// URL"},
		{[]string{"--public-url", "https://hooks.example.com", "--relay", "https://relay.example.com"}, "--relay has its own"},
	} {
		// The built-in relay on a port of its own: a listen of this
		// machine may hold the default one.
		_, _, err := devhookCmd(t, append([]string{"listen", "--forward", "127.0.0.1:9", "--inspect", "off", "--data", t.TempDir(), "--relay-addr", "127.0.0.1:0"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("listen %v: %v, want %q", tt.args, err, tt.want)
		}
	}
}
