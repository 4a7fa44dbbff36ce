package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// startEchoReceiver runs testdata/echo_receiver.py, a handler written as
// users write them, with secret; it answers 200 with what reached it
// once the signature verifies, 401 otherwise. It skips without python3
// unless CI is set; the process is killed, by its pid, when the test ends.
func startEchoReceiver(t *testing.T, secret string) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is not installed, and CI is set: .ci/run installs it")
		}
		t.Skip("python3 is not installed (CI unset)")
	}
	cmd := exec.Command(py, filepath.Join("testdata", "echo_receiver.py"))
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	port := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		port <- strings.TrimSpace(line)
		io.Copy(io.Discard, r)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-read
		cmd.Wait()
		if t.Failed() {
			t.Logf("echo_receiver.py's standard error:\n%s", stderr.String())
		}
	})
	select {
	case p := <-port:
		if p == "" {
			t.Fatalf("echo_receiver.py printed no port; stderr: %s", stderr.String())
		}
		return "http://127.0.0.1:" + p
	case <-time.After(30 * time.Second):
		t.Fatal("echo_receiver.py printed no port within 30s")
	}
	return ""
}

// runDevhookIn is runDevhook with stdin and env (NAME=value) added to the
// test's environment, without its VISUAL, EDITOR and DEVHOOK_SECRET.
func runDevhookIn(t *testing.T, stdin string, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(devhookBinary(t), args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "VISUAL=") || strings.HasPrefix(kv, "EDITOR=") || strings.HasPrefix(kv, "DEVHOOK_SECRET=")
	})
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("devhook %s died of %v; stderr: %s", strings.Join(args, " "), ee.Sys().(syscall.WaitStatus).Signal(), e.String())
	}
	if strings.Contains(e.String(), "panic:") {
		t.Fatalf("devhook %s crashed; stderr: %s", strings.Join(args, " "), e.String())
	}
	return o.String(), e.String(), err
}

// echoed is what echo_receiver.py says reached it.
type echoed struct {
	Body    string      `json:"body"`
	Headers [][2]string `json:"headers"`
}

func (e echoed) values(name string) []string {
	var out []string
	for _, kv := range e.Headers {
		if strings.EqualFold(kv[0], name) {
			out = append(out, kv[1])
		}
	}
	return out
}

// replayCase is one devhook replay and what must come of it.
type replayCase struct {
	name    string
	args    []string // after replay ID
	stdin   string
	env     []string
	fail    bool   // exits non-zero
	aborted bool   // nothing is sent: no attempt recorded
	line    string // in the line printed on stdout
	stderr  string // in stderr
	status  int    // the receiver's answer
	made    string
	body    *string             // the body that reached the receiver
	header  map[string][]string // headers that reached it (nil: absent)
}

// devhook replay ID with --body FILE, --body -, --header, --remove-header
// and --edit ($VISUAL, $EDITOR: git's rules; an editor that fails or
// empties the file aborts, an unchanged body is replayed), through a
// running listen and without one, to a user-style handler that checks
// signatures: an edited body is re-signed when the secret is known and
// accepted; --no-resign sends the original signature, which the handler
// refuses, and the hint says the receiver was right. Each attempt is
// recorded as edited with the Content-Length of the body sent.
func TestReplayEdits(t *testing.T) {
	const secret = "whsec_replay_edit"
	recv := startEchoReceiver(t, secret)
	data := filepath.Join(t.TempDir(), "data")
	l := startProc(t, "listen", "--json", "--forward", recv, "--secret", secret, "--data", data,
		"--inspect", "127.0.0.1:0", "--relay-addr", "127.0.0.1:0")
	pub := l.nextJSON(t, "ready")["public_url"].(string)
	if _, stderr, err := runDevhook(t, "send", pub+"/hook", "--secret", secret, "--status", "queued"); err != nil {
		t.Fatalf("send: %v %s", err, stderr)
	}
	id := l.nextJSON(t, "delivery")["id"].(string)
	orig := string(showDelivery(t, data, id).Body)
	if !strings.Contains(orig, `"status_v2":"queued"`) || strings.HasSuffix(orig, "\n") {
		t.Fatalf("the delivery's body is not as this test expects: %s", orig)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "body.json")
	fromFile, fromStdin, empty := `{"edited":"from a file"}`, "{\"edited\":\"from stdin\"}\n", ""
	// The edit an editor makes, with the line end vim and nano add to a
	// file that had none: dropped.
	edited := strings.Replace(orig, `"queued"`, `"failed"`, 1)
	script := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+text+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.WriteFile(file, []byte(fromFile), 0o600); err != nil {
		t.Fatal(err)
	}
	editor := script("edit.sh", `sed -i 's/"queued"/"failed"/' "$1" && printf '\n' >> "$1"`)
	fails := script("fail.sh", "exit 1")
	empties := script("empty.sh", `: > "$1"`)
	origBody := orig

	live := []replayCase{
		{name: "body from a file", args: []string{"--body", file}, line: "(edited, re-signed)", status: 200, made: devhook.MadeEdited, body: &fromFile},
		{name: "body from standard input", args: []string{"--body", "-"}, stdin: fromStdin, line: "(edited, re-signed)", status: 200, made: devhook.MadeEdited, body: &fromStdin},
		{name: "headers set and removed", args: []string{"--header", "X-Trace: 1", "--header", "x-trace: 2", "--header", "Content-Type: text/plain", "--remove-header", "user-agent"},
			line: "(edited, re-signed)", status: 200, made: devhook.MadeEdited, body: &origBody,
			header: map[string][]string{"X-Trace": {"1", "2"}, "Content-Type": {"text/plain"}, "User-Agent": nil}},
		{name: "edit in $VISUAL before $EDITOR", args: []string{"--edit"}, env: []string{"VISUAL=" + editor, "EDITOR=" + fails},
			line: "(edited, re-signed)", stderr: "waiting for your editor", status: 200, made: devhook.MadeEdited, body: &edited},
		{name: "edit left unchanged", args: []string{"--edit"}, env: []string{"EDITOR=true"},
			line: "(re-signed)", stderr: "the body is unchanged: it is replayed as it was", status: 200, made: devhook.MadeResigned, body: &origBody},
		{name: "editor fails", args: []string{"--edit"}, env: []string{"EDITOR=" + fails}, fail: true, aborted: true,
			stderr: "replay aborted: the editor (" + fails + ") exited with status 1; nothing was sent"},
		{name: "editor empties the body", args: []string{"--edit"}, env: []string{"EDITOR=" + empties}, fail: true, aborted: true,
			stderr: "replay aborted: the edited body is empty; nothing was sent"},
		{name: "edited body, --no-resign", args: []string{"--body", file, "--no-resign"}, fail: true,
			line: "(edited, not re-signed)", stderr: `the receiver answered 401 "Unauthorized: Invalid signature"; the body was edited and not re-signed: the receiver was right to refuse it`,
			status: 401, made: devhook.MadeEdited},
		{name: "empty body", args: []string{"--body", os.DevNull}, line: "(edited, re-signed)", status: 200, made: devhook.MadeEdited, body: &empty},
		{name: "Content-Length refused", args: []string{"--header", "Content-Length: 1"}, fail: true, aborted: true, stderr: "--header: Content-Length is computed"},
		{name: "hop-by-hop refused", args: []string{"--remove-header", "transfer-encoding"}, fail: true, aborted: true, stderr: "--remove-header: Transfer-Encoding is a hop-by-hop header"},
		{name: "Host refused", args: []string{"--header", "Host: example.test"}, fail: true, aborted: true, stderr: "--to URL"},
		{name: "signature header set by hand is not re-signed", args: []string{"--header", "Service-Signature: t=1,v1=00"}, fail: true,
			line: "(edited, not re-signed)", stderr: "the service-signature header was edited and not re-signed", status: 401, made: devhook.MadeEdited},
	}
	for _, tc := range live {
		t.Run("live/"+tc.name, func(t *testing.T) {
			checkReplay(t, data, id, tc)
			if !tc.aborted {
				if r := l.nextJSON(t, "replay"); r["id"] != id || r["made"] != tc.made {
					t.Errorf("listen's replay line: %v, want made %q", r, tc.made)
				}
			}
		})
	}

	// A header edit leaves the headers it does not name byte for byte,
	// bytes that are not UTF-8 too, and the body as it came.
	t.Run("live/headers it does not name are sent as they came", func(t *testing.T) {
		wire := startWireReceiver(t)
		body := []byte("{\"a\":\"\xff\x00\xfe\"}")
		if s := sendRaw(t, "POST", pub+"/raw", [][2]string{{"X-Latin", "caf\xe9"}, {"X-Twice", "1"}, {"X-Twice", "2"}}, body, secret); s != 200 {
			t.Fatalf("send: %d", s)
		}
		raw := l.nextJSON(t, "delivery")["id"].(string)
		out, stderr, err := runDevhookIn(t, "", nil, "replay", raw, "--data", data, "--to", wire.URL, "--header", "X-Trace: 1", "--remove-header", "X-Nope")
		if err != nil || !strings.Contains(out, "(edited, re-signed)") || !strings.Contains(stderr, "--remove-header X-Nope: delivery "+raw+" has no such header") {
			t.Fatalf("replay: %v\n%s\n%s", err, out, stderr)
		}
		l.nextJSON(t, "replay")
		got := wire.next(t)
		h := got.byName()
		if !slices.Equal(h["x-latin"], []string{"caf\xe9"}) || !slices.Equal(h["x-twice"], []string{"1", "2"}) || !slices.Equal(h["x-trace"], []string{"1"}) {
			t.Errorf("the receiver got headers %q", h)
		}
		if !bytes.Equal(got.Body, body) {
			t.Errorf("the receiver got body %q, want %q", got.Body, body)
		}
	})

	// Without a running listen: from the data directory, the target the
	// delivery went to last, re-signed with --secret or DEVHOOK_SECRET.
	l.stop(t, 60*time.Second)
	offline := []replayCase{
		{name: "body from a file, --secret", args: []string{"--body", file, "--secret", secret}, line: "(edited, re-signed)", status: 200, made: devhook.MadeEdited, body: &fromFile},
		{name: "edit, DEVHOOK_SECRET", args: []string{"--edit"}, env: []string{"EDITOR=" + editor, "DEVHOOK_SECRET=" + secret},
			line: "(edited, re-signed)", status: 200, made: devhook.MadeEdited, body: &edited},
		{name: "edited body without a secret", args: []string{"--body", file}, fail: true, line: "(edited, not re-signed)",
			stderr: "the edited body goes with its original signature, which does not sign it", status: 401, made: devhook.MadeEdited},
		{name: "editor fails", args: []string{"--edit"}, env: []string{"EDITOR=" + fails}, fail: true, aborted: true, stderr: "replay aborted"},
	}
	for _, tc := range offline {
		t.Run("offline/"+tc.name, func(t *testing.T) { checkReplay(t, data, id, tc) })
	}

	// A running listen that knows no secret: the edited body goes with its
	// original signature, and replay says why.
	l = startProc(t, "listen", "--json", "--forward", recv, "--data", data, "--inspect", "127.0.0.1:0", "--relay-addr", "127.0.0.1:0")
	l.nextJSON(t, "ready")
	checkReplay(t, data, id, replayCase{args: []string{"--body", file}, fail: true, line: "(edited, not re-signed)",
		stderr: "the running devhook listen knows no secret: the edited body went with its original signature", status: 401, made: devhook.MadeEdited})
	l.stop(t, 60*time.Second)
}

// checkReplay runs devhook replay id as tc says and checks its outcome in
// its output, the attempt recorded in data and what the receiver got.
func checkReplay(t *testing.T, data, id string, tc replayCase) {
	t.Helper()
	before := len(showDelivery(t, data, id).Attempts)
	out, stderr, err := runDevhookIn(t, tc.stdin, tc.env, append([]string{"replay", id, "--data", data}, tc.args...)...)
	if (err != nil) != tc.fail || !strings.Contains(out, tc.line) || !strings.Contains(stderr, tc.stderr) {
		t.Fatalf("replay %s: err %v (want failure: %v)\nstdout: %s\nstderr: %s\nwant %q on stdout, %q on stderr",
			strings.Join(tc.args, " "), err, tc.fail, out, stderr, tc.line, tc.stderr)
	}
	d := showDelivery(t, data, id)
	if tc.aborted {
		if len(d.Attempts) != before {
			t.Errorf("an aborted replay recorded %d attempts", len(d.Attempts)-before)
		}
		return
	}
	if len(d.Attempts) != before+1 {
		t.Fatalf("%d attempts recorded, want 1", len(d.Attempts)-before)
	}
	a := d.Attempts[len(d.Attempts)-1]
	if a.Made != tc.made || a.Status != tc.status {
		t.Errorf("recorded attempt made %q, status %d; want %q, %d", a.Made, a.Status, tc.made, tc.status)
	}
	if a.Request == nil {
		t.Fatalf("the attempt records no request as sent")
	}
	if got, want := a.Request.Header.Values("Content-Length"), []string{strconv.Itoa(len(a.Request.Body))}; !slices.Equal(got, want) {
		t.Errorf("recorded Content-Length %q, want %q", got, want)
	}
	if a.Status != 200 {
		return
	}
	var got echoed
	if err := json.Unmarshal(a.Body, &got); err != nil {
		t.Fatalf("the receiver's answer: %v: %s", err, a.Body)
	}
	if tc.body != nil && got.Body != *tc.body {
		t.Errorf("the receiver got body %q, want %q", got.Body, *tc.body)
	}
	if got.Body != string(a.Request.Body) {
		t.Errorf("the receiver got body %q, recorded as sent %q", got.Body, a.Request.Body)
	}
	if cl := got.values("Content-Length"); !slices.Equal(cl, []string{strconv.Itoa(len(got.Body))}) {
		t.Errorf("the receiver got Content-Length %q for %d bytes", cl, len(got.Body))
	}
	for k, want := range tc.header {
		if v := got.values(k); !slices.Equal(v, want) {
			t.Errorf("the receiver got %s %q, want %q", k, v, want)
		}
	}
}

// showDelivery is devhook deliveries show ID --json.
func showDelivery(t *testing.T, data, id string) *devhook.Delivery {
	t.Helper()
	out, stderr, err := runDevhook(t, "deliveries", "show", id, "--data", data, "--json")
	if err != nil {
		t.Fatalf("deliveries show: %v %s", err, stderr)
	}
	var d devhook.Delivery
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("deliveries show --json: %v", err)
	}
	return &d
}
