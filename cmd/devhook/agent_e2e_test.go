package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/signature"
)

// End-to-end tests of the agent's promises (issue 10): a full disk, a
// receiver that is down when queued deliveries drain, an answer that cannot
// be passed back, and a channel taken over by another listen.

const e2eSecret = "whsec_agent_e2e"

// nextLine returns the next stdout line that starts with prefix.
func (p *proc) nextLine(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("process ended before a line %q; stderr: %s", prefix, p.stderr)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("no line %q within 20s; stderr: %s", prefix, p.stderr)
		}
	}
}

// events collects the JSON lines of a listen --json from the point it is
// called.
type events struct {
	mu    sync.Mutex
	lines []map[string]any
	raw   []string
}

func (p *proc) collect() *events {
	e := &events{}
	go func() {
		for line := range p.lines {
			var m map[string]any
			json.Unmarshal([]byte(line), &m)
			e.mu.Lock()
			e.lines = append(e.lines, m)
			e.raw = append(e.raw, line)
			e.mu.Unlock()
		}
	}()
	return e
}

// of returns the events named event.
func (e *events) of(event string) []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []map[string]any
	for _, m := range e.lines {
		if m["event"] == event {
			out = append(out, m)
		}
	}
	return out
}

func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.raw, "\n")
}

// post sends a signed body to url and returns the status, the
// Retry-After header and the answer's body.
func post(t *testing.T, url string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(devhook.SignatureHeader, signature.Sign(e2eSecret, time.Now(), body))
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}

// startRelay runs devhook relay and returns it with its URL.
func startRelay(t *testing.T, data string) (*proc, string) {
	t.Helper()
	return relayProc(t, "--data", data)
}

// openChannel runs listen once to open a channel on relayURL saved under
// data, and returns the channel's public URL.
func openChannel(t *testing.T, relayURL, data, forward string) string {
	t.Helper()
	l := startProc(t, "listen", "--json", "--relay", relayURL, "--forward", forward, "--secret", e2eSecret,
		"--inspect", "off", "--data", data)
	public := l.nextJSON(t, "ready")["public_url"].(string)
	l.stop(t, 10*time.Second)
	return public
}

func queueBodies(t *testing.T, public string, n, size int, prefix string) []string {
	t.Helper()
	var out []string
	for i := range n {
		body := fmt.Sprintf(`{"%s":%d,"pad":"%s"}`, prefix, i, strings.Repeat("p", size))
		if st, _, b := post(t, public+"/hook", []byte(body)); st != http.StatusAccepted {
			t.Fatalf("queueing delivery %d with no agent: %d %s", i, st, b)
		}
		out = append(out, body)
	}
	return out
}

// requireMounts skips unless this process may mount a tmpfs in a new
// mount namespace; under CI it fails instead.
func requireMounts(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs "+dir).CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("a full disk is made with unshare -m and a 4 MiB tmpfs, which this machine does not allow (%v: %s)", err, bytes.TrimSpace(out))
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Issue 10, item 3: with the --data disk full, a live sender gets 503 and
// its delivery is not forwarded; queued deliveries are held, not
// acknowledged; once there is room again, every queued delivery reaches
// the receiver once and is recorded, without restarting listen.
func TestListen_FullDisk(t *testing.T) {
	bin := devhookBinary(t)
	requireMounts(t)
	dir := t.TempDir()
	recv := &bodies{}
	rs := httptest.NewServer(recv)
	defer rs.Close()
	_, relayURL := startRelay(t, filepath.Join(dir, "relay"))

	// A channel, saved where the tmpfs will not hide it.
	setup := filepath.Join(dir, "setup")
	public := openChannel(t, relayURL, setup, rs.URL)
	const queued, size = 120, 8 << 10 // 1 MiB of deliveries, twice the room left
	want := queueBodies(t, public, queued, size, "queued")

	// listen on a 4 MiB tmpfs with 512 KiB free.
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`mount -t tmpfs -o size=4m tmpfs %[1]s && cp %[2]s/channels.json %[1]s/ && dd if=/dev/zero of=%[1]s/filler bs=64k count=56 2>/dev/null && exec %[3]s listen --json --relay %[4]s --forward %[5]s --secret %[6]s --inspect 127.0.0.1:0 --data %[1]s`,
		data, setup, bin, relayURL, rs.URL, e2eSecret)
	l := startCmd(t, "unshare", "-m", "sh", "-c", script)
	// The queue drains as soon as listen connects, maybe before it says
	// it is ready: keep what it logged before.
	early := ""
	var ready map[string]any
	for ready == nil {
		select {
		case line := <-l.lines:
			var m map[string]any
			json.Unmarshal([]byte(line), &m)
			switch m["event"] {
			case "ready":
				ready = m
			case "log":
				early += fmt.Sprint(m["message"]) + "\n"
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no ready line; stderr: %s", l.stderr)
		}
	}
	insp := ready["inspector_url"].(string)
	ev := l.collect()
	defer func() {
		if t.Failed() {
			var h devhook.Health
			getJSON(t, insp+"/api/status", &h)
			t.Logf("status %+v; listen's output:\n%s\nstderr: %s", h, ev, l.stderr)
		}
	}()

	var h devhook.Health
	waitUntil(t, "the inspector to report recording failing with deliveries held", func() bool {
		h = devhook.Health{}
		getJSON(t, insp+"/api/status", &h)
		return h.StorageError != "" && h.Held > 0
	})
	if !strings.Contains(h.StorageError, "no space left on device") {
		t.Errorf("storage_error %q", h.StorageError)
	}
	forwardedBefore := recv.total()
	if forwardedBefore >= queued {
		t.Fatalf("all %d queued deliveries went through on a full disk", forwardedBefore)
	}

	// Live senders get 503, never an unrecorded 200.
	var live []string
	for i := range 5 {
		// Larger than a held delivery, so that no gap left in the
		// journal's last page can take it.
		body := fmt.Sprintf(`{"live":%d,"pad":"%s"}`, i, strings.Repeat("l", 2*size))
		live = append(live, body)
		st, hdr, b := post(t, public+"/hook", []byte(body))
		if st != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
			strings.TrimSpace(b) != "devhook could not record the delivery: disk full; not forwarded" {
			t.Fatalf("live delivery %d on a full disk: %d %q (Retry-After %q)", i, st, b, hdr.Get("Retry-After"))
		}
		if recv.count(body) != 0 {
			t.Fatalf("live delivery %d reached the receiver unrecorded", i)
		}
	}
	n503 := func() int {
		n := 0
		for _, m := range ev.of("delivery") {
			if m["status"] == float64(503) && strings.Contains(fmt.Sprint(m["error"]), "could not record the delivery") {
				n++
			}
		}
		return n
	}
	waitUntil(t, "five 503s in listen's output", func() bool { return n503() >= 5 })
	if n := n503(); n != 5 {
		t.Errorf("%d delivery lines say 503, want 5:\n%s", n, ev)
	}

	// Room again: everything queued goes through by itself.
	if err := os.Remove(fmt.Sprintf("/proc/%d/root%s/filler", l.cmd.Process.Pid, data)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every queued delivery at the receiver", func() bool { return recv.total() >= queued })
	for i, body := range want {
		if c := recv.count(body); c != 1 {
			t.Errorf("queued delivery %d reached the receiver %d times, want 1", i, c)
		}
	}
	waitUntil(t, "recording to work again", func() bool {
		h = devhook.Health{}
		getJSON(t, insp+"/api/status", &h)
		return h.StorageError == "" && h.Held == 0
	})
	var page struct {
		Items []devhook.Summary `json:"items"`
	}
	getJSON(t, insp+"/api/deliveries?limit=500", &page)
	recorded := 0
	for _, s := range page.Items {
		if s.Queued && s.Status == 200 && s.Attempts == 1 {
			recorded++
		}
	}
	if recorded != queued {
		t.Errorf("%d queued deliveries recorded with one attempt answered 200, want %d", recorded, queued)
	}
	// Live deliveries are answered again, by the same process.
	if st, _, b := post(t, public+"/hook", []byte(`{"after":1}`)); st != 200 {
		t.Fatalf("live delivery after room returned: %d %s", st, b)
	}
	// Said once each, on stdout with --json (before the ready line too).
	logs := func() string {
		s := early
		for _, m := range ev.of("log") {
			s += fmt.Sprint(m["message"]) + "\n"
		}
		return s
	}
	waitUntil(t, "listen to say recording works again", func() bool { return strings.Contains(logs(), "recording works again after") })
	if strings.Count(logs(), "recording failed: ") != 1 || strings.Count(logs(), "recording works again after") != 1 {
		t.Errorf("listen's log should say once that recording failed (%d) and once that it works again (%d):\n%s", strings.Count(logs(), "recording failed: "), strings.Count(logs(), "recording works again after"), logs())
	}
	select {
	case <-l.done:
		t.Fatalf("listen ended: %v; stderr: %s", l.err, l.stderr)
	default:
	}
}

// Issue 10, item 2: deliveries queued while no agent was connected, drained
// while the receiver is down, reach the receiver exactly once when it comes
// up, each with its retries recorded.
func TestListen_QueuedDeliveriesWaitForTheReceiver(t *testing.T) {
	devhookBinary(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recvAddr := ln.Addr().String()
	ln.Close() // the receiver is down
	relayProc, relayURL := startRelay(t, filepath.Join(dir, "relay"))
	data := filepath.Join(dir, "data")
	public := openChannel(t, relayURL, data, recvAddr)
	const n = 30
	want := queueBodies(t, public, n, 10, "q")

	l := startProc(t, "listen", "--json", "--relay", relayURL, "--forward", recvAddr, "--secret", e2eSecret,
		"--inspect", "127.0.0.1:0", "--data", data)
	insp := l.nextJSON(t, "ready")["inspector_url"].(string)
	ev := l.collect()
	defer func() {
		if t.Failed() {
			l.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, on stderr
			<-l.done
			t.Logf("listen's output:\n%s\nstderr: %s\nrelay's stderr: %s", ev, l.stderr, relayProc.stderr)
		}
	}()
	// One line per delivery says it is owed; a delivery the relay sends
	// again (at least once) says duplicate and is not forwarded again.
	// They have no run_id and one path: one run, forwarded in order. The
	// first is forwarded (502) and owed; the others are owed behind it,
	// not forwarded while it is owed (202).
	owed := func() map[string]bool {
		ids := map[string]bool{}
		for _, m := range ev.of("delivery") {
			switch {
			case m["duplicate"] == true:
			case m["owed"] == true && m["status"] == float64(502) && strings.Contains(fmt.Sprint(m["error"]), "connection refused"):
				ids[m["id"].(string)] = true
			case m["owed"] == true && m["status"] == float64(http.StatusAccepted) && len(ids) > 0:
				ids[m["id"].(string)] = true
			default:
				t.Fatalf("delivery line %v, want owed with 502, or owed behind the first with 202", m)
			}
		}
		return ids
	}
	waitUntil(t, "every delivery owed", func() bool { return len(owed()) == n })
	var h devhook.Health
	getJSON(t, insp+"/api/status", &h)
	if h.Owed != n {
		t.Errorf("status says %d owed, want %d", h.Owed, n)
	}

	recv := &bodies{}
	ln, err = listenRetryE2E(recvAddr)
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewUnstartedServer(recv)
	rs.Listener.Close()
	rs.Listener = ln
	rs.Start()
	defer rs.Close()

	// The first goes by a retry; the others, behind it, at their first try.
	waitUntil(t, "a line for each that went", func() bool { return len(ev.of("retry"))+len(ev.of("followed")) >= n })
	if r, f := len(ev.of("retry")), len(ev.of("followed")); r != 1 || f != n-1 {
		t.Errorf("%d retry lines and %d followed, want 1 and %d: only the first was tried before", r, f, n-1)
	}
	for i, body := range want {
		if c := recv.count(body); c != 1 {
			t.Errorf("delivery %d reached the receiver %d times, want 1", i, c)
		}
	}
	var page struct {
		Items []devhook.Summary `json:"items"`
	}
	getJSON(t, insp+"/api/deliveries?limit=100", &page)
	if len(page.Items) != n {
		t.Fatalf("%d deliveries recorded, want %d", len(page.Items), n)
	}
	retried := 0
	for _, s := range page.Items {
		var d devhook.Delivery
		getJSON(t, insp+"/api/deliveries/"+s.ID, &d)
		// The one tried first: a failed redelivery, then retries; each of
		// the others, behind it: one redelivery, its first try.
		first, last := d.Attempts[0], d.LastAttempt()
		tried := len(d.Attempts) > 1
		if s.Retry != nil || first.Kind != devhook.AttemptRedelivery || tried && (first.Status != 0 || last.Kind != devhook.AttemptRetry) || last.Status != 200 {
			t.Errorf("delivery %s: retry %+v, attempts %d, first %s/%d, last %s/%d", s.ID, s.Retry, len(d.Attempts), first.Kind, first.Status, last.Kind, last.Status)
		}
		if tried {
			retried++
		}
	}
	if retried != 1 {
		t.Errorf("%d deliveries were retried, want the first alone", retried)
	}
	getJSON(t, insp+"/api/status", &h)
	if h.Owed != 0 || h.Failed != 0 {
		t.Errorf("status after delivery: %+v", h)
	}
}

func listenRetryE2E(addr string) (net.Listener, error) {
	var err error
	for range 100 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// Issue 10, item 11: a receiver's answer with headers over 1 MiB cannot go
// back through the relay: the sender gets 502 at once, and listen says why.
func TestListen_AnswerTooLargeToFrame(t *testing.T) {
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Huge", strings.Repeat("h", 1100<<10))
		w.Write([]byte("ok"))
	}))
	defer rs.Close()
	l := startProc(t, "listen", "--json", "--forward", rs.URL, "--secret", e2eSecret, "--inspect", "off",
		"--relay-addr", "127.0.0.1:0", "--data", t.TempDir())
	public := l.nextJSON(t, "ready")["public_url"].(string)
	start := time.Now()
	st, _, body := post(t, public+"/hook", []byte(`{}`))
	if took := time.Since(start); st != http.StatusBadGateway || took > 3*time.Second {
		t.Fatalf("sender got %d after %s, want 502 within 3s", st, took)
	}
	if !strings.Contains(body, "bytes of headers, over the 1048576 devhook can pass back to the sender") {
		t.Errorf("body %q", body)
	}
	m := l.nextJSON(t, "delivery")
	if m["status"] != float64(502) || !strings.Contains(fmt.Sprint(m["error"]), "the receiver answered 200 with") {
		t.Errorf("delivery line %v", m)
	}
}

// Issue 10, item 5: a listen whose channel another listen took over (the
// same channels.json in two --data directories) stops and says why.
func TestListen_StopsWhenChannelTakenOver(t *testing.T) {
	devhookBinary(t)
	dir := t.TempDir()
	rs := httptest.NewServer(&bodies{})
	defer rs.Close()
	_, relayURL := startRelay(t, filepath.Join(dir, "relay"))
	d1, d2 := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	first := startProc(t, "listen", "--json", "--relay", relayURL, "--forward", rs.URL, "--inspect", "off", "--data", d1)
	ch := first.nextJSON(t, "ready")["channel"]
	saved, err := os.ReadFile(filepath.Join(d1, "channels.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(d2, 0o700)
	if err := os.WriteFile(filepath.Join(d2, "channels.json"), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	second := startProc(t, "listen", "--json", "--relay", relayURL, "--forward", rs.URL, "--inspect", "off", "--data", d2)
	if got := second.nextJSON(t, "ready")["channel"]; got != ch {
		t.Fatalf("second listen on channel %v, want %v", got, ch)
	}
	select {
	case <-first.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the first listen still runs after another took its channel over")
	}
	if first.err == nil {
		t.Error("the first listen exited 0")
	}
	if want := fmt.Sprintf("another devhook listen took over channel %s", ch); !strings.Contains(first.stderr.String(), want) {
		t.Errorf("stderr %q does not say %q", first.stderr, want)
	}
	select {
	case <-second.done:
		t.Fatalf("the second listen ended too: %v %s", second.err, second.stderr)
	default:
	}
}

// The lines listen prints for the outcomes of issue 10, in both modes.
func TestPrinterReliabilityLines(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 4, 5, 123e6, time.UTC)
	d := &devhook.Delivery{ID: "01a20000-0000-7000-8000-000000000001", ReceivedAt: at, Method: "POST", Path: "/hook", Queued: true,
		Verdict: devhook.Verdict{Result: "ok"}}
	live := &devhook.Delivery{ID: "01a20000-0000-7000-8000-000000000002", ReceivedAt: at, Method: "POST", Path: "/hook", Verdict: devhook.Verdict{Result: "ok"}}
	refused := "connection refused: is your receiver running at http://localhost:8080/hook?"
	results := []agent.Result{
		// Owed: retried later.
		{Delivery: d, Attempt: &devhook.Attempt{Error: refused, Duration: devhook.Duration(time.Millisecond)}, Status: 502, Owed: true},
		// Delivered by a retry.
		{Delivery: d, Attempt: &devhook.Attempt{Kind: devhook.AttemptRetry, StartedAt: at.Add(90 * time.Second), Status: 200, Duration: devhook.Duration(2 * time.Millisecond)},
			Status: 200, Retry: 4, Since: at},
		// Given up.
		{Delivery: d, Attempt: &devhook.Attempt{Kind: devhook.AttemptRetry, StartedAt: at.Add(time.Hour), Error: refused}, GaveUp: true,
			Error: "gave up after 21 attempts over 1h: " + refused, Since: at},
		// Not recorded: 503, not forwarded.
		{Delivery: live, Status: 503, Error: "could not record the delivery: write journal: no space left on device; answered 503, not forwarded"},
		// An answer that cannot be passed back.
		{Delivery: live, Attempt: &devhook.Attempt{Status: 200, Duration: devhook.Duration(time.Millisecond),
			Error: "the receiver answered 200 with 1126491 bytes of headers, over the 1048576 devhook can pass back to the sender; the sender got 502"}, Status: 502},
		// Owed behind an earlier delivery of its run: not forwarded yet.
		{Delivery: live, Status: 202, Owed: true, Behind: true},
		// An answer over 10 MiB: the sender got it cut.
		{Delivery: live, Attempt: &devhook.Attempt{Status: 200, Duration: devhook.Duration(40 * time.Millisecond),
			Error: "the receiver's answer is over 10485760 bytes; the rest was dropped; the sender got its first 10485760 bytes, marked Devhook-Answer-Cut"}, Status: 200},
		// An answer that came after the relay stopped waiting: the sender got 504.
		{Delivery: live, Attempt: &devhook.Attempt{Status: 200, Duration: devhook.Duration(20 * time.Second),
			Error: "the sender got 504: the relay lets a sender wait 10s for the answer (its --timeout), and this one came too late for it"}, Status: 504},
	}
	var human, js bytes.Buffer
	hp := &printer{w: &human, loc: time.UTC, retryFor: time.Hour}
	jp := &printer{w: &js, json: true, retryFor: time.Hour}
	for _, r := range results {
		hp.result(r)
		jp.result(r)
	}
	got := human.String() + js.String()
	golden := filepath.Join("testdata", "listen-reliability.golden")
	if *update {
		os.WriteFile(golden, []byte(got), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s:\n%s", golden, got)
	}
}
