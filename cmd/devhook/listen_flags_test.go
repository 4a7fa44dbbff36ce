package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseHeaders(t *testing.T) {
	h, err := parseHeaders([]string{"Authorization: Bearer x", "X-Env:dev", "X-Many: 1", "X-Many: 2"})
	if err != nil || h.Get("Authorization") != "Bearer x" || h.Get("X-Env") != "dev" || len(h.Values("X-Many")) != 2 {
		t.Fatalf("parseHeaders: %v %v", h, err)
	}
	for _, bad := range []string{"no colon", ": empty name", "Bad Name: x", "X: a\r\nInjected: 1"} {
		if _, err := parseHeaders([]string{bad}); err == nil || !strings.Contains(err.Error(), "--header") {
			t.Errorf("parseHeaders(%q): %v, want an error naming --header", bad, err)
		}
	}
}

func TestForwardTLSFlags(t *testing.T) {
	if c, err := forwardTLS("", false); c != nil || err != nil {
		t.Errorf("no flags: %v %v, want the defaults", c, err)
	}
	if c, err := forwardTLS("", true); err != nil || !c.InsecureSkipVerify {
		t.Errorf("--forward-insecure: %v %v", c, err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	if _, err := forwardTLS(notPEM, false); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("--forward-ca with no certificate: %v", err)
	}
	if _, err := forwardTLS(filepath.Join(t.TempDir(), "missing.pem"), false); err == nil || !strings.Contains(err.Error(), "--forward-ca") {
		t.Errorf("--forward-ca missing: %v", err)
	}
}

// listen --header reaches the receiver; --forward-insecure is warned
// about once, at start.
func TestListenHeaderAndInsecureWarning(t *testing.T) {
	got := make(chan http.Header, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Clone():
		default:
		}
	}))
	defer recv.Close()
	lr := startListen(t, "--forward", recv.URL, "--data", t.TempDir(), "-H", "X-Env: dev", "--header", "Authorization: Bearer local", "--forward-insecure")
	ready := lr.next(t, "ready")
	logLine := lr.next(t, "log")
	if !strings.Contains(logLine["message"].(string), "--forward-insecure") {
		t.Errorf("no warning about --forward-insecure: %v", logLine)
	}
	if _, out, err := devhookCmd(t, "send", ready["public_url"].(string)+"/hook"); err != nil {
		t.Fatalf("send: %v %s", err, out)
	}
	h := <-got
	if h.Get("X-Env") != "dev" || h.Get("Authorization") != "Bearer local" {
		t.Errorf("the receiver got %v", h)
	}
}

// A second --forward target that does not take a delivery is shown.
func TestListen_FailedCopyShown(t *testing.T) {
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer first.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	down.Close()
	lr := startListen(t, "--forward", first.URL, "--forward", down.URL, "--data", t.TempDir())
	pub := lr.next(t, "ready")["public_url"].(string)
	if _, out, err := devhookCmd(t, "send", pub+"/hook"); err != nil {
		t.Fatalf("send: %v %s", err, out)
	}
	d := lr.next(t, "delivery")
	copies, _ := d["failed_copies"].([]any)
	if d["receiver_status"] != float64(200) || len(copies) != 1 {
		t.Fatalf("delivery line %v, want the first target's 200 and one failed copy", d)
	}
	c := copies[0].(map[string]any)
	if c["target"] != down.URL+"/hook" || c["receiver_status"] != nil || !strings.Contains(c["error"].(string), "connection refused") {
		t.Errorf("failed copy %v", c)
	}
}
