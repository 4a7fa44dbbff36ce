package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/storage"
)

// With its inspector and relay on other ports than the defaults, the
// commands that read deliveries find the running listen through its data
// directory, without --inspect: the default one, and --data for another.
// Two listens are told apart by --data (or --inspect); once a listen
// stops, its file is gone and the commands read the store.
func TestCommandsFindTheRunningListen(t *testing.T) {
	const secret = "whsec_find"
	t.Setenv("HOME", t.TempDir()) // the default data directory is ~/.devhook
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()

	a := startListen(t, "--forward", recv.URL, "--secret", secret, "--inspect", "127.0.0.1:0")
	aReady := a.next(t, "ready")
	home := defaultDataDir()
	if l, err := running.Read(home); err != nil || l.PID != os.Getpid() || l.PublicURL != aReady["public_url"] || l.InspectorURL != aReady["inspector_url"] {
		t.Fatalf("listen.json in %s: %+v, %v; ready %v", home, l, err, aReady)
	}
	other := t.TempDir()
	b := startListen(t, "--forward", recv.URL, "--secret", secret, "--inspect", "127.0.0.1:0", "--data", other)
	bReady := b.next(t, "ready")

	// A second listen of a directory in use says which one uses it.
	second := startListen(t, "--forward", recv.URL, "--secret", secret)
	select {
	case err := <-second.done:
		second.cancel = nil
		if err == nil || !errors.Is(err, storage.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("devhook listen (pid %d, %s) already records in", os.Getpid(), aReady["public_url"])) ||
			!strings.Contains(err.Error(), "another --data") {
			t.Errorf("a second listen of %s: %v", home, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a second listen of the same directory did not stop")
	}

	// send without a URL: to the listen of ~/.devhook, or of --data.
	if out, stderr, err := devhookCmd(t, "send", "--secret", secret, "--run-id", "run-a"); err != nil || !strings.Contains(out, "200 OK") {
		t.Fatalf("send: %v %s\n%s", err, stderr, out)
	}
	aID := a.next(t, "delivery")["id"].(string)
	if out, stderr, err := devhookCmd(t, "send", "--secret", secret, "--run-id", "run-b", "--data", other); err != nil || !strings.Contains(out, "200 OK") {
		t.Fatalf("send --data: %v %s\n%s", err, stderr, out)
	}
	bID := b.next(t, "delivery")["id"].(string)

	// Reading commands, through the listens (both stores are locked).
	out, stderr, err := devhookCmd(t, "deliveries", "list")
	if err != nil || !strings.Contains(out, aID) || strings.Contains(out, bID) {
		t.Fatalf("deliveries list: %v %s\n%s", err, stderr, out)
	}
	out, stderr, err = devhookCmd(t, "deliveries", "list", "--data", other)
	if err != nil || !strings.Contains(out, bID) || strings.Contains(out, aID) {
		t.Fatalf("deliveries list --data: %v %s\n%s", err, stderr, out)
	}
	bInspect := strings.TrimPrefix(bReady["inspector_url"].(string), "http://")
	if out, _, err := devhookCmd(t, "deliveries", "show", bID, "--inspect", bInspect); err != nil || !strings.Contains(out, bID) {
		t.Fatalf("deliveries show --inspect: %v\n%s", err, out)
	}
	if out, _, err := devhookCmd(t, "deliveries", "show", aID); err != nil || !strings.Contains(out, "run-a") {
		t.Fatalf("deliveries show: %v\n%s", err, out)
	}
	if out, stderr, err := devhookCmd(t, "replay", aID); err != nil || !strings.Contains(out, "200") {
		t.Fatalf("replay: %v %s\n%s", err, stderr, out)
	}
	if r := a.next(t, "replay"); r["id"] != aID {
		t.Errorf("the replay was not listen's: %v", r)
	}
	if out, stderr, err := devhookCmd(t, "scenario", "save", "-", "--run", "run-b", "--data", other); err != nil || !strings.Contains(out, "run-b") {
		t.Fatalf("scenario save --data: %v %s\n%s", err, stderr, out)
	}

	// Stopped, a listen's file is gone and the commands read its store.
	a.stop(t)
	if _, err := running.Read(home); !errors.Is(err, running.ErrNotRunning) {
		t.Errorf("listen.json after listen stopped: %v", err)
	}
	if out, _, err := devhookCmd(t, "deliveries", "list"); err != nil || !strings.Contains(out, aID) {
		t.Fatalf("deliveries list after listen stopped: %v\n%s", err, out)
	}
	_, _, err = devhookCmd(t, "send", "--secret", secret)
	if err == nil || !strings.Contains(err.Error(), "no devhook listen records in "+home) {
		t.Errorf("send with no listen: %v", err)
	}
}

// A listen with --inspect off is found too: send reaches it, and the
// reading commands say in one short line why they cannot read its locked
// store. A file a killed listen left (its pid gone) is stale: the store is
// read, and send says the listen is gone.
func TestFindListen_InspectOffAndStale(t *testing.T) {
	const secret = "whsec_find"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	data := t.TempDir()
	lr := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", data) // --inspect off
	lr.next(t, "ready")
	if out, _, err := devhookCmd(t, "send", "--secret", secret, "--data", data); err != nil || !strings.Contains(out, "200 OK") {
		t.Fatalf("send to a listen without inspector: %v\n%s", err, out)
	}
	lr.next(t, "delivery")
	_, _, err := devhookCmd(t, "deliveries", "list", "--data", data)
	if err == nil || !errors.Is(err, storage.ErrLocked) || !strings.Contains(err.Error(), "--inspect off") ||
		!strings.Contains(err.Error(), "pid") || len(err.Error()) > 200+len(data) {
		t.Fatalf("deliveries list of a listen without inspector: %v", err)
	}
	lr.stop(t)

	// A killed listen's file: a process that is gone.
	dead := exec.Command(os.Args[0], "-test.run=^$")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := running.Write(data, running.Listen{PID: dead.Process.Pid, Data: absDir(data), InspectorURL: "http://" + closedAddr(t),
		PublicURL: "http://" + closedAddr(t) + "/c/x"}); err != nil {
		t.Fatal(err)
	}
	if out, _, err := devhookCmd(t, "deliveries", "list", "--data", data); err != nil || !strings.Contains(out, "run-") {
		t.Fatalf("deliveries list with a stale listen.json: %v\n%s", err, out)
	}
	_, _, err = devhookCmd(t, "send", "--secret", secret, "--data", data)
	if err == nil || !strings.Contains(err.Error(), "is gone") || !strings.Contains(err.Error(), "pid") {
		t.Errorf("send with a stale listen.json: %v", err)
	}
}

// humanListen is a devhook listen in this process printing its human
// lines, read line by line.
type humanListen struct {
	lines  chan string
	cancel context.CancelFunc
	done   chan error
}

func startHumanListen(t *testing.T, args ...string) *humanListen {
	t.Helper()
	pr, pw := io.Pipe()
	h := &humanListen{lines: make(chan string, 100), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	cmd := newRootCmd(pw, io.Discard)
	cmd.SetArgs(append([]string{"listen", "--relay-addr", "127.0.0.1:0", "--inspect", "off"}, args...))
	go func() {
		err := cmd.ExecuteContext(ctx)
		pw.Close()
		h.done <- err
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}

// until returns the lines up to the first that contains s.
func (h *humanListen) until(t *testing.T, s string) []string {
	t.Helper()
	var got []string
	timeout := time.After(15 * time.Second)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				t.Fatalf("listen ended before a line with %q; lines:\n%s", s, strings.Join(got, "\n"))
			}
			got = append(got, l)
			if strings.Contains(l, s) {
				return got
			}
		case <-timeout:
			t.Fatalf("no line with %q; lines:\n%s", s, strings.Join(got, "\n"))
		}
	}
}

// listen --register prints the webhook's secret (and --json carries it),
// webhooks secret without an id prints the running listen's, and a
// receiver with another secret gets the fix named once, with the webhook.
func TestListenRegisterPrintsTheSecret(t *testing.T) {
	base, c := newTestService(t)
	var recvSecret = "whsec_demo" // the README's receiver: not the webhook's
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		receiver.New(receiver.Config{Secret: recvSecret}).ServeHTTP(w, r)
	}))
	defer recv.Close()
	data := t.TempDir()
	g := []string{"--forward", recv.URL, "--data", data, "--endpoint", base, "--api-key", svcKey, "--register"}

	lr := startListen(t, g...)
	ready := lr.next(t, "ready")
	id := ready["webhook"].(string)
	s, err := c.WebhookSecret(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if ready["secret"] != s.Secret || s.Secret == "" {
		t.Fatalf("ready line's secret %v, want the webhook's %s", ready["secret"], s.Secret)
	}
	out, stderr, err := devhookCmd(t, "webhooks", "secret", "--data", data, "--endpoint", base, "--api-key", svcKey)
	if err != nil || strings.TrimSpace(out) != s.Secret {
		t.Fatalf("webhooks secret without an id: %v %s %q", err, stderr, out)
	}
	lr.stop(t)
	if _, _, err := devhookCmd(t, "webhooks", "secret", "--data", data, "--endpoint", base, "--api-key", svcKey); err == nil ||
		!strings.Contains(err.Error(), "devhook webhooks list") {
		t.Errorf("webhooks secret without an id and no listen: %v", err)
	}

	h := startHumanListen(t, g...)
	head := h.until(t, "recording")
	id = ""
	for _, l := range head {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "registered" && f[1] == "webhook" {
			id = f[2]
		}
	}
	if s, err = c.WebhookSecret(t.Context(), id); err != nil {
		t.Fatalf("webhook %q of the ready block:\n%s\n%v", id, strings.Join(head, "\n"), err)
	}
	if !strings.Contains(strings.Join(head, "\n"), "  secret      "+s.Secret+"  (webhook "+id+"'s") {
		t.Errorf("the ready block does not print the secret:\n%s", strings.Join(head, "\n"))
	}
	for range 3 {
		if _, err := c.Trigger(t.Context(), ""); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	for range 3 {
		lines = append(lines, h.until(t, "→ 401")...)
	}
	// Stopped, every line it printed is read.
	h.cancel()
	for l := range h.lines {
		lines = append(lines, l)
	}
	hints := 0
	for _, l := range lines {
		if strings.Contains(l, "hint:") {
			hints++
			want := "hint: your receiver has another secret than webhook " + id + "'s"
			if !strings.Contains(l, want) || !strings.Contains(l, "`devhook webhooks secret "+id+"`") {
				t.Errorf("hint %q, want %q and the command", l, want)
			}
		}
	}
	if hints != 1 {
		t.Errorf("%d hints for 3 refused deliveries, want 1:\n%s", hints, strings.Join(lines, "\n"))
	}
}
