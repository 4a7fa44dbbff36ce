package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/devhook/devhook/receiver"
)

// A --forward URL's query is kept and the delivery's own query follows
// it, for listen, replay and scenario play alike: receivers that
// authenticate by query get their token.
func TestForwardKeepsTheTargetsQuery(t *testing.T) {
	const secret = "whsec_query"
	var mu sync.Mutex
	var got []string
	ref := receiver.New(receiver.Config{Secret: secret})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RequestURI())
		mu.Unlock()
		if r.URL.Query().Get("token") != "abc" {
			http.Error(w, "no token", http.StatusForbidden)
			return
		}
		ref.ServeHTTP(w, r)
	}))
	defer recv.Close()
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return ""
		}
		return got[len(got)-1]
	}
	const want = "/hooks/x?token=abc&y=1"

	data := t.TempDir()
	lr := startListen(t, "--forward", recv.URL+"/hooks?token=abc", "--secret", secret, "--data", data, "--inspect", "127.0.0.1:0")
	pub := lr.next(t, "ready")["public_url"].(string)
	if out, _, err := devhookCmd(t, "send", pub+"/x?y=1", "--secret", secret, "--run-id", "run-q"); err != nil || !strings.Contains(out, "200 OK") {
		t.Fatalf("send: %v\n%s", err, out)
	}
	d := lr.next(t, "delivery")
	if last() != want || d["status"] != float64(200) {
		t.Fatalf("listen forwarded to %q (delivery %v), want %s", last(), d, want)
	}
	id := d["id"].(string)

	// replay through the running listen, and offline with --to.
	if out, _, err := devhookCmd(t, "replay", id, "--data", data); err != nil || !strings.Contains(out, recv.URL+want) || last() != want {
		t.Fatalf("replay: %v, receiver got %q\n%s", err, last(), out)
	}
	scen := filepath.Join(t.TempDir(), "run.json")
	if _, stderr, err := devhookCmd(t, "scenario", "save", scen, "--run", "run-q", "--data", data); err != nil {
		t.Fatalf("scenario save: %v %s", err, stderr)
	}
	lr.stop(t)
	if out, _, err := devhookCmd(t, "replay", id, "--data", data, "--to", recv.URL+"/hooks?token=abc", "--secret", secret); err != nil ||
		!strings.Contains(out, recv.URL+want) || last() != want {
		t.Fatalf("replay --to: %v, receiver got %q\n%s", err, last(), out)
	}
	if out, stderr, err := devhookCmd(t, "scenario", "play", scen, "--to", recv.URL+"/hooks?token=abc", "--secret", secret, "--speed", "0"); err != nil || last() != want {
		t.Fatalf("scenario play: %v, receiver got %q\n%s%s", err, last(), out, stderr)
	}
}

// A receiver that accepts deliveries whose signature failed does not
// check signatures: listen says so in one line, once.
func TestListenHintsOnceWhenTheReceiverAcceptsABadSignature(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer recv.Close()
	h := startHumanListen(t, "--forward", recv.URL, "--secret", "whsec_listen", "--data", t.TempDir())
	var pub string
	for _, l := range h.until(t, "public URL") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "public" {
			pub = f[2]
		}
	}
	h.until(t, "recording")
	for _, sec := range []string{"whsec_other", "whsec_other", ""} {
		if _, _, err := devhookCmd(t, "send", pub, "--secret", sec); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	for range 3 {
		lines = append(lines, h.until(t, "→ 200")...)
	}
	h.cancel()
	for l := range h.lines {
		lines = append(lines, l)
	}
	var hints []string
	for _, l := range lines {
		if strings.Contains(l, "hint:") {
			hints = append(hints, l)
		}
	}
	if len(hints) != 1 || !strings.Contains(hints[0], "invalid_signature → 200") || !strings.Contains(hints[0], "does not check signatures") {
		t.Fatalf("hints %q, want one on the receiver not checking signatures; lines:\n%s", hints, strings.Join(lines, "\n"))
	}
}
