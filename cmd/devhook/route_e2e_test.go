package main

import (
	"bufio"
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
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
)

// pyReceiver is a webhook receiver as users write them with Python's
// http.server: it appends "PATH BODY" to a file a line and answers 200
// {"from":"python"}. It prints its port once it listens.
const pyReceiver = `import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(sys.argv[1], "ab") as f:
            f.write(self.path.encode() + b" " + body + b"\n")
        out = b'{"from":"python"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *args):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
`

// startPyReceiver runs pyReceiver and returns its URL and what it got.
func startPyReceiver(t *testing.T) (string, func() []string) {
	t.Helper()
	return startPyScript(t, pyReceiver)
}

// startPyScript runs the Python receiver src, which prints its port once
// it listens, with a file's name to write to as its argument; it returns
// its URL and that file's lines.
func startPyScript(t *testing.T, src string) (string, func() []string) {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("a receiver in Python needs %s: %v", python, err)
	}
	dir := t.TempDir()
	script, log := filepath.Join(dir, "receiver.py"), filepath.Join(dir, "got.txt")
	if err := os.WriteFile(script, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script, log)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			port <- strings.TrimSpace(sc.Text())
		}
		io.Copy(io.Discard, out)
	}()
	var p string
	select {
	case p = <-port:
	case <-time.After(60 * time.Second):
		t.Fatal("the Python receiver did not say its port")
	}
	return "http://127.0.0.1:" + p, func() []string {
		b, _ := os.ReadFile(log)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

// pathsReceiver records the paths it is sent, and answers 200 with its
// name.
type pathsReceiver struct {
	name string
	mu   sync.Mutex
	got  []string
}

func (p *pathsReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.got = append(p.got, r.URL.RequestURI())
	p.mu.Unlock()
	io.WriteString(w, p.name)
}

func (p *pathsReceiver) paths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

// Issue 38, routes: one listen (a real process) takes deliveries to
// several receivers, two Go servers and one in Python, by path, JSON field
// and header, from --route and a --routes file; a drop is answered 202 and
// recorded; --json lines name each delivery's route; replay goes to the
// route's target; a route to a receiver that is down answers 502 live and
// owes a queued delivery to that receiver, delivered once it listens.
func TestListen_Routes(t *testing.T) {
	devhookBinary(t)
	dir := t.TempDir()
	a, b := &pathsReceiver{name: "A"}, &pathsReceiver{name: "B"}
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	defer sa.Close()
	defer sb.Close()
	pyURL, pyGot := startPyReceiver(t)
	down := freeAddr(t)

	routes := filepath.Join(dir, "routes.yaml")
	file := fmt.Sprintf("routes:\n  - match: json:data.status_v2=succeeded\n    to: %s\n  - path:/down/** -> http://%s\n", pyURL, down)
	if err := os.WriteFile(routes, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	_, relayURL := startRelay(t, filepath.Join(dir, "relay"))
	data := filepath.Join(dir, "data")
	args := []string{"listen", "--json", "--relay", relayURL, "--forward", sa.URL, "--secret", e2eSecret, "--inspect", "127.0.0.1:0", "--data", data,
		"--retry-for", "1h", "--route", "path:/gh/** -> " + sb.URL + "/in", "--route", "header:x-drop=yes -> drop", "--routes", routes}
	l := startProc(t, args...)
	ready := l.nextJSON(t, "ready")
	public, insp := ready["public_url"].(string), ready["inspector_url"].(string)
	wantRoutes := []string{"path:/gh/** -> " + sb.URL + "/in", "header:x-drop=yes -> drop", "json:data.status_v2=succeeded -> " + pyURL, "path:/down/** -> http://" + down}
	rs, _ := ready["routes"].([]any)
	if len(rs) != len(wantRoutes) {
		t.Fatalf("ready line's routes: %v", ready["routes"])
	}
	for i, r := range rs {
		if m := r.(map[string]any); m["index"] != float64(i+1) || m["text"] != wantRoutes[i] {
			t.Errorf("ready route %d: %v, want %q", i+1, m, wantRoutes[i])
		}
	}
	ev := l.collect()

	// devhook send: a run.status succeeded, route 3, to the Python receiver.
	out, stderr, err := runDevhook(t, "send", "--secret", e2eSecret, "--data", data, "--status", "succeeded", "--run-id", "run-py")
	if err != nil || !strings.Contains(out, "200") || !strings.Contains(out, "python") {
		t.Fatalf("send: %v\n%s\n%s", err, out, stderr)
	}
	type want struct {
		path, header string
		status       int
		route        int
	}
	sent := []want{
		{"/gh/push?x=1", "", 200, 1},
		{"/other", "", 200, 0},
		{"/other", "X-Drop: yes", 202, 2},
		{"/gh/x", "X-Drop: yes", 200, 1}, // route 1 comes first
		{"/down/live", "", 502, 4},
	}
	ids := map[string]string{}
	for _, s := range sent {
		h := http.Header{"Content-Type": {"application/json"}}
		if k, v, ok := strings.Cut(s.header, ": "); ok {
			h.Set(k, v)
		}
		st, body := sendTo(t, public+s.path, h, `{"n":1}`)
		if st != s.status {
			t.Fatalf("POST %s %s: %d %s, want %d", s.path, s.header, st, body, s.status)
		}
		if s.route == 2 && (!strings.Contains(body, `"dropped":true`) || !strings.Contains(body, "devhook dropped this delivery by route 2 (header:x-drop=yes -> drop)")) {
			t.Errorf("the drop's answer: %s", body)
		}
	}
	waitUntil(t, "a --json line for each delivery", func() bool { return len(ev.of("delivery")) >= len(sent)+1 })
	for i, m := range ev.of("delivery") {
		route, _ := m["route"].(map[string]any)
		if route == nil {
			t.Errorf("delivery line %d without its route: %v", i, m)
			continue
		}
		var w want
		if i == 0 {
			w = want{path: "/", status: 200, route: 3}
		} else {
			w = sent[i-1]
		}
		if route["index"] != float64(w.route) || m["status"] != float64(w.status) {
			t.Errorf("delivery line %d (%s): route %v status %v, want route %d status %d", i, m["path"], route, m["status"], w.route, w.status)
		}
		wantText := devhook.RouteDefault
		if w.route > 0 {
			wantText = wantRoutes[w.route-1]
		}
		if route["text"] != wantText {
			t.Errorf("delivery line %d: route text %v, want %q", i, route["text"], wantText)
		}
		if w.route == 2 && (m["dropped"] != true || m["receiver_status"] != nil) {
			t.Errorf("the drop's line: %v", m)
		}
		ids[fmt.Sprint(i)] = m["id"].(string)
	}
	if got := b.paths(); len(got) != 2 || got[0] != "/in/gh/push?x=1" || got[1] != "/in/gh/x" {
		t.Errorf("receiver B got %v", got)
	}
	if got := a.paths(); len(got) != 1 || got[0] != "/other" {
		t.Errorf("receiver A (--forward) got %v", got)
	}
	if got := pyGot(); len(got) != 1 || !strings.HasPrefix(got[0], "/ ") || !strings.Contains(got[0], "run-py") {
		t.Errorf("the Python receiver got %q", got)
	}

	// The inspector says which route took each, and where a replay goes.
	var v inspector.DeliveryView
	getJSON(t, insp+"/api/deliveries/"+ids["1"], &v)
	if v.Route == nil || v.Route.Index != 1 || v.View.ReplayRoute == nil || v.View.ReplayRoute.Index != 1 || v.View.Target != sb.URL+"/in/gh/push?x=1" {
		t.Errorf("inspector detail of route 1's delivery: route %+v, replay %q by %+v", v.Route, v.View.Target, v.View.ReplayRoute)
	}
	v = inspector.DeliveryView{}
	getJSON(t, insp+"/api/deliveries/"+ids["3"], &v)
	if v.Route == nil || !v.Route.Drop() || v.View.Target != "" || len(v.Attempts) != 1 || v.Attempts[0].Kind != devhook.AttemptDrop {
		t.Errorf("inspector detail of a dropped delivery: %+v %+v", v.Route, v.Attempts)
	}

	// Replay: to the route's target; a dropped one needs --to.
	if out, stderr, err := runDevhook(t, "replay", ids["1"], "--data", data); err != nil || !strings.Contains(out, sb.URL+"/in/gh/push?x=1") {
		t.Fatalf("replay of route 1's delivery: %v\n%s\n%s", err, out, stderr)
	}
	waitUntil(t, "receiver B to get the replay", func() bool { return len(b.paths()) == 3 })
	_, stderr, err = runDevhook(t, "replay", ids["3"], "--data", data)
	if err == nil || !strings.Contains(stderr, "route 2") || !strings.Contains(stderr, "--to") {
		t.Fatalf("replay of a dropped delivery: %v\n%s", err, stderr)
	}
	if out, stderr, err := runDevhook(t, "replay", ids["3"], "--data", data, "--to", sa.URL); err != nil || !strings.Contains(out, "200") {
		t.Fatalf("replay --to of a dropped delivery: %v\n%s\n%s", err, out, stderr)
	}
	waitUntil(t, "receiver A to get the replay", func() bool { return len(a.paths()) == 2 })
	for _, m := range ev.of("replay") {
		if m["id"] == ids["1"] {
			if r, _ := m["route"].(map[string]any); r == nil || r["index"] != float64(1) {
				t.Errorf("replay line without route 1: %v", m)
			}
		}
	}

	// Queued while listen is away, to the receiver that is down: owed to
	// it, and delivered there once it listens.
	l.stop(t, 20*time.Second)
	if st, body := sendTo(t, public+"/down/queued", http.Header{"Content-Type": {"application/json"}}, `{"q":1}`); st != http.StatusAccepted {
		t.Fatalf("queued: %d %s", st, body)
	}
	l = startProc(t, args...)
	insp = l.nextJSON(t, "ready")["inspector_url"].(string)
	owed := l.nextJSON(t, "delivery")
	if owed["owed"] != true || owed["route"].(map[string]any)["index"] != float64(4) {
		t.Fatalf("the queued delivery to a receiver that is down: %v", owed)
	}
	v = inspector.DeliveryView{}
	getJSON(t, insp+"/api/deliveries/"+owed["id"].(string), &v)
	if v.Retry == nil || v.Retry.Route == nil || v.Retry.Route.Index != 4 {
		t.Fatalf("the owed delivery's retry state: %+v", v.Retry)
	}
	c := &pathsReceiver{name: "C"}
	ln, err := net.Listen("tcp", down)
	if err != nil {
		t.Fatal(err)
	}
	sc := httptest.NewUnstartedServer(c)
	sc.Listener.Close()
	sc.Listener = ln
	sc.Start()
	defer sc.Close()
	retry := l.nextJSON(t, "retry")
	if retry["id"] != owed["id"] || retry["status"] != float64(200) {
		t.Fatalf("retry line: %v", retry)
	}
	if got := c.paths(); len(got) != 1 || got[0] != "/down/queued" {
		t.Errorf("route 4's receiver got %v, want the queued delivery", got)
	}
	if n := len(a.paths()); n != 2 {
		t.Errorf("receiver A got %d requests, want 2: the owed delivery went to --forward", n)
	}
}

// Errors of --route and --routes name the flag, the route or the file and
// line, and what is wrong.
func TestListen_RouteFlagErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.routes")
	os.WriteFile(bad, []byte("# mine\npath:/a -> :9001\njson:a.b -> :9002\n"), 0o600)
	badYAML := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badYAML, []byte("routes:\n  - match: path:/a\n    to: :1\n  - match: query:x=1\n    to: :2\n"), 0o600)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--route", "path:/a/** -> "}, []string{`--route "path:/a/** -> "`, "no target"}},
		{[]string{"--route", "cookie:a=b -> :1"}, []string{"--route", `unknown matcher kind "cookie"`}},
		{[]string{"--route", "path:/a** -> :1"}, []string{"--route", "whole segment"}},
		{[]string{"--route", "path:/a -> :1", "--route", "path:/b"}, []string{`--route "path:/b"`, `no "->"`}},
		{[]string{"--routes", bad}, []string{"--routes " + bad + ":3: ", "=VALUE"}},
		{[]string{"--routes", badYAML}, []string{"--routes " + badYAML + ":4: ", `unknown matcher kind "query"`}},
		{[]string{"--routes", filepath.Join(dir, "missing.yaml")}, []string{"--routes: ", "missing.yaml", "no such file"}},
	} {
		_, _, err := devhookCmd(t, append([]string{"listen", "--forward", "localhost:1", "--data", filepath.Join(dir, "data"), "--inspect", "off",
			"--relay-addr", "127.0.0.1:0"}, c.args...)...)
		if err == nil {
			t.Errorf("listen %q: no error", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("listen %q: %q, want it to say %q", c.args, err, w)
			}
		}
	}
}
