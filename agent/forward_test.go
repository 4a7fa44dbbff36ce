package agent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/storage"
)

// storedDelivery opens a store in t.TempDir() holding one delivery.
func storedDelivery(t *testing.T) (*storage.DB, *devhook.Delivery) {
	t.Helper()
	db, err := storage.Open(filepath.Join(t.TempDir(), "d.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d := &devhook.Delivery{ID: "0190a000-0000-7000-8000-0000000000f1", ReceivedAt: time.Now(), Method: "POST", Path: "/hook",
		Header: http.Header{"Content-Type": {"application/json"}, "X-Env": {"prod"}}, Body: []byte(`{"a":1}`)}
	if _, err := db.PutDelivery(d); err != nil {
		t.Fatal(err)
	}
	return db, d
}

// listen --header: added to every forward, replacing one of the same
// name, and recorded as part of the request sent.
func TestForwardHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r.Header.Clone()
	}))
	defer recv.Close()
	db, d := storedDelivery(t)
	ag, err := agent.New(agent.Config{Store: db, Forward: []string{recv.URL},
		Header: http.Header{"Authorization": {"Bearer dev"}, "X-Env": {"dev"}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ag.Replay(context.Background(), d.ID, devhook.ReplayOptions{})
	if err != nil || a.Status != 200 {
		t.Fatalf("replay: %+v %v", a, err)
	}
	h := <-got
	if h.Get("Authorization") != "Bearer dev" || len(h.Values("X-Env")) != 1 || h.Get("X-Env") != "dev" || h.Get("Content-Type") != "application/json" {
		t.Errorf("the receiver got %v", h)
	}
	if a.Request == nil || a.Request.Header.Get("Authorization") != "Bearer dev" || string(a.Request.Body) != string(d.Body) {
		t.Errorf("the attempt does not record the request as sent: %+v", a.Request)
	}
	if stored, _ := db.Delivery(d.ID); stored.Header.Get("X-Env") != "prod" || stored.Header.Get("Authorization") != "" {
		t.Errorf("the delivery's own headers changed: %v", stored.Header)
	}
}

// An https receiver with a private CA: the error names --forward-ca and
// --forward-insecure; each of them makes it work.
func TestForwardTLS(t *testing.T) {
	recv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer recv.Close()
	db, d := storedDelivery(t)
	pool := x509.NewCertPool()
	pool.AddCert(recv.Certificate())
	for _, tt := range []struct {
		name    string
		tls     *tls.Config
		wantErr bool
	}{
		{"system roots", nil, true},
		{"--forward-ca", &tls.Config{RootCAs: pool}, false},
		{"--forward-insecure", &tls.Config{InsecureSkipVerify: true}, false},
	} {
		ag, err := agent.New(agent.Config{Store: db, Forward: []string{recv.URL}, TLS: tt.tls})
		if err != nil {
			t.Fatal(err)
		}
		a, err := ag.Replay(context.Background(), d.ID, devhook.ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tt.wantErr {
			if a.Status != 0 || !strings.Contains(a.Error, "--forward-ca") || !strings.Contains(a.Error, "--forward-insecure") || !strings.HasPrefix(a.Error, "TLS: ") {
				t.Errorf("%s: attempt %d %q, want a TLS error naming --forward-ca and --forward-insecure", tt.name, a.Status, a.Error)
			}
		} else if a.Status != 200 {
			t.Errorf("%s: attempt %d %q, want 200", tt.name, a.Status, a.Error)
		}
	}
}
