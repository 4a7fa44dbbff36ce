package agent

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Real receivers that end kept-alive connections their own way, each
// started as a process: every delivery reaches them once, and every
// forward is answered.

// nodeReceiver answers each request with the number of times it has seen
// its X-Id. keepAliveTimeout is Node's idle timeout (5 s by default).
const nodeReceiver = `
const http = require('http');
const seen = new Map();
const s = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    const id = req.headers['x-id'];
    const n = (seen.get(id) || 0) + 1;
    seen.set(id, n);
    if (process.env.MODE === 'close') res.setHeader('Connection', 'close');
    res.end(String(n));
  });
});
s.keepAliveTimeout = Number(process.env.IDLE_MS);
s.listen(0, '127.0.0.1', () => console.log(s.address().port));
`

// pythonReceiver is Python's http.server answering the same way: idle,
// HTTP/1.1 whose handler's timeout closes an idle connection; close,
// HTTP/1.1 answering "Connection: close"; http10, its default HTTP/1.0,
// closing after each answer.
const pythonReceiver = `
import os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
mode = os.environ["MODE"]
seen = {}
class H(BaseHTTPRequestHandler):
    if mode != "http10":
        protocol_version = "HTTP/1.1"
    if mode == "idle":
        timeout = int(os.environ["IDLE_MS"]) / 1000
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        i = self.headers.get("X-Id")
        seen[i] = seen.get(i, 0) + 1
        body = str(seen[i]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if mode == "close":
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
`

// startReceiver runs a receiver and returns its URL, once it listens.
func startReceiver(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("no %s here to run a receiver with: %v", name, err)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	port := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		port <- strings.TrimSpace(line)
	}()
	select {
	case p := <-port:
		if _, err := strconv.Atoi(p); err != nil {
			t.Fatalf("%s did not say its port: %q", name, p)
		}
		return "http://127.0.0.1:" + p + "/hook"
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not say its port within 60 s", name)
	}
	return ""
}

func TestDirectRealReceiversEndingConnections(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		node       bool
	}{
		{"node, keepAliveTimeout 50 ms", "idle", true},
		{"node, Connection: close", "close", true},
		{"python, handler timeout 50 ms", "idle", false},
		{"python, Connection: close", "close", false},
		{"python, HTTP/1.0", "http10", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"MODE=" + tc.mode, "IDLE_MS=50"}
			var url string
			if tc.node {
				url = startReceiver(t, env, "node", "-e", nodeReceiver)
			} else {
				url = startReceiver(t, env, "python3", "-c", pythonReceiver)
			}
			for _, quick := range []bool{true, false} {
				// quick: every reuse within uncheckedIdle, whatever
				// the time (the race with the receiver's close taken
				// on unchecked); else the time as it goes (the close
				// seen by closedByPeer).
				a := testAgent(t, false, nil)
				if quick {
					frozenClock(a)
				}
				for i := 1; i <= 12; i++ {
					if i%3 == 0 {
						// Past the receiver's idle timeout: it has
						// closed the idle connection.
						waitFor(t, "the receiver keeps its idle connection", func() bool { return idleClosedByPeer(a) })
					}
					id := strconv.FormatBool(quick) + "-" + strconv.Itoa(i)
					at := sendTo(context.Background(), a, "POST", url, http.Header{"X-Id": {id}}, []byte(`{"n":1}`))
					if at.Status != 200 || string(at.Body) != "1" {
						t.Errorf("quick %v, forward %d: %d %q, answer %q; want 200, received once", quick, i, at.Status, at.Error, at.Body)
					}
				}
			}
		})
	}
}
