package main

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
		// A live delivery the receiver did not answer: the record says none, the sender got 502.
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook", RawQuery: "a=1", Verdict: devhook.Verdict{Result: "ok"}},
			Attempt: &devhook.Attempt{Error: "connection refused: is your receiver running at http://localhost:8080/hook?a=1?", Duration: devhook.Duration(700 * time.Microsecond)}, Status: 502},
		// UUID run ids: a short id of fixed width, status_v2 lined up.
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook", Event: devhook.Event{RunID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", StatusV2: "succeeded"}, Verdict: devhook.Verdict{Result: "ok"}},
			Attempt: &devhook.Attempt{Status: 200, Duration: devhook.Duration(5004380 * time.Microsecond)}, Status: 200},
		// A second --forward target that failed.
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook", Verdict: devhook.Verdict{Result: "ok"}},
			Attempt: &devhook.Attempt{Status: 200, Duration: devhook.Duration(2 * time.Millisecond)}, Status: 200,
			Copies: []*devhook.Attempt{{Target: "http://localhost:9090/hook", Error: "connection refused: is your receiver running at http://localhost:9090/hook?", Duration: devhook.Duration(300 * time.Microsecond)}}},
		// Cut by shutdown: a queued delivery, and a live one the relay queues.
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook", Queued: true, Verdict: devhook.Verdict{Result: "ok"}},
			Attempt: &devhook.Attempt{Error: "canceled: devhook is stopping", Duration: devhook.Duration(3 * time.Millisecond)}, Status: 502, Owed: true, Cut: true},
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook", Verdict: devhook.Verdict{Result: "ok"}},
			Attempt: &devhook.Attempt{Status: 200, Duration: devhook.Duration(4 * time.Second)}, Status: 200, Cut: true},
		// A receiver that accepts deliveries whose signature failed: the
		// hint once, not on the second.
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook", Verdict: devhook.Verdict{Result: "invalid_signature"}},
			Attempt: &devhook.Attempt{Status: 200, Target: "http://localhost:8080/hook", Duration: devhook.Duration(time.Millisecond)}, Status: 200},
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook", Verdict: devhook.Verdict{Result: "invalid_signature"}},
			Attempt: &devhook.Attempt{Status: 200, Target: "http://localhost:8080/hook", Duration: devhook.Duration(time.Millisecond)}, Status: 200},
		// Replays asked for from the inspector or devhook replay.
		{Delivery: &devhook.Delivery{ID: "01a20000-0000-7000-8000-000000000001", ReceivedAt: at, Method: "POST", Path: "/hook", RawQuery: "a=1"}, Replay: true,
			Attempt: &devhook.Attempt{Seq: 3, StartedAt: at.Add(time.Minute), Status: 401, Duration: devhook.Duration(900 * time.Microsecond)}, Status: 401},
		{Delivery: &devhook.Delivery{ID: "01a20000-0000-7000-8000-000000000001", ReceivedAt: at, Method: "POST", Path: "/hook"}, Replay: true,
			Attempt: &devhook.Attempt{Seq: 4, StartedAt: at.Add(2 * time.Minute), Status: 200, Duration: devhook.Duration(1100 * time.Microsecond),
				Request: &devhook.Request{Resigned: true}}, Status: 200},
		// Owed deliveries that went later: by a retry; at its first try,
		// after waiting behind an earlier one of its run.
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook"}, Retry: 2, Since: at,
			Attempt: &devhook.Attempt{StartedAt: at.Add(16 * time.Second), Status: 200, Duration: devhook.Duration(time.Millisecond)}, Status: 200},
		{Delivery: &devhook.Delivery{ReceivedAt: at, Method: "POST", Path: "/hook"}, Followed: true, Since: at,
			Attempt: &devhook.Attempt{StartedAt: at.Add(16 * time.Second), Status: 200, Duration: devhook.Duration(time.Millisecond)}, Status: 200},
	}
	var buf bytes.Buffer
	p := &printer{w: &buf, loc: time.UTC, retryFor: time.Hour}
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

// With a UUID run id, queued, running and succeeded must still differ.
func TestRunColumnKeepsStatusV2(t *testing.T) {
	id := "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	seen := map[string]bool{}
	for _, st := range []string{"queued", "running", "succeeded"} {
		got := runColumn(devhook.Event{RunID: id, StatusV2: st}, runWidth)
		if len([]rune(got)) > runWidth || !strings.HasSuffix(got, " "+st) || seen[got] {
			t.Errorf("runColumn(%s) = %q: want at most %d characters ending in the status_v2, distinct", st, got, runWidth)
		}
		seen[got] = true
	}
	// A body with a status_v2 and no run id: the line still says the
	// status, as deliveries list does.
	if got := runColumn(devhook.Event{StatusV2: "failed"}, runWidth); !strings.HasPrefix(got, "-") || !strings.HasSuffix(got, " failed") {
		t.Errorf("runColumn without a run id = %q, want \"-\" and the status_v2", got)
	}
	if got := runColumn(devhook.Event{}, runWidth); got != "-" {
		t.Errorf("runColumn of no event = %q, want \"-\"", got)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		380 * time.Microsecond: "0.4ms", 3300 * time.Microsecond: "3.3ms", 999 * time.Millisecond: "999.0ms",
		5004380 * time.Microsecond: "5.00s", 90 * time.Second: "90.00s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestUseColor(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	tty := func(io.Writer) bool { return true }
	notTTY := func(io.Writer) bool { return false }
	for _, tt := range []struct {
		name   string
		json   bool
		getenv func(string) string
		isTTY  func(io.Writer) bool
		want   bool
	}{
		{"terminal", false, env(), tty, true},
		{"not a terminal", false, env(), notTTY, false},
		{"NO_COLOR", false, env("NO_COLOR", "1"), tty, false},
		{"--json", true, env(), tty, false},
		{"dumb terminal", false, env("TERM", "dumb"), tty, false},
	} {
		if got := useColor(io.Discard, tt.json, tt.getenv, tt.isTTY); got != tt.want {
			t.Errorf("%s: useColor = %v, want %v", tt.name, got, tt.want)
		}
	}
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is not a terminal")
	}
	var buf bytes.Buffer
	p := &printer{w: &buf, loc: time.UTC, color: true}
	p.result(agent.Result{Delivery: &devhook.Delivery{Method: "POST", Path: "/", Verdict: devhook.Verdict{Result: "ok"}},
		Attempt: &devhook.Attempt{Status: 500}, Status: 500})
	if !strings.Contains(buf.String(), colorGreen+"ok") || !strings.Contains(buf.String(), colorRed+"500"+colorReset) {
		t.Errorf("coloured line %q: want a green verdict and a red 500", buf.String())
	}
}

// The --json delivery line: its fields, their order and their escaping are
// encoding/json's for deliveryLine (it was written by hand until the saving
// fell under the 5 % rule of docs/ARCHITECTURE.md).
func TestDeliveryLineJSON(t *testing.T) {
	st := 401
	l := deliveryLine{Event: "delivery", ID: "0195-abc", Method: "POST", Path: "/hook?a=1&b=<2>", RunID: "run-1", StatusV2: "running",
		Verdict: "ok", Status: 401, Receiver: &st, Duration: 1.5, Queued: true, Owed: true, Error: "bad \xff", Hint: "line\u2028sep",
		Copies: []copyLine{{Target: "http://b"}}, Route: &devhook.Route{Index: 2, Text: "path=/x", Target: "http://a"}}
	want := `{"event":"delivery","id":"0195-abc","method":"POST","path":"/hook?a=1\u0026b=\u003c2\u003e","run_id":"run-1","status_v2":"running",` +
		`"verdict":"ok","status":401,"receiver_status":401,"duration_ms":1.5,"queued":true,"owed":true,"error":"bad \ufffd","hint":"line\u2028sep",` +
		`"failed_copies":[{"target":"http://b","receiver_status":null}],"route":{"index":2,"text":"path=/x","target":"http://a"}}` + "\n"
	if got := string(jsonLine(l)); got != want {
		t.Fatalf("delivery line:\n got %s\nwant %s", got, want)
	}
	if got := string(jsonLine(deliveryLine{Event: "delivery"})); got != `{"event":"delivery","id":"","method":"","path":"","verdict":"","status":0,"receiver_status":null,"duration_ms":0}`+"\n" {
		t.Fatalf("empty delivery line: %s", got)
	}
}

// A delivery owed behind an earlier one of its run, delivered at its first
// try, is no retry: its own event, with how long it waited.
func TestFollowedLineJSON(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 4, 5, 0, time.UTC)
	d := &devhook.Delivery{ID: "0195-abc", Method: "POST", Path: "/hook"}
	var buf bytes.Buffer
	p := &printer{w: &buf, json: true}
	p.result(agent.Result{Delivery: d, Followed: true, Since: at, Status: 200,
		Attempt: &devhook.Attempt{StartedAt: at.Add(16 * time.Second), Status: 200, Duration: devhook.Duration(time.Millisecond)}})
	p.result(agent.Result{Delivery: d, Retry: 2, Since: at, Status: 200,
		Attempt: &devhook.Attempt{StartedAt: at.Add(16 * time.Second), Status: 200, Duration: devhook.Duration(time.Millisecond)}})
	want := `{"event":"followed","id":"0195-abc","method":"POST","path":"/hook","status":200,"duration_ms":1,"waited_ms":16000}` + "\n" +
		`{"event":"retry","id":"0195-abc","method":"POST","path":"/hook","status":200,"duration_ms":1,"retry":2,"after_ms":16000}` + "\n"
	if got := buf.String(); got != want {
		t.Fatalf("lines:\n got %s\nwant %s", got, want)
	}
}
