package agent_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
)

// benchBody is a 1.5 KB run.status payload.
func benchBody(b testing.TB) []byte {
	b.Helper()
	body, err := json.Marshal(devhook.NewRunStatus("run-bench-0001", "app-bench", "running", time.Now()))
	if err != nil {
		b.Fatal(err)
	}
	return append(body[:len(body)-1], []byte(`,"padding":"`+string(bytes.Repeat([]byte("x"), 1500-len(body)))+`"}`)...)
}

func benchPost(b testing.TB, client *http.Client, url string, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, time.Now(), body))
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %s", resp.Status)
	}
}

// BenchmarkDirect is the physical limit: a signed POST straight to the
// reference receiver.
func BenchmarkDirect(b *testing.B) {
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	body := benchBody(b)
	client := &http.Client{Timeout: 10 * time.Second}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		benchPost(b, client, recv.URL+"/hook", body)
	}
}

// BenchmarkTunnel sends the same POST through relay and agent, with
// verification and recording on.
func BenchmarkTunnel(b *testing.B) {
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	tn := newTunnel(b, recv.URL, func(c *agent.Config) { c.OnResult = nil; c.Logf = nil })
	tn.startAgent()
	body := benchBody(b)
	client := &http.Client{Timeout: 10 * time.Second}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		benchPost(b, client, tn.url("/hook"), body)
	}
}
