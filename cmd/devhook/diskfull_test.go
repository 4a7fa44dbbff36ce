package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
)

// listen on a full disk (ENOSPC injected through storage.Config.NoSpace):
// it starts and says so, takes no delivery (the relay queues them: 202),
// shows its history in the inspector, and takes the queued deliveries by
// itself once there is room.
func TestListenStartsOnAFullDisk(t *testing.T) {
	const secret = "whsec_full"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	data := t.TempDir()

	// History from before the disk filled.
	lr := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", data)
	pub, _ := lr.next(t, "ready")["public_url"].(string)
	if st := postSigned(t, pub, secret, "run-before"); st != http.StatusOK {
		t.Fatalf("delivery before the disk filled: %d", st)
	}
	lr.next(t, "delivery")
	lr.stop(t)

	var full atomic.Bool
	full.Store(true)
	o := &listenOptions{noSpace: func() error {
		if full.Load() {
			return syscall.ENOSPC
		}
		return nil
	}}
	cmd := newListenCmdWith(o)
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	cmd.SetOut(pw)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"--json", "--relay-addr", "127.0.0.1:0", "--inspect", "127.0.0.1:0",
		"--forward", recv.URL, "--secret", secret, "--data", data})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := cmd.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("listen: %v", err)
		}
	}()
	lines := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	next := func(event, contains string) map[string]any {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("listen ended before a %q line; stderr: %s", event, stderr.String())
				}
				if m["event"] == event && strings.Contains(sprint(m["message"]), contains) {
					return m
				}
			case <-timeout:
				t.Fatalf("no %q line with %q from listen", event, contains)
			}
		}
	}
	// The ready line comes first; the line saying why nothing is taken
	// follows it.
	ready := next("ready", "")
	pub, _ = ready["public_url"].(string)
	insp, _ := ready["inspector_url"].(string)
	said := next("log", "cannot record deliveries")
	for _, want := range []string{"no space left on device", "queued"} {
		if !strings.Contains(sprint(said["message"]), want) {
			t.Errorf("listen said %q, want it to say %q", said["message"], want)
		}
	}

	// A delivery waits in the relay's queue: the sender gets 202.
	if st := postSigned(t, pub, secret, "run-while-full"); st != http.StatusAccepted {
		t.Fatalf("delivery on a full disk: %d, want 202 (queued at the relay)", st)
	}
	// The history is there.
	resp, err := http.Get(insp + "/api/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Items []devhook.Summary `json:"items"`
	}
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil || len(page.Items) != 1 || page.Items[0].Event.RunID != "run-before" {
		t.Fatalf("inspector on a full disk: %+v, %v; want the delivery from before", page.Items, err)
	}

	// Room again: the queued delivery arrives by itself.
	full.Store(false)
	next("log", "recording works again")
	d := next("delivery", "")
	if d["run_id"] != "run-while-full" || d["status"] != float64(200) {
		t.Errorf("delivery line %v, want the queued delivery answered 200", d)
	}
}

func sprint(v any) string {
	s, _ := v.(string)
	return s
}

// postSigned sends one signed run.status delivery and returns the status.
func postSigned(t *testing.T, url, secret, run string) int {
	t.Helper()
	body, _ := json.Marshal(devhook.NewRunStatus(run, "app", "running", time.Now()))
	req, _ := http.NewRequest(http.MethodPost, url+"/hook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, time.Now(), body))
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
