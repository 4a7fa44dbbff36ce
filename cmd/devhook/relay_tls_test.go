package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/miekg/dns"

	"github.com/devhook/devhook/relay/relayclient"
)

const acmeTestDomain = "relay.devhook.test"

// inProcessRelay runs o.run in this process until the test ends and
// returns the lines it printed at start, up to the data line.
func inProcessRelay(t *testing.T, o *relayOptions) []string {
	t.Helper()
	pr, pw := io.Pipe()
	o.stdout, o.stderr = pw, io.Discard
	if testing.Verbose() {
		o.stderr = os.Stderr
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- o.run(ctx); pw.Close() }()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("relay: %v", err)
		}
		for range lines {
		}
	})
	var got []string
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("relay stopped after printing %q: %v", got, <-errc)
			}
			got = append(got, l)
			if strings.HasPrefix(l, "  data ") {
				return got
			}
		case <-timeout:
			t.Fatalf("relay printed only %q", got)
		}
	}
}

func lineAddr(t *testing.T, lines []string, prefix string) string {
	t.Helper()
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("no line %q in %q", prefix, lines)
	return ""
}

// loopbackDNS answers every A question with 127.0.0.1, over TCP (pebble's
// VA asks its resolver over TCP), so that pebble validates the domain
// against the relay on this machine.
func loopbackDNS(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET},
					A:   net.IPv4(127, 0, 0, 1),
				})
			}
		}
		w.WriteMsg(m)
	})}
	done := make(chan struct{})
	go func() { defer close(done); srv.ActivateAndServe() }()
	t.Cleanup(func() { srv.Shutdown(); <-done })
	return ln.Addr().String()
}

// pebbleCA is Let's Encrypt's test ACME server in this process. Its
// directory answers once start has been given the ports to validate on.
type pebbleCA struct {
	dir    string       // directory URL
	client *http.Client // trusts the directory's HTTPS
	h      atomic.Pointer[http.Handler]
	ready  chan struct{}
	ca     *ca.CAImpl
}

func newPebble(t *testing.T) *pebbleCA {
	t.Helper()
	// No random sleeps before validation, no deliberately bad nonces.
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	p := &pebbleCA{ready: make(chan struct{})}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-p.ready:
			(*p.h.Load()).ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	}))
	hs.StartTLS()
	t.Cleanup(hs.Close)
	p.dir, p.client = hs.URL+wfe.DirectoryPath, hs.Client()
	p.client.Timeout = 30 * time.Second
	return p
}

// start makes pebble validate HTTP-01 on httpPort and TLS-ALPN-01 on
// tlsPort of whatever resolver says.
func (p *pebbleCA) start(t *testing.T, httpPort, tlsPort int, resolver string) {
	logger := log.New(io.Discard, "", 0)
	if testing.Verbose() {
		logger = log.New(os.Stderr, "pebble ", log.LstdFlags)
	}
	store := db.NewMemoryStore()
	p.ca = ca.New(logger, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	v := va.New(logger, httpPort, tlsPort, false, resolver, store)
	w := wfe.New(logger, store, v, p.ca, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	var h http.Handler = w.Handler()
	p.h.Store(&h)
	close(p.ready)
}

func (p *pebbleCA) roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.GetRootCert(0).Cert)
	return pool
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, c := range ps {
		n = n*10 + int(c-'0')
	}
	return n
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return port(t, ln.Addr().String())
}

// httpsTo is a client for https://<name>:<port>/ that dials addr and trusts roots.
func httpsTo(addr string, roots *x509.CertPool) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
	}
}

// A relay given --domain obtains its certificate from a real ACME server
// (pebble, in process), by TLS-ALPN-01 on its HTTPS port or, when that
// fails, by HTTP-01 on its HTTP port; then an agent connects over wss and
// a delivery over HTTPS gets the agent's answer. Plain HTTP redirects with
// 308 to the same URL over HTTPS.
func TestRelay_ACME(t *testing.T) {
	for _, challenge := range []string{"tls-alpn-01", "http-01"} {
		t.Run(challenge, func(t *testing.T) {
			resolver := loopbackDNS(t)
			pebble := newPebble(t)
			data := t.TempDir()
			lines := inProcessRelay(t, &relayOptions{
				domain: acmeTestDomain, acmeEmail: "ops@devhook.test", acmeDirectory: pebble.dir, acmeClient: pebble.client,
				httpsAddr: "127.0.0.1:0", httpAddr: "127.0.0.1:0", dataDir: data, maxConns: 64,
			})
			httpsAddr := lineAddr(t, lines, "devhook relay on https://")
			httpAddr := lineAddr(t, lines, "  http        http://")
			tlsPort := port(t, httpsAddr)
			if challenge == "http-01" {
				tlsPort = closedPort(t) // TLS-ALPN-01 fails; autocert falls back to HTTP-01
			}
			pebble.start(t, port(t, httpAddr), tlsPort, resolver)
			wantPublic := "https://" + acmeTestDomain + ":" + strings.Split(httpsAddr, ":")[1]
			if got := lineAddr(t, lines, "  public URL  "); got != wantPublic {
				t.Fatalf("public URL %s, want %s", got, wantPublic)
			}

			client := httpsTo(httpsAddr, pebble.roots())
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cr, err := relayclient.Open(ctx, client, wantPublic, "")
			if err != nil {
				t.Fatalf("open a channel over HTTPS (the certificate is obtained now): %v", err)
			}
			if !strings.HasPrefix(cr.PublicURL, wantPublic+"/c/") {
				t.Fatalf("channel's public URL %s", cr.PublicURL)
			}
			conn, err := relayclient.Dial(ctx, relayclient.DialConfig{
				RelayURL: wantPublic, Credentials: cr,
				Network: relayclient.Network{TLS: &tls.Config{RootCAs: pebble.roots()}, DialContext: client.Transport.(*http.Transport).DialContext},
			})
			if err != nil {
				t.Fatalf("agent over wss: %v", err)
			}
			defer conn.Close()
			agentDone := make(chan error, 1)
			go func() {
				d, err := conn.Receive()
				if err == nil {
					err = conn.Respond(d.ID, http.StatusCreated, http.Header{"X-Seen": {string(d.Body)}}, []byte("taken"))
				}
				agentDone <- err
			}()
			resp, err := client.Post(cr.PublicURL+"/hook", "application/json", strings.NewReader(`{"n":1}`))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || string(b) != "taken" || resp.Header.Get("X-Seen") != `{"n":1}` {
				t.Fatalf("delivery over HTTPS: %s %q %v", resp.Status, b, resp.Header)
			}
			if err := <-agentDone; err != nil {
				t.Fatal(err)
			}
			leaf := resp.TLS.PeerCertificates[0]
			if leaf.Subject.CommonName != acmeTestDomain && (len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != acmeTestDomain) {
				t.Fatalf("certificate for %v %q", leaf.DNSNames, leaf.Subject.CommonName)
			}
			if entries, _ := os.ReadDir(filepath.Join(data, "acme")); len(entries) < 2 {
				t.Fatalf("autocert cache under --data/acme holds %d files, want the account key and the certificate", len(entries))
			}

			// Plain HTTP: 308 to HTTPS, method and body kept by clients.
			noFollow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err = noFollow.Post("http://"+httpAddr+"/c/"+cr.Channel+"/hook?a=1", "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != wantPublic+"/c/"+cr.Channel+"/hook?a=1" {
				t.Fatalf("plain HTTP: %s to %q", resp.Status, resp.Header.Get("Location"))
			}
		})
	}
}

// writeCert writes a self-signed certificate for name to cert and key.
func writeCert(t *testing.T, name, certPath, keyPath string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	// Written beside and renamed, as a renewal tool does.
	for path, block := range map[string]*pem.Block{certPath: {Type: "CERTIFICATE", Bytes: der}, keyPath: {Type: "EC PRIVATE KEY", Bytes: kb}} {
		if err := os.WriteFile(path+".new", pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// --tls-cert/--tls-key serve a certificate managed elsewhere, and the
// next connection after the files change gets the new one: no restart.
func TestRelay_TLSCertFiles(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := writeCert(t, acmeTestDomain, certPath, keyPath)
	lines := inProcessRelay(t, &relayOptions{
		tlsCert: certPath, tlsKey: keyPath, httpsAddr: "127.0.0.1:0", httpAddr: "", dataDir: t.TempDir(), maxConns: 64,
	})
	addr := lineAddr(t, lines, "devhook relay on https://")
	get := func(c *x509.Certificate) *x509.Certificate {
		t.Helper()
		pool := x509.NewCertPool()
		pool.AddCert(c)
		client := httpsTo(addr, pool)
		defer client.CloseIdleConnections()
		resp, err := client.Get("https://" + acmeTestDomain + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz over HTTPS: %s", resp.Status)
		}
		return resp.TLS.PeerCertificates[0]
	}
	if got := get(first); !got.Equal(first) {
		t.Fatal("served another certificate than --tls-cert")
	}
	second := writeCert(t, acmeTestDomain, certPath, keyPath)
	if got := get(second); !got.Equal(second) {
		t.Fatal("the renewed certificate is not served")
	}
}

func TestRelay_TLSFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		o    relayOptions
		want string
	}{
		{relayOptions{domain: "a.example.com", tlsCert: "c", tlsKey: "k"}, "choose one"},
		{relayOptions{tlsCert: "c"}, "go together"},
		{relayOptions{domain: "https://a.example.com"}, "DNS name"},
		{relayOptions{domain: "localhost"}, "DNS name"},
	} {
		tc.o.maxConns, tc.o.dataDir, tc.o.stdout, tc.o.stderr = 8, t.TempDir(), io.Discard, io.Discard
		err := tc.o.run(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// --metrics-addr serves /metrics and /healthz on an address of its own,
// and the relay's public address no longer serves /metrics.
func TestRelay_MetricsAddr(t *testing.T) {
	lines := inProcessRelay(t, &relayOptions{addr: "127.0.0.1:0", metricsAddr: "127.0.0.1:0", dataDir: t.TempDir(), maxConns: 64})
	public := "http://" + lineAddr(t, lines, "devhook relay on http://")
	metrics := "http://" + strings.TrimSuffix(lineAddr(t, lines, "  metrics     http://"), "/metrics")
	client := &http.Client{Timeout: 10 * time.Second}
	for _, tc := range []struct {
		url  string
		code int
		body string
	}{
		{public + "/metrics", http.StatusNotFound, ""},
		{metrics + "/metrics", http.StatusOK, "devhook_relay_channels 0"},
		{metrics + "/healthz", http.StatusOK, "ok"},
	} {
		resp, err := client.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.body) {
			t.Errorf("GET %s: %s %.100q", tc.url, resp.Status, b)
		}
	}
}
