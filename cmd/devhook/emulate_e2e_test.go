package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/emulator"
	"github.com/devhook/devhook/receiver"
)

// The whole path offline: the emulated service runs an application, its
// three signed run.status deliveries go through devhook listen to the
// reference receiver, which accepts them in order, and the service records
// each as a succeeded conversation.
func TestEmulatedServiceThroughListen(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	em, err := emulator.New(emulator.Config{APIKeys: []string{"key"}, QueueTime: 50 * time.Millisecond, RunTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	svc := httptest.NewServer(em)
	defer svc.Close()
	defer em.Close()
	api := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, svc.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}

	// The receiver, and listen in front of it. The secret comes from the
	// service once the webhook exists, and the webhook needs listen's URL:
	// start listen once for the URL, then again with the secret. The URL
	// stays the same because the channel is kept in the data directory.
	var mu sync.Mutex
	var seen []devhook.Event
	var verdicts []string
	var recvSecret string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sec := recvSecret
		mu.Unlock()
		receiver.New(receiver.Config{Secret: sec, OnRequest: func(_ *http.Request, body []byte, v devhook.Verdict) {
			mu.Lock()
			seen = append(seen, devhook.ParseEvent(body))
			verdicts = append(verdicts, v.Result)
			mu.Unlock()
		}}).ServeHTTP(w, r)
	}))
	defer recv.Close()
	data := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	relayAddr := ln.Addr().String()
	ln.Close()
	lr := startListen(t, "--forward", recv.URL, "--data", data, "--relay-addr", relayAddr)
	pub := lr.next(t, "ready")["public_url"].(string)
	lr.stop(t)

	api("POST", "/v1/webhooks", `{"id":"hook","event_types":["run.status"],"endpoint_url":"`+pub+`/hook","description":"devhook"}`)
	secret := api("GET", "/v1/webhooks/hook/secret", "")["secret"].(string)
	mu.Lock()
	recvSecret = secret
	mu.Unlock()
	lr = startListen(t, "--forward", recv.URL, "--data", data, "--secret", secret, "--verify", "enforce", "--relay-addr", relayAddr)
	if got := lr.next(t, "ready")["public_url"]; got != pub {
		t.Fatalf("public URL changed: %v, want %s", got, pub)
	}

	api("POST", "/v1/applications", `{"id":"app","name":"App","description":""}`)
	run := api("POST", "/v1/applications/app/runs?instance_id=latest", `{"input":{"x":1},"options":{}}`)
	runID, _ := run["id"].(string)
	for _, want := range []string{"queued", "running", "succeeded"} {
		d := lr.next(t, "delivery")
		if d["verdict"] != "ok" || d["status"] != float64(200) || d["run_id"] != runID || d["status_v2"] != want {
			t.Fatalf("delivery %v, want run %s %s verified and accepted", d, runID, want)
		}
	}
	mu.Lock()
	if len(seen) != 3 || seen[0].Status != "running" || seen[0].StatusV2 != "queued" || seen[2].StatusV2 != "succeeded" {
		t.Errorf("receiver saw %+v", seen)
	}
	for _, v := range verdicts {
		if v != devhook.VerdictOK {
			t.Errorf("receiver verdicts %v", verdicts)
		}
	}
	mu.Unlock()
	// The service records a conversation once it has the answer: poll.
	var convs []any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		convs = api("GET", "/v1/webhooks/hook/conversations", "")["items"].([]any)
		if len(convs) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(convs) != 3 {
		t.Fatalf("%d conversations, want 3", len(convs))
	}
	for _, c := range convs {
		if c := c.(map[string]any); c["status"] != "succeeded" || c["http_status"] != float64(200) {
			t.Errorf("conversation %v", c)
		}
	}
}
