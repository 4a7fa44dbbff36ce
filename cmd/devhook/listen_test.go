package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relaytest"
)

// listenRun is a `devhook listen` running in this process.
type listenRun struct {
	lines  chan map[string]any
	cancel context.CancelFunc
	done   chan error
	stderr *bytes.Buffer
}

func startListen(t *testing.T, args ...string) *listenRun {
	t.Helper()
	return startListenWith(t, nil, args...)
}

// startListenWith is startListen on o (see newListenCmdWith); nil: as
// the root command makes it.
func startListenWith(t *testing.T, o *listenOptions, args ...string) *listenRun {
	t.Helper()
	pr, pw := io.Pipe()
	lr := &listenRun{lines: make(chan map[string]any, 100), done: make(chan error, 1), stderr: &bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	lr.cancel = cancel
	cmd := newRootCmd(pw, lr.stderr)
	cmd.SetArgs(append([]string{"listen", "--json", "--relay-addr", "127.0.0.1:0", "--inspect", "off"}, args...))
	if o != nil {
		cmd = newListenCmdWith(o)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true // as the root command does
		cmd.SetOut(pw)
		cmd.SetErr(lr.stderr)
		cmd.SetArgs(append([]string{"--json", "--relay-addr", "127.0.0.1:0", "--inspect", "off"}, args...))
	}
	go func() {
		err := cmd.ExecuteContext(ctx)
		pw.Close()
		lr.done <- err
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("listen --json printed a line that is not JSON: %q", sc.Text())
				continue
			}
			lr.lines <- m
		}
		close(lr.lines)
	}()
	t.Cleanup(func() { lr.stop(t) })
	return lr
}

func (lr *listenRun) next(t *testing.T, event string) map[string]any {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case m, ok := <-lr.lines:
			if !ok {
				t.Fatalf("listen ended before a %q line; stderr: %s", event, lr.stderr)
			}
			if m["event"] == event {
				return m
			}
		case <-timeout:
			t.Fatalf("no %q line from listen; stderr: %s", event, lr.stderr)
		}
	}
}

func (lr *listenRun) stop(t *testing.T) {
	if lr.cancel == nil {
		return
	}
	lr.cancel()
	lr.cancel = nil
	if err := <-lr.done; err != nil {
		t.Errorf("listen: %v", err)
	}
}

func TestListenJSONAndChannelReuse(t *testing.T) {
	const secret = "whsec_listen"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	data := t.TempDir()

	lr := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", data)
	ready := lr.next(t, "ready")
	pub, _ := ready["public_url"].(string)
	channel, _ := ready["channel"].(string)
	if !strings.HasPrefix(pub, "http://127.0.0.1:") || !strings.HasSuffix(pub, "/c/"+channel) || len(channel) != 32 {
		t.Fatalf("ready line %v", ready)
	}
	if _, ok := ready["inspector_url"]; !ok {
		t.Fatalf("ready line has no inspector_url: %v", ready)
	}

	var out bytes.Buffer
	send := newRootCmd(&out, &out)
	send.SetArgs([]string{"send", pub + "/hook", "--secret", secret, "--status", "succeeded", "--run-id", "run-42"})
	if err := send.Execute(); err != nil {
		t.Fatalf("send: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "200 OK") || !strings.Contains(out.String(), `"run_id":"run-42"`) {
		t.Fatalf("send printed %s", out.String())
	}
	d := lr.next(t, "delivery")
	if d["verdict"] != "ok" || d["status"] != float64(200) || d["run_id"] != "run-42" || d["status_v2"] != "succeeded" {
		t.Fatalf("delivery line %v", d)
	}
	if _, ok := d["duration_ms"].(float64); !ok || d["id"] == "" {
		t.Fatalf("delivery line %v", d)
	}
	lr.stop(t)

	// The next start reuses the channel, so the URL path stays the same.
	lr2 := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", data)
	if got := lr2.next(t, "ready")["channel"]; got != channel {
		t.Fatalf("channel %v after restart, want %s", got, channel)
	}
	lr2.stop(t)

	// What was recorded is there for `deliveries list`.
	out.Reset()
	list := newRootCmd(&out, &out)
	list.SetArgs([]string{"deliveries", "list", "--data", data, "--inspect", "127.0.0.1:1", "--json"})
	if err := list.Execute(); err != nil {
		t.Fatalf("deliveries list: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), d["id"].(string)) {
		t.Fatalf("deliveries list does not show %v:\n%s", d["id"], out.String())
	}
}

func TestListenRemoteRelay(t *testing.T) {
	rdb, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	srv, err := relay.NewServer(relay.Config{Store: rdb, OpenToken: "open-sesame-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer recv.Close()
	data := t.TempDir()

	// Without the relay's token, opening a channel fails with a clear error.
	var errOut bytes.Buffer
	cmd := newRootCmd(io.Discard, &errOut)
	cmd.SetArgs([]string{"listen", "--forward", recv.URL, "--relay", hs.URL, "--data", data, "--inspect", "off"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "requires a token") || !strings.Contains(err.Error(), "pass it with --relay-token") {
		t.Fatalf("listen without the open token: %v", err)
	}
	cmd = newRootCmd(io.Discard, &errOut)
	cmd.SetArgs([]string{"listen", "--forward", recv.URL, "--relay", hs.URL, "--relay-token", "wrong", "--data", data, "--inspect", "off"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "check the token given with --relay-token") {
		t.Fatalf("listen with a wrong open token: %v", err)
	}

	lr := startListen(t, "--forward", recv.URL, "--relay", hs.URL, "--relay-token", "open-sesame-0123456789", "--data", data)
	ready := lr.next(t, "ready")
	pub := ready["public_url"].(string)
	if !strings.HasPrefix(pub, hs.URL+"/c/") {
		t.Fatalf("public URL %s not on the relay %s", pub, hs.URL)
	}
	resp, err := http.Post(pub, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("through the remote relay: %s", resp.Status)
	}
	if d := lr.next(t, "delivery"); d["verdict"] != "missing_signature" || d["status"] != float64(204) {
		t.Fatalf("delivery line %v", d)
	}
	lr.stop(t)
	lr2 := startListen(t, "--forward", recv.URL, "--relay", hs.URL, "--data", data)
	if got := lr2.next(t, "ready")["public_url"]; got != pub {
		t.Fatalf("public URL %v after restart, want %s", got, pub)
	}
}

func TestListenCorruptChannelsFile(t *testing.T) {
	data := t.TempDir()
	path := filepath.Join(data, "channels.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newRootCmd(io.Discard, io.Discard)
	cmd.SetArgs([]string{"listen", "--forward", "localhost:1", "--data", data, "--relay-addr", "127.0.0.1:0", "--inspect", "off"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move the file away") {
		t.Fatalf("corrupt channels file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{not json" {
		t.Fatal("the corrupt file was changed")
	}
}

func TestListenFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"listen"},
		{"listen", "--forward", "localhost:1", "--verify", "sometimes", "--data", t.TempDir(), "--inspect", "off", "--relay-addr", "127.0.0.1:0"},
		{"listen", "--forward", "ftp://x", "--data", t.TempDir(), "--inspect", "off", "--relay-addr", "127.0.0.1:0"},
	} {
		cmd := newRootCmd(io.Discard, io.Discard)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// devhook send without a URL goes to the running listen's public URL, as
// the README's first delivery does.
func TestSendWithoutURLGoesToTheRunningListen(t *testing.T) {
	const secret = "whsec_demo"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	lr := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", t.TempDir(), "--inspect", "127.0.0.1:0")
	ready := lr.next(t, "ready")
	inspect := strings.TrimPrefix(ready["inspector_url"].(string), "http://")
	out, _, err := devhookCmd(t, "send", "--inspect", inspect, "--secret", secret, "--status", "succeeded", "--run-id", "run-7")
	if err != nil || !strings.Contains(out, "200 OK") {
		t.Fatalf("send: %v\n%s", err, out)
	}
	if d := lr.next(t, "delivery"); d["run_id"] != "run-7" || d["verdict"] != "ok" {
		t.Fatalf("delivery line %v", d)
	}
	_, _, err = devhookCmd(t, "send", "--inspect", "127.0.0.1:1", "--secret", secret)
	if err == nil || !strings.Contains(err.Error(), "no devhook listen answers at 127.0.0.1:1") {
		t.Fatalf("send with no listen: %v", err)
	}
}

// The built-in relay lets the sender wait past listen's --timeout, so
// that the sender gets the answer listen records: a receiver slower than
// the relay's default 30 s, within a --timeout of 40 s, answers the
// sender (it got 504 at 30 s while listen recorded the receiver's 200).
func TestListen_BuiltinRelayWaitsAsLongAsTheReceiverMay(t *testing.T) {
	if testing.Short() {
		t.Skip("a receiver slower than 30 s")
	}
	const slow = relay.DefaultResponseTimeout + time.Second
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slow) // a receiver that takes its time, as a user's may
		w.WriteHeader(http.StatusCreated)
	}))
	defer recv.Close()
	lr := startListen(t, "--forward", recv.URL, "--data", t.TempDir(), "--timeout", (slow + 10*time.Second).String())
	pub, _ := lr.next(t, "ready")["public_url"].(string)
	resp, err := http.Post(pub+"/hook", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d := lr.next(t, "delivery")
	if resp.StatusCode != http.StatusCreated || d["status"] != float64(http.StatusCreated) {
		t.Fatalf("the sender got %s, listen recorded %v: want the receiver's 201 for both", resp.Status, d["status"])
	}
	if got := builtinResponseTimeout(0); got <= agent.DefaultForwardTimeout {
		t.Errorf("with listen's default --timeout the built-in relay waits %s, not past the agent's %s", got, agent.DefaultForwardTimeout)
	}
}

// A standalone relay that waits less than listen (relay --timeout 1s,
// listen --timeout 1m) and a receiver that answers after 3 s: the sender
// gets 504, and listen says so beside the receiver's 200, in its line and
// its record, and warned of it once at connect.
func TestListen_RelayThatWaitsLessSaysWhatTheSenderGot(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second): // slower than the relay waits
		case <-r.Context().Done():
		}
	}))
	defer recv.Close()
	_, hs, _ := relaytest.New(t, relay.Config{ResponseTimeout: time.Second})
	data := t.TempDir()
	lr := startListen(t, "--forward", recv.URL, "--relay", hs.URL, "--data", data, "--timeout", "1m")
	const warning = "the relay lets a sender wait 1s for the answer (its --timeout), less than the 1m"
	warned := 0
	next := func(event string) map[string]any {
		for {
			var m map[string]any
			ok := true
			select {
			case m, ok = <-lr.lines:
				if !ok {
					t.Fatalf("listen ended before a %q line", event)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no %q line from listen", event)
			}
			if m["event"] == "log" && strings.Contains(fmt.Sprint(m["message"]), warning) {
				warned++
			}
			if m["event"] == event {
				return m
			}
		}
	}
	pub, _ := next("ready")["public_url"].(string)
	resp, err := http.Post(pub+"/hook", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d := next("delivery")
	if resp.StatusCode != http.StatusGatewayTimeout || d["status"] != float64(http.StatusGatewayTimeout) || d["receiver_status"] != float64(http.StatusOK) ||
		!strings.Contains(fmt.Sprint(d["error"]), "the sender got 504: the relay lets a sender wait 1s") {
		t.Fatalf("the sender got %s; listen printed %v", resp.Status, d)
	}
	lr.stop(t)
	for m := range lr.lines {
		if m["event"] == "log" && strings.Contains(fmt.Sprint(m["message"]), warning) {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("warned %d times that the relay waits less, want once", warned)
	}
}
