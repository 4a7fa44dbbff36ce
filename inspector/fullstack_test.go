package inspector_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector/inspectortest"
	"github.com/devhook/devhook/signature"
)

// TestFullStackInBrowser builds devhook, runs `devhook listen` with its
// built-in relay, sends signed deliveries to the public URL and watches
// them in the inspector in headless chromium.
func TestFullStackInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs devhook: not in -short")
	}
	b := inspectortest.NewBrowser(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "devhook")
	build := exec.Command("go", "build", "-o", bin, "github.com/devhook/devhook/cmd/devhook")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building devhook: %v\n%s", err, out)
	}
	rcv := newReceiver(t)

	listen := exec.Command(bin, "listen", "--json", "--forward", rcv.URL, "--secret", testSecret,
		"--inspect", "127.0.0.1:0", "--relay-addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"))
	stdout, err := listen.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	listen.Stderr = stderr
	if err := listen.Start(); err != nil {
		t.Fatalf("starting devhook listen: %v", err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		exited <- listen.Wait()
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			listen.Process.Kill()
			<-exited
		}
	})

	var ready struct {
		Event        string `json:"event"`
		PublicURL    string `json:"public_url"`
		InspectorURL string `json:"inspector_url"`
	}
	timeout := time.After(30 * time.Second)
	for ready.Event != "ready" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("devhook listen ended before it was ready: %v\n%s", <-exited, stderr.String())
			}
			json.Unmarshal([]byte(line), &ready)
		case <-timeout:
			t.Fatalf("devhook listen was not ready in 30 s:\n%s", stderr.String())
		}
	}
	t.Logf("devhook listen: public %s, inspector %s", ready.PublicURL, ready.InspectorURL)

	client := &http.Client{Timeout: 10 * time.Second}
	signed := map[string]string{} // delivery id → the signature header it was sent with
	send := func(body []byte) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, strings.TrimSuffix(ready.PublicURL, "/")+"/hooks/service", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		sig := signature.Sign(testSecret, time.Now().Add(-2*time.Second), body) // older than any replay's t
		req.Header.Set(devhook.SignatureHeader, sig)
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("sending to the public URL: %v", err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("the public URL answered %d, want the receiver's 200", res.StatusCode)
		}
		id := res.Header.Get("Devhook-Delivery")
		signed[id] = sig
		return id
	}

	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(ready.InspectorURL+"/"),
		inspectortest.WaitJS(`document.body.dataset.live === "1"`, "the live stream to connect"),
		inspectortest.WaitSelector("#empty"),
	)
	inspectortest.Eval[bool](t, tab, `(window.__sameDocument = "yes", true)`)

	start := time.Now()
	var ids []string
	for _, step := range []string{"queued", "running", "succeeded"} {
		ids = append(ids, send(runStatusBody(t, "run-full", step, start)))
	}
	tab.Run(t, inspectortest.WaitCount("#deliveries tbody tr", 3))
	for _, id := range ids {
		if id == "" {
			t.Fatal("the relay sent no Devhook-Delivery header")
		}
		tab.Run(t, inspectortest.WaitSelector(`#deliveries tr[data-id="`+id+`"] .badge.status[data-status="200"]`))
	}
	if same := inspectortest.Eval[string](t, tab, `window.__sameDocument || "reloaded"`); same != "yes" {
		t.Fatal("the page reloaded")
	}
	tab.Screenshot(t, "fullstack-list")

	before := len(rcv.requests())
	tab.Run(t,
		inspectortest.Click(`#deliveries tr[data-id="`+ids[0]+`"] td.path a`),
		inspectortest.WaitText("#signature", "valid signature"),
		inspectortest.WaitText(`pre[data-body="request"]`, "\n  \"data\": {\n    \"run_id\": \"run-full\""),
		inspectortest.Click("#replay"),
		inspectortest.WaitCount("#attempts .attempt", 2),
		inspectortest.WaitText(`#attempts .attempt[data-seq="2"]`, "replay"),
	)
	// The page's replay is the agent's: re-signed with the secret and a
	// fresh t, over the same bytes.
	got := rcv.requests()
	if len(got) != before+1 {
		t.Fatalf("the receiver saw %d requests after the replay, want %d", len(got), before+1)
	}
	replayed := got[len(got)-1]
	assertFreshSignature(t, replayed.Header.Get(devhook.SignatureHeader), replayed.Body, start)
	if replayed.Header.Get(devhook.SignatureHeader) == signed[ids[0]] || string(replayed.Body) != string(got[0].Body) {
		t.Errorf("the replay sent signature %q over %q; want a new one over the original body", replayed.Header.Get(devhook.SignatureHeader), replayed.Body)
	}
	// As is, through the same API: the original header, byte for byte.
	res, err := client.Post(ready.InspectorURL+"/api/deliveries/"+ids[0]+"/replay", "application/json", strings.NewReader(`{"resign":false}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	got = rcv.requests()
	if res.StatusCode != http.StatusOK || len(got) != before+2 || got[len(got)-1].Header.Get(devhook.SignatureHeader) != signed[ids[0]] {
		t.Errorf("as-is replay: %d, receiver saw %d requests, last signed %q; want the original %q", res.StatusCode, len(got), got[len(got)-1].Header.Get(devhook.SignatureHeader), signed[ids[0]])
	}
	tab.Screenshot(t, "fullstack-detail")

	tab.Run(t,
		chromedp.Navigate(ready.InspectorURL+"/#/runs/run-full"),
		inspectortest.WaitCount("#timeline .step.done", 3),
		inspectortest.WaitText("#run-issues", "All three steps arrived in order"),
	)

	send([]byte(`<script>window.pwned = 1; document.title = "pwned"</script>`))
	tab.Run(t,
		chromedp.Navigate(ready.InspectorURL+"/#/"),
		inspectortest.WaitCount("#deliveries tbody tr", 4),
		inspectortest.Click("#deliveries tbody tr:first-child td.path a"),
		inspectortest.WaitText(`pre[data-body="request"]`, "<script>window.pwned"),
	)
	if p := inspectortest.Eval[string](t, tab, `String(window.pwned) + "|" + document.title`); p != "undefined|devhook inspector" {
		t.Errorf("a <script> body ran: %s", p)
	}
	if ex := tab.Exceptions(); len(ex) != 0 {
		t.Errorf("the page threw: %q", ex)
	}

	// With the page's live stream still open, devhook must stop promptly.
	if err := listen.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
			t.Errorf("devhook listen exited with %v, want exit status 130 (SIGINT)\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Errorf("devhook listen did not stop within 15 s of an interrupt while a page was open")
	}
}

// syncBuffer is a bytes.Buffer that a process writes while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
