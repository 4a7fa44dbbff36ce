package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// End-to-end tests of the relay's promises (issue 10: 1, 4, 5, 10), with
// the real devhook relay and devhook listen.

// relayProc runs devhook relay with args on a free loopback port and
// returns it with its base URL.
func relayProc(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	r := startProc(t, append([]string{"relay", "serve", "--addr", "127.0.0.1:0", "--data", t.TempDir()}, args...)...)
	const prefix = "devhook relay on "
	return r, strings.TrimPrefix(r.nextLine(t, prefix), prefix)
}

// listenProc runs devhook listen --json against relayURL with data and
// returns it with its ready line.
func listenProc(t *testing.T, relayURL, data, forward string) (*proc, map[string]any) {
	t.Helper()
	l := startProc(t, "listen", "--json", "--relay", relayURL, "--forward", forward, "--inspect", "off", "--data", data)
	return l, l.nextJSON(t, "ready")
}

func sendTo(t *testing.T, u string, header http.Header, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling other processes
	}
}

// Item 1: a request whose headers are just over what a frame carries is
// refused with 431 instead of being queued for ever; the deliveries queued
// after it reach the agent when it connects.
func TestRelay_OversizedHeadRefusedQueueFlows(t *testing.T) {
	recv := &bodies{}
	rs := httptest.NewServer(recv)
	defer rs.Close()
	_, relayURL := relayProc(t)
	data := t.TempDir()
	l, ready := listenProc(t, relayURL, data, rs.URL)
	public := ready["public_url"].(string)
	l.stop(t, 10*time.Second)

	// 1 MiB + 1 KiB of header: net/http passes it (its limit is 1 MiB +
	// 4 KiB), a frame header cannot carry it.
	st, body := sendTo(t, public+"/hook", http.Header{"X-Fill": {strings.Repeat("f", 1<<20+1<<10)}}, "too big a head")
	if st != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized head: %d %s, want 431", st, body)
	}
	if st, body := sendTo(t, public+"/hook", nil, "after it"); st != http.StatusAccepted {
		t.Fatalf("queued delivery: %d %s, want 202", st, body)
	}
	listenProc(t, relayURL, data, rs.URL)
	pollUntil(t, "the queued delivery at the receiver", func() bool { return recv.count("after it") == 1 })
}

// Item 4: queued deliveries are sent once each: the agent reports none as
// a duplicate.
func TestRelay_QueuedDeliveriesNotSentTwice(t *testing.T) {
	rs := httptest.NewServer(&bodies{})
	defer rs.Close()
	_, relayURL := relayProc(t)
	data := t.TempDir()
	l, ready := listenProc(t, relayURL, data, rs.URL)
	public := ready["public_url"].(string)
	l.stop(t, 10*time.Second)
	const n = 150
	for i := range n {
		if st, body := sendTo(t, public+"/hook", nil, fmt.Sprint(i)); st != http.StatusAccepted {
			t.Fatalf("delivery %d: %d %s", i, st, body)
		}
	}
	l, _ = listenProc(t, relayURL, data, rs.URL)
	seen := map[string]int{}
	dups := 0
	for len(seen) < n {
		m := l.nextJSON(t, "delivery")
		id := fmt.Sprint(m["id"])
		seen[id]++
		if seen[id] > 1 || m["duplicate"] == true {
			dups++
		}
	}
	l.stop(t, 10*time.Second)
	for line := range l.lines { // what was under way when it stopped
		if strings.Contains(line, `"event":"delivery"`) && strings.Contains(line, `"duplicate":true`) {
			dups++
		}
	}
	if dups > 0 {
		t.Fatalf("%d of %d queued deliveries reached the agent twice", dups, n)
	}
}

// Item 5: a second listen on the same channel (the same channels.json in
// two data directories) takes it over for good: the first stops, the
// relay logs one takeover, no delivery reaches the receiver twice.
func TestRelay_TakeoverIsStable(t *testing.T) {
	recv := &bodies{}
	rs := httptest.NewServer(recv)
	defer rs.Close()
	relay, relayURL := relayProc(t)
	dir := t.TempDir()
	d1, d2 := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	first, ready := listenProc(t, relayURL, d1, rs.URL)
	public := ready["public_url"].(string)
	saved, err := os.ReadFile(filepath.Join(d1, "channels.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(d2, 0o700)
	if err := os.WriteFile(filepath.Join(d2, "channels.json"), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	second, _ := listenProc(t, relayURL, d2, rs.URL)
	select {
	case <-first.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the first listen still runs after another took its channel over")
	}
	const n = 30
	for i := range n {
		if st, body := sendTo(t, public+"/hook", nil, fmt.Sprintf("live %d", i)); st != 200 {
			t.Fatalf("delivery %d: %d %s", i, st, body)
		}
	}
	for i := range n {
		if c := recv.count(fmt.Sprintf("live %d", i)); c != 1 {
			t.Errorf("delivery %d reached the receiver %d times", i, c)
		}
	}
	select {
	case <-second.done:
		t.Fatalf("the second listen ended too: %v %s", second.err, second.stderr)
	default:
	}
	if c := strings.Count(relay.stderr.String(), "a new agent connected"); c != 1 {
		t.Fatalf("the relay logged %d takeovers, want 1:\n%s", c, relay.stderr)
	}
}

// Item 10: bodies that trickle are cut after --body-timeout with 408 and
// their connections closed, while /healthz keeps answering. Each holds of
// the channel's in-flight bytes what it sent, not the 10 MiB it declared:
// none is refused with 429.
func TestRelay_TricklingBodiesCut(t *testing.T) {
	rs := httptest.NewServer(&bodies{})
	defer rs.Close()
	_, relayURL := relayProc(t, "--body-timeout", "1s")
	l, ready := listenProc(t, relayURL, t.TempDir(), rs.URL)
	public, _ := url.Parse(ready["public_url"].(string))
	l.stop(t, 10*time.Second)

	const n = 50
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", public.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST %s/hook HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\nthe start", public.Path, public.Host, 10<<20-1)
		conns[i] = c
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(relayURL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz with %d trickling senders: %v %v", n, resp, err)
	}
	resp.Body.Close()
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("trickling sender %d: no answer: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("trickling sender %d: %s, want 408", i, resp.Status)
		}
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("trickling sender %d: connection not closed: %v", i, err)
		}
	}
}

// The relay keeps at most --max-conns connections open: more wait to be
// accepted rather than take a file descriptor, and go through once a
// connection closes, so a flood of slow senders cannot exhaust the
// descriptors the relay needs for its agents and files.
func TestRelay_MaxConns(t *testing.T) {
	_, relayURL := relayProc(t, "--max-conns", "2")
	host := strings.TrimPrefix(relayURL, "http://")
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("POST /c/x/ HTTP/1.1\r\nHost: x\r\n")) // headers never finished
		idle = append(idle, c)
	}
	quick := &http.Client{Timeout: 500 * time.Millisecond}
	if resp, err := quick.Get(relayURL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a third connection was served while two were open: %s", resp.Status)
	}
	idle[0].Close()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(relayURL + "/healthz")
	if err != nil {
		t.Fatalf("after one connection closed, /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
}

// DEVHOOK_RELAY_TOKEN is the relay's open token and listen's relay token,
// read when the command runs; --help never prints it.
func TestRelayTokenFromTheEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("runs devhook relay and listen processes")
	}
	t.Setenv("DEVHOOK_RELAY_TOKEN", "env-open-token-0123456789")
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer recv.Close()
	_, base := relayProc(t)
	resp, err := http.Post(base+"/v1/channels", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("opening a channel without the token from the environment: %s, want 401", resp.Status)
	}
	_, ready := listenProc(t, base, t.TempDir(), recv.URL)
	if pub, _ := ready["public_url"].(string); !strings.HasPrefix(pub, base+"/c/") {
		t.Fatalf("listen with the token from the environment: ready %v", ready)
	}
	for _, cmd := range [][]string{{"relay", "serve"}, {"listen"}} {
		out, _, err := devhookCmd(t, append(cmd, "--help")...)
		if err != nil || strings.Contains(out, "env-open-token-0123456789") {
			t.Errorf("devhook %s --help: %v, prints the token: %v", cmd, err, strings.Contains(out, "env-open-token-0123456789"))
		}
	}
}
