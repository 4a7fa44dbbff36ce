package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// pyHanging is a receiver as users write them in Python, stopped in its
// handler (as at a debugger's breakpoint) for every path under /slow/ until
// it is sent /release; /count answers how many wait.
const pyHanging = `import http.server, sys, threading
release = threading.Event()
lock = threading.Lock()
waiting = 0
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self, out):
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_GET(self):
        if self.path == "/release":
            release.set()
        with lock:
            self.answer(str(waiting).encode())
    def do_POST(self):
        global waiting
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/slow/"):
            with lock:
                waiting += 1
            release.wait()
        self.answer(b"ok")
    def log_message(self, *args):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
srv.serve_forever()
`

// A route's receiver in Python that stops in its handler holds at most its
// share of listen's 64 workers, 48: the next delivery to it is answered 503
// with Retry-After at once, not sent, and the other receiver's deliveries
// go on, through a real relay and listen. (Before, it held all 64, listen
// read nothing more, and every sender waited for the relay's --timeout.)
func TestListen_HangingRouteHoldsOnlyItsShare(t *testing.T) {
	devhookBinary(t)
	dir := t.TempDir()
	py, _ := startPyScript(t, pyHanging)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fast") }))
	defer fast.Close()
	_, relayURL := startRelay(t, filepath.Join(dir, "relay"))
	l := startProc(t, "listen", "--json", "--relay", relayURL, "--forward", fast.URL, "--secret", e2eSecret,
		"--data", filepath.Join(dir, "data"), "--route", "path:/slow/** -> "+py)
	public := l.nextJSON(t, "ready")["public_url"].(string)

	count := func() string {
		resp, err := http.Get(py + "/count")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	released := false
	release := func() {
		if !released {
			released = true
			http.Get(py + "/release")
		}
	}
	defer release()
	const share = 48
	codes := make(chan int, share)
	for i := range share {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not sendTo: its Fatal belongs to the test's goroutine.
			resp, err := http.Post(fmt.Sprintf("%s/slow/%d", public, i), "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Error(err)
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	pollUntil(t, "the Python receiver holding its share", func() bool { return count() == fmt.Sprint(share) })

	start := time.Now()
	resp, err := http.Post(public+"/slow/over", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), fmt.Sprintf("not sent: %d requests to %s are under way", share, py)) {
		t.Fatalf("over the share: %s %v %q (after %s)", resp.Status, resp.Header, body, time.Since(start))
	}
	for i := range 3 {
		if st, body := sendTo(t, public+"/other", nil, `{}`); st != 200 || body != "fast" {
			t.Fatalf("the other receiver's delivery %d: %d %q", i, st, body)
		}
	}
	if c := count(); c != fmt.Sprint(share) {
		t.Errorf("the Python receiver has %s waiting, want %d: one went over the share", c, share)
	}
	release()
	wg.Wait()
	close(codes)
	for st := range codes {
		if st != 200 {
			t.Errorf("a delivery within the share got %d once released", st)
		}
	}
}
