package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
)

// wireRequest is a request as its bytes came: the request target as
// written, each header line in order, the body.
type wireRequest struct {
	Method, Target string
	Lines          [][2]string
	Body           []byte
}

// byName is the request's header values by lower-case name, Host left out.
func (r wireRequest) byName() map[string][]string {
	m := map[string][]string{}
	for _, l := range r.Lines {
		if k := strings.ToLower(l[0]); k != "host" {
			m[k] = append(m[k], l[1])
		}
	}
	return m
}

// wireReceiver is a receiver on 127.0.0.1:0 that reads requests by hand,
// several a connection (devhook's forward keeps connections), and
// answers each 200 "ok".
type wireReceiver struct {
	URL  string
	reqs chan wireRequest
	errs chan error
}

func startWireReceiver(t *testing.T) *wireReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wireReceiver{URL: "http://" + ln.Addr().String(), reqs: make(chan wireRequest, 100), errs: make(chan error, 100)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					r, err := readWire(br, c)
					if err == io.EOF {
						return
					}
					if err != nil {
						w.errs <- err
						return
					}
					w.reqs <- r
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return w
}

func (w *wireReceiver) next(t *testing.T) wireRequest {
	t.Helper()
	select {
	case r := <-w.reqs:
		return r
	case err := <-w.errs:
		t.Fatalf("the receiver could not read a request: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no request reached the receiver within 30s")
	}
	return wireRequest{}
}

func readWire(br *bufio.Reader, w io.Writer) (wireRequest, error) {
	var r wireRequest
	line, err := br.ReadString('\n')
	if err != nil {
		if line == "" {
			return r, io.EOF
		}
		return r, err
	}
	parts := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
	if len(parts) != 3 || parts[2] != "HTTP/1.1" {
		return r, fmt.Errorf("request line %q", line)
	}
	r.Method, r.Target = parts[0], parts[1]
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return r, err
		}
		if line = strings.TrimSuffix(line, "\r\n"); line == "" {
			break
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.Trim(value, " \t")
		r.Lines = append(r.Lines, [2]string{name, value})
		switch strings.ToLower(name) {
		case "content-length":
			n, _ = strconv.Atoi(value)
		case "transfer-encoding":
			return r, fmt.Errorf("a chunked body")
		case "expect":
			io.WriteString(w, "HTTP/1.1 100 Continue\r\n\r\n")
		}
	}
	r.Body = make([]byte, n)
	_, err = io.ReadFull(br, r.Body)
	return r, err
}

// sendRaw writes a request to url's host by hand, with header lines in
// the order given (Host and Content-Length added), signed with secret, and
// returns the status.
func sendRaw(t *testing.T, method, target string, lines [][2]string, body []byte, secret string) int {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, u.RequestURI(), u.Host)
	for _, l := range lines {
		fmt.Fprintf(&b, "%s: %s\r\n", l[0], l[1])
	}
	fmt.Fprintf(&b, "%s: %s\r\nContent-Length: %d\r\n\r\n", devhook.SignatureHeader, signature.Sign(secret, time.Now(), body), len(body))
	b.Write(body)
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// Issue 38, export: a real devhook listen records deliveries hard to
// reproduce (repeated headers, values a shell would expand, bytes that are
// not UTF-8, a binary body with NULs, a query); devhook deliveries export
// writes them as a curl script, which the real curl runs: the receiver gets
// each request as devhook's forward sent it, header for header and byte for
// byte. The HAR decodes to what deliveries show says, the scenario is
// scenario save's bytes; the same bytes through the running listen's
// inspector and from the data directory once it is gone; --resign signs
// afresh when the script runs.
func TestExport_CurlHARScenario(t *testing.T) {
	devhookBinary(t)
	needCurl(t)
	const secret = "whsec_export_e2e"
	recv := startWireReceiver(t)
	data := t.TempDir()
	l := startProc(t, "listen", "--json", "--forward", recv.URL+"/recv", "--secret", secret,
		"--inspect", closedAddr(t), "--relay-addr", "127.0.0.1:0", "--data", data)
	public := l.nextJSON(t, "ready")["public_url"].(string)

	sends := []struct {
		method, path string
		lines        [][2]string
		body         []byte
	}{
		{"POST", "/hooks/service?src=service&x=%20y&x=2", [][2]string{
			{"Content-Type", "application/json"}, {"User-Agent", "service-webhooks/1"},
			{"X-Repeat", "one"}, {"Accept", "text/plain"}, {"X-Repeat", "two"}, {"Accept", "application/json"}, {"X-Repeat", "three"},
			{"X-Hostile", `it's "quoted" $HOME $(touch pwned) ` + "`touch pwned2`" + ` \ ; | *`},
			{"X-Bytes", "\xff\xfe caf\xc3\xa9"}, {"X-Empty", ""}},
			[]byte(`{"event_type":"run.status","data":{"run_id":"run-export","status_v2":"running","note":"it's $HOME"}}`)},
		{"POST", "/bin", [][2]string{{"Content-Type", "application/octet-stream"}},
			[]byte("\x00\x01%s\\n'\"\xff\xfe\x80\x00 end")},
		{"PUT", "/text/[a]/caf\xe9?q={1}&r=caf\xe9", [][2]string{{"Content-Type", "text/plain"}},
			[]byte("line 1\nline 'two'\r\n\ttabbed\n")},
	}
	var forwarded []wireRequest
	var ids []string
	for _, s := range sends {
		if st := sendRaw(t, s.method, public+s.path, s.lines, s.body, secret); st != 200 {
			t.Fatalf("%s %s: sender got %d", s.method, s.path, st)
		}
		forwarded = append(forwarded, recv.next(t))
		ids = append(ids, l.nextJSON(t, "delivery")["id"].(string))
	}
	var recorded []*devhook.Delivery
	for _, id := range ids {
		out, stderr, err := runDevhook(t, "deliveries", "show", id, "--json", "--data", data)
		if err != nil {
			t.Fatalf("deliveries show: %v %s", err, stderr)
		}
		var d devhook.Delivery
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, &d)
	}

	// The script, through the running listen (its store is locked: only
	// its inspector can answer), run by curl.
	dir := t.TempDir()
	script := filepath.Join(dir, "repro.sh")
	out, stderr, err := runDevhook(t, "deliveries", "export", "--last", "3", "--out", script, "--data", data)
	if err != nil || !strings.Contains(out, "wrote 3 deliveries as curl commands to "+script+", and 1 body file beside it; run it: sh "+script) {
		t.Fatalf("export: %v %s\n%s", err, stderr, out)
	}
	// One delivery is said as one.
	one := filepath.Join(dir, "one.json")
	if out, stderr, err := runDevhook(t, "deliveries", "export", "--last", "1", "--format", "scenario", "--out", one, "--data", data); err != nil || !strings.Contains(out, " 1 delivery as a scenario") {
		t.Fatalf("export of one delivery: %v %s\n%s", err, stderr, out)
	}
	runShell(t, dir, script)
	for i := range sends {
		got := recv.next(t)
		if got.Method != forwarded[i].Method || got.Target != forwarded[i].Target || !bytes.Equal(got.Body, forwarded[i].Body) {
			t.Errorf("delivery %d: curl sent %s %s %q, the forward sent %s %s %q", i+1,
				got.Method, got.Target, got.Body, forwarded[i].Method, forwarded[i].Target, forwarded[i].Body)
		}
		if g, w := got.byName(), forwarded[i].byName(); !equalValues(g, w) {
			t.Errorf("delivery %d: curl sent headers\n%q\nthe forward sent\n%q", i+1, g, w)
		}
		// deliveries show --json holds what JSON holds: UTF-8, a byte
		// that is not as U+FFFD.
		for k, vs := range recorded[i].Header {
			if sent := asJSONHolds(got.byName()[strings.ToLower(k)]); k != "Content-Length" && !slices.Equal(sent, vs) {
				t.Errorf("delivery %d: header %s sent %q, recorded %q", i+1, k, sent, vs)
			}
		}
	}
	for _, f := range []string{"pwned", "pwned2"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("the script ran what a header held: %s exists", f)
		}
	}

	// HAR: an entry for each attempt, as deliveries show has it.
	har, stderr, err := runDevhook(t, "deliveries", "export", "--last", "3", "--format", "har", "--data", data)
	if err != nil {
		t.Fatalf("export --format har: %v %s", err, stderr)
	}
	checkHARAgainst(t, []byte(har), recorded)

	// scenario: scenario save's bytes.
	scen, stderr, err := runDevhook(t, "deliveries", "export", ids[2], ids[0], ids[1], "--format", "scenario", "--data", data)
	if err != nil {
		t.Fatalf("export --format scenario: %v %s", err, stderr)
	}
	if saved, _, err := runDevhook(t, "scenario", "save", "-", "--last", "3", "--data", data); err != nil || saved != scen {
		t.Errorf("scenario save: %v; export's scenario differs:\n%s\nsave's:\n%s", err, scen, saved)
	}
	stdoutScript, _, err := runDevhook(t, "deliveries", "export", "--last", "3", "--data", data)
	if err != nil {
		t.Fatal(err)
	}

	// --resign, to another receiver: the reference receiver verifies
	// each signature made when the script runs.
	var mu sync.Mutex
	var verdicts []string
	ref := httptest.NewServer(receiver.New(receiver.Config{Secret: secret, OnRequest: func(_ *http.Request, _ []byte, v devhook.Verdict) {
		mu.Lock()
		verdicts = append(verdicts, v.Result)
		mu.Unlock()
	}}))
	defer ref.Close()
	resign := filepath.Join(dir, "resign.sh")
	if _, stderr, err := runDevhook(t, "deliveries", "export", "--last", "3", "--resign", "--to", ref.URL, "--out", resign, "--data", data); err != nil {
		t.Fatalf("export --resign: %v %s", err, stderr)
	}
	if b, _ := os.ReadFile(resign); bytes.Contains(b, []byte(secret)) {
		t.Error("the script holds the secret")
	}
	if _, err := exec.LookPath("openssl"); err == nil || os.Getenv("CI") != "" {
		runShell(t, dir, resign, "DEVHOOK_SECRET="+secret)
		mu.Lock()
		if !slices.Equal(verdicts, []string{"ok", "ok", "ok"}) {
			t.Errorf("the reference receiver's verdicts: %v", verdicts)
		}
		mu.Unlock()
	}

	// Once listen is gone, from the data directory: the same bytes.
	l.stop(t, 30*time.Second)
	for _, c := range []struct {
		want string
		args []string
	}{
		{stdoutScript, []string{"--last", "3"}},
		{har, []string{"--last", "3", "--format", "har"}},
		{scen, []string{"--last", "3", "--format", "scenario"}},
	} {
		out, stderr, err := runDevhook(t, append([]string{"deliveries", "export", "--data", data}, c.args...)...)
		if err != nil || out != c.want {
			t.Errorf("export %s from the data directory: %v %s; differs from the running listen's:\n%s\nwant:\n%s", strings.Join(c.args, " "), err, stderr, out, c.want)
		}
	}

	// What cannot be exported says what to do.
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "name the deliveries: their ids, --last N or --run RUN_ID"},
		{[]string{ids[0], "--last", "1"}, "one of the three"},
		{[]string{"--last", "1", "--format", "xml"}, `--format "xml": give curl, har or scenario`},
		{[]string{"--last", "1", "--format", "har", "--resign"}, "--resign is for --format curl"},
		{[]string{"--last", "1", "--format", "scenario", "--to", "localhost:1"}, "--to is for --format curl and har"},
		{[]string{"0190ffff-0000-7000-8000-000000000000"}, `no delivery with id or prefix "0190ffff-0000-7000-8000-000000000000"`},
	} {
		_, stderr, err := runDevhook(t, append([]string{"deliveries", "export", "--data", data}, c.args...)...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("export %s: %v, stderr %q, want %q", strings.Join(c.args, " "), err, stderr, c.want)
		}
	}
}

// asJSONHolds is vs as a JSON string holds them.
func asJSONHolds(vs []string) []string {
	b, _ := json.Marshal(vs)
	var out []string
	json.Unmarshal(b, &out)
	return out
}

func equalValues(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// checkHARAgainst decodes a HAR and compares each entry with the attempt
// it names among ds: the request's method, URL, headers and body, the
// answer's status and body.
func checkHARAgainst(t *testing.T, har []byte, ds []*devhook.Delivery) {
	t.Helper()
	var h struct {
		Log struct {
			Version string
			Entries []struct {
				Request struct {
					Method, URL string
					Headers     []struct{ Name, Value string }
					PostData    struct{ Text, Encoding string }
				}
				Response struct {
					Status  int
					Content struct{ Text, Encoding string }
				}
				Devhook struct {
					Delivery string
					Attempt  int
				} `json:"_devhook"`
			}
		}
	}
	if err := json.Unmarshal(har, &h); err != nil {
		t.Fatalf("the HAR is not JSON: %v", err)
	}
	decode := func(text, enc string) []byte {
		if enc == "base64" {
			b, _ := base64.StdEncoding.DecodeString(text)
			return b
		}
		return []byte(text)
	}
	if h.Log.Version != "1.2" || len(h.Log.Entries) != len(ds) {
		t.Fatalf("HAR version %q with %d entries, want 1.2 with %d", h.Log.Version, len(h.Log.Entries), len(ds))
	}
	for i, e := range h.Log.Entries {
		d := ds[i]
		a := d.Attempts[0]
		header := http.Header{}
		for _, p := range e.Request.Headers {
			header[p.Name] = append(header[p.Name], p.Value)
		}
		if e.Devhook.Delivery != d.ID || e.Devhook.Attempt != 1 || e.Request.Method != d.Method || e.Request.URL != a.Target ||
			!bytes.Equal(decode(e.Request.PostData.Text, e.Request.PostData.Encoding), d.Body) || !equalValues(header, d.Header) {
			t.Errorf("entry %d: %+v\nwant delivery %s %s %s %q %v", i, e, d.ID, d.Method, a.Target, d.Body, d.Header)
		}
		if e.Response.Status != a.Status || !bytes.Equal(decode(e.Response.Content.Text, e.Response.Content.Encoding), a.Body) {
			t.Errorf("entry %d: response %d %q, want %d %q", i, e.Response.Status, e.Response.Content.Text, a.Status, a.Body)
		}
	}
}

// needCurl skips without curl, or fails under CI, where .ci/run installs it.
func needCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("curl is not installed (.ci/run installs it)")
		}
		t.Skip("curl is not installed")
	}
}

// runShell runs a script with sh in dir, with no proxy and env.
func runShell(t *testing.T, dir, script string, env ...string) {
	t.Helper()
	cmd := exec.Command("sh", script)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh %s: %v\n%s", script, err, out)
	}
}
