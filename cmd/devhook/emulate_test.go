package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// startEmulate runs `devhook emulate args...` and returns the lines it
// printed up to the discovery line, and a stop function that cancels it
// and returns its error.
func startEmulate(t *testing.T, args ...string) (map[string]string, func() error) {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := newRootCmd(pw, io.Discard)
	cmd.SetArgs(append([]string{"emulate", "--addr", "127.0.0.1:0"}, args...))
	done := make(chan error, 1)
	go func() {
		err := cmd.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()
	out := map[string]string{}
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "service emulator on "):
			out["base"] = strings.TrimPrefix(line, "service emulator on ")
		case strings.HasPrefix(line, "API key: "):
			out["key"] = strings.TrimPrefix(line, "API key: ")
		case strings.HasPrefix(line, "team: "):
			out["team"] = strings.TrimPrefix(line, "team: ")
		case strings.HasPrefix(line, "CA certificate: "):
			out["ca"], _, _ = strings.Cut(strings.TrimPrefix(line, "CA certificate: "), " ")
		}
		if strings.HasPrefix(line, "sign-in discovery: ") {
			break
		}
	}
	go io.Copy(io.Discard, pr)
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("emulate did not stop")
			return nil
		}
	}
	t.Cleanup(func() { stop() })
	if out["base"] == "" {
		cancel()
		t.Fatalf("emulate printed no base URL: %v", <-done)
	}
	return out, stop
}

func TestEmulateCommand(t *testing.T) {
	out, stop := startEmulate(t, "--api-key", "k1", "--api-key", "k2", "--team", "t-1=One", "--sso-domain", "corp.test=corp-idp")
	if !strings.HasPrefix(out["base"], "http://127.0.0.1:") || out["key"] != "k2" {
		t.Fatalf("printed %v", out)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, key := range []string{"k1", "k2"} {
		req, _ := http.NewRequest("GET", out["base"]+"/v1/webhooks", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("with key %s: %d", key, resp.StatusCode)
		}
	}
	for path, want := range map[string]string{
		"/v1/internal/me/organization":               `[{"id":"t-1","name":"One","role":"admin","pending_invite":false}]`,
		"/v1/enterprise/sso/domain?domain=corp.test": `{"domain_identifier":"corp-idp"}`,
	} {
		req, _ := http.NewRequest("GET", out["base"]+path, nil)
		req.Header.Set("Authorization", "Bearer k1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
	if out["team"] != "One (t-1; send service-account: t-1)" {
		t.Errorf("team line %q", out["team"])
	}
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := client.Get(out["base"] + "/v1/webhooks"); err == nil {
		t.Error("still serving after cancel")
	}
}

func TestEmulateBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--team", "no-name"}, {"--sso-domain", "=x"}, {"--api-key", "has space"}, {"--addr", "nope"}} {
		cmd := newRootCmd(io.Discard, io.Discard)
		cmd.SetArgs(append([]string{"emulate", "--addr", "127.0.0.1:0"}, args...))
		if err := cmd.ExecuteContext(context.Background()); err == nil {
			t.Errorf("emulate %v: no error", args)
		}
	}
}

func TestEmulateTLSAndData(t *testing.T) {
	dir := t.TempDir()
	out, stop := startEmulate(t, "--tls", "--data", dir)
	if !strings.HasPrefix(out["base"], "https://127.0.0.1:") || len(out["key"]) < 32 || out["ca"] == "" {
		t.Fatalf("printed %v", out)
	}
	pem, err := os.ReadFile(out["ca"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("the CA file holds no certificate")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, host := range []string{out["base"], strings.Replace(out["base"], "127.0.0.1", "localhost", 1)} {
		resp, err := client.Get(host + "/.well-known/openid-configuration")
		if err != nil {
			t.Fatalf("%s with the printed CA: %v", host, err)
		}
		var d map[string]any
		json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		if d["token_endpoint"] != out["base"]+"/oauth2/token" {
			t.Errorf("token_endpoint %v", d["token_endpoint"])
		}
	}
	// Without the CA the certificate is not trusted.
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(out["base"] + "/"); err == nil {
		t.Error("the certificate is trusted without its CA")
	}
	// State is kept in the data directory across restarts.
	req, _ := http.NewRequest("POST", out["base"]+"/v1/webhooks", strings.NewReader(
		`{"id":"kept","event_types":["run.status"],"endpoint_url":"http://127.0.0.1:9/","description":""}`))
	req.Header.Set("Authorization", "Bearer "+out["key"])
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The generated key is kept with the state.
	out2, _ := startEmulate(t, "--data", dir)
	if out2["key"] != out["key"] {
		t.Errorf("generated key %q after restart, want %q", out2["key"], out["key"])
	}
	req, _ = http.NewRequest("GET", out2["base"]+"/v1/webhooks/kept", nil)
	req.Header.Set("Authorization", "Bearer "+out["key"])
	resp, err = (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("webhook after restart: %d", resp.StatusCode)
	}
}

// TestEmulateMaxPushed: --max-pushed bounds the pushed packages: a
// package that unpacks past it is refused with 413, naming the flag.
func TestEmulateMaxPushed(t *testing.T) {
	out, _ := startEmulate(t, "--api-key", "k", "--max-pushed", "65536")
	client := &http.Client{Timeout: 10 * time.Second}
	call := func(method, url, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if status, b := call("POST", out["base"]+"/v1/applications", `{"id":"app","name":"App","description":""}`); status != 201 {
		t.Fatalf("create: %d %s", status, b)
	}
	var u struct {
		UploadURL string `json:"upload_url"`
	}
	_, b := call("GET", out["base"]+"/v1/applications/app/binary", "")
	json.Unmarshal(b, &u)
	var pkg bytes.Buffer
	zw := gzip.NewWriter(&pkg)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "main.py", Mode: 0o644, Size: 1 << 20, Typeflag: tar.TypeReg})
	tw.Write(make([]byte, 1<<20))
	tw.Close()
	zw.Close()
	status, b := call("PUT", u.UploadURL, pkg.String())
	if status != 413 || !strings.Contains(string(b), "--max-pushed") {
		t.Errorf("a package that unpacks past --max-pushed: %d %s", status, b)
	}
}
