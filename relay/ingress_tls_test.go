package relay_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// Over the relay's own TLS, deliveries are served by the IngressListener
// as over plain TCP (ambiguous framing refused, dot segments refused); a
// request that is not a delivery is handed to net/http's server and still
// knows it came over TLS (the channel's public URL is https), and its
// answer ends the connection; h2 goes to net/http's server as it is;
// plain HTTP gets net/http's 400.
func TestIngress_TLS(t *testing.T) {
	db, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	srv, err := relay.NewServer(relay.Config{Store: db, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	certs := httptest.NewTLSServer(http.NotFoundHandler()) // its certificate, and a client that trusts it
	certs.Close()
	tlsConfig := &tls.Config{Certificates: certs.TLS.Certificates, NextProtos: []string{"h2", "http/1.1"}}
	hs := httptest.NewUnstartedServer(srv)
	addr := hs.Listener.Addr().String()
	il := relay.NewIngressListener(srv, tls.NewListener(relay.LimitListener(hs.Listener, 100), tlsConfig),
		relay.ListenerConfig{ReadHeaderTimeout: 5 * time.Second, Logf: t.Logf})
	hs.Listener = il
	hs.Start()
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		il.Shutdown(ctx)
	})
	base := "https://" + addr
	roots := certs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	t.Cleanup(h1.CloseIdleConnections)
	t.Cleanup(h2.CloseIdleConnections)

	// The API, handed over: the public URL says https.
	resp, err := h1.Post(base+"/v1/channels", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var cr wire.Credentials
	err = json.NewDecoder(resp.Body).Decode(&cr)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("open a channel over TLS: %s %v", resp.Status, err)
	}
	if want := base + "/c/" + cr.Channel; cr.PublicURL != want {
		t.Fatalf("public URL over TLS %q, want %q", cr.PublicURL, want)
	}
	// A delivery, over HTTP/1.1 and over h2.
	for _, c := range []*http.Client{h1, h2} {
		resp, err := c.Post(cr.PublicURL+"/hook", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("a delivery over %s: %s, want 202", resp.Proto, resp.Status)
		}
	}
	if resp, err := h2.Get(base + "/healthz"); err != nil || resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("h2 /healthz: %v %v", resp, err)
	}
	// Raw requests over TLS, each on its own connection.
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"length and chunked", "POST /c/" + cr.Channel + "/hook HTTP/1.1\r\nHost: relay\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"bare LF", "POST /c/" + cr.Channel + "/hook HTTP/1.1\nHost: relay\nContent-Length: 0\n\n", 400},
		{"dot segments", "POST /c/" + cr.Channel + "/%2e%2e/%2e%2e/escape HTTP/1.1\r\nHost: relay\r\nContent-Length: 0\r\n\r\n", 400},
		{"obs-fold to the API", "GET /healthz HTTP/1.1\r\nHost: relay\r\nX-A: a\r\n b\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, tc.raw+"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
			br := bufio.NewReader(c)
			resp, _ := readAnswer(t, br, http.MethodPost)
			if resp.StatusCode != tc.status {
				t.Fatalf("got %s, want %d", resp.Status, tc.status)
			}
			if b, err := br.ReadByte(); err == nil {
				t.Fatalf("the connection went on after the answer (%q)", b)
			}
		})
	}
	// A request handed over ends its connection over TLS too: what
	// follows it is never read by net/http's server alone.
	t.Run("handed over, then length and chunked", func(t *testing.T) {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"+
			"POST /c/"+cr.Channel+"/hook HTTP/1.1\r\nHost: relay\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		br := bufio.NewReader(c)
		if resp, _ := readAnswer(t, br, http.MethodGet); resp.StatusCode != 200 || !resp.Close {
			t.Fatalf("/healthz over TLS: %s %v, want 200 and Connection: close", resp.Status, resp.Header)
		}
		if b, err := br.ReadByte(); err == nil {
			t.Fatalf("the connection went on after a request handed over (%q)", b)
		}
	})
	// Plain HTTP to the TLS port.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 400 {
		t.Fatalf("plain HTTP to the TLS port: %v %v", resp, err)
	}
}
