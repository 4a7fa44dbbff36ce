package main

import (
	"bytes"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestPrinterHumanGolden(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 4, 5, 123e6, time.UTC)
	run := devhook.Event{Type: "run.status", RunID: "run-7f3a", StatusV2: "queued"}
	results := []agent.Result{
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/webhooks", Event: run, Verdict: devhook.Verdict{Result: "ok"}},
			Attempt: &devhook.Attempt{Status: 200, Duration: devhook.Duration(1234 * time.Microsecond)}, Status: 200},
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/", Verdict: devhook.Verdict{Result: "invalid_signature"}},
			Attempt: &devhook.Attempt{Status: 401, Duration: devhook.Duration(380 * time.Microsecond)}, Status: 401},
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "PUT", Path: "/a/very/long/path/that/is/cut", Queued: true, Verdict: devhook.Verdict{Result: "unchecked"}},
			Attempt: &devhook.Attempt{Error: "connection refused: is your receiver running at http://localhost:8080/?", Duration: devhook.Duration(time.Millisecond)}, Status: 502},
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/", Verdict: devhook.Verdict{Result: "missing_signature"}}, Status: 401, Rejected: true},
	}
	var buf bytes.Buffer
	p := &printer{w: &buf, loc: time.UTC}
	for _, r := range results {
		p.result(r)
	}
	golden := filepath.Join("testdata", "listen-human.golden")
	if *update {
		os.WriteFile(golden, buf.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("human output differs from %s:\n%s", golden, buf.String())
	}
}

func TestPrintHeaderInNameOrder(t *testing.T) {
	var buf bytes.Buffer
	printHeader(&buf, http.Header{"X-B": {"2", "3"}, "Content-Type": {"a"}, "X-A": {"1"}})
	want := "  Content-Type: a\n  X-A: 1\n  X-B: 2\n  X-B: 3\n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

// listen --json promises that the ready line is the first: a delivery the
// agent handles between its connection and the ready line waits for it.
func TestPrinterReadyLineFirst(t *testing.T) {
	var buf bytes.Buffer
	p := &printer{w: &buf, json: true, holdUntilReady: true}
	d := &devhook.Delivery{ID: "d1", Method: "POST", Path: "/", Queued: true}
	p.result(agent.Result{Delivery: d, Status: 502})
	if buf.Len() != 0 {
		t.Fatalf("a delivery line before the ready line: %q", buf.String())
	}
	p.ready(readyInfo{PublicURL: "http://127.0.0.1:1/c/x", Channel: "x"})
	p.result(agent.Result{Delivery: &devhook.Delivery{ID: "d2", Method: "POST", Path: "/"}, Status: 200})
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 3 || !bytes.Contains(lines[0], []byte(`"event":"ready"`)) ||
		!bytes.Contains(lines[1], []byte(`"id":"d1"`)) || !bytes.Contains(lines[2], []byte(`"id":"d2"`)) {
		t.Fatalf("want ready, d1, d2; got\n%s", buf.String())
	}
}
