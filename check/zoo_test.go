package check_test

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
	"testing"
	"time"

	"github.com/devhook/devhook/check"
)

// A zoo entry is a handler with exactly one known mistake (or none): in
// Go, in this process; in Python or JavaScript, as users write them, a
// process of their own (testdata/zoo).
type zooEntry struct {
	name   string
	secret string // the handler's and the suite's; default secret
	want   string // the root cause's rule id; "" for a correct handler
	say    string // words the root cause's text says
	h      http.Handler
	script string // under testdata/zoo
}

// prefixed is a secret as some services write them: a prefix, then base64
// that also decodes whole as URL-safe base64.
const prefixed = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// vectorSecret is the secret of the spec's signature vectors: base64 only
// to a lenient decoder, which takes it prefix and all.
const vectorSecret = "whsec_test_4f9a1c"

func zoo() []zooEntry {
	all := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	presence := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("service-signature") == "" {
			http.Error(w, "Unauthorized: Missing Signature", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("ok"))
	})
	return []zooEntry{
		{name: "go/correct", h: handler{secret: secret}},
		{name: "go/accepts everything", want: "no-verification", h: all},
		{name: "go/looks only whether the header is there", want: "no-verification", say: "looks only whether the header is there", h: presence},
		{name: "go/t in seconds", want: "t-seconds", say: "clock in seconds", h: handler{secret: secret, seconds: true}},
		{name: "go/secret hex-decoded", want: "decoded-secret", say: "hex-decoded", h: handler{secret: secret, hexKey: true}},
		{name: "go/secret base64-decoded", want: "decoded-secret", say: "base64-decoded", h: handler{secret: secret, base64Key: true}},
		{name: "go/secret after whsec_ base64-decoded", secret: prefixed, want: "decoded-secret", say: "base64-decoded after its prefix", h: handler{secret: prefixed, base64Key: true, stripPrefix: true}},
		{name: "go/json.Marshal of a map", want: "parsed-json", say: "Go's json.Marshal of a map", h: handler{secret: secret, reencodeMap: true}},
		{name: "go/json.Marshal of a struct, 400 on unknown fields", want: "parsed-json", say: "large: 400", h: handler{secret: secret, reserialize: true, strictStruct: true}},
		{name: "go/no time window", want: "no-window", say: "no replay protection", h: handler{secret: secret, noWindow: true}},
		{name: "go/missing header accepted", want: "missing-accepted", say: "only when the header is there", h: handler{secret: secret, acceptMissing: true}},
		{name: "go/prefix compare", want: "prefix-compare", say: "v1-empty, v1-short", h: handler{secret: secret, prefixCompare: true}},
		{name: "go/another secret", want: "wrong-secret", say: "another secret", h: handler{secret: "whsec_another_one"}},
		{name: "go/crash on a missing header", want: "crash", say: "missing: the connection was closed without an answer", h: handler{secret: secret, crashOnMissing: true}},

		{name: "python/correct", script: "correct.py"},
		{name: "python/accepts everything", want: "no-verification", script: "accepts_everything.py"},
		{name: "python/t in seconds", want: "t-seconds", say: "clock in seconds", script: "t_seconds.py"},
		{name: "python/secret base64-decoded", want: "decoded-secret", say: "base64-decoded", script: "secret_base64.py"},
		{name: "python/json.dumps", want: "parsed-json", say: "Python's json.dumps", script: "json_dumps.py"},
		{name: "python/json.dumps, crashes on a body it cannot parse", want: "parsed-json", say: "non-utf8: the connection was closed without an answer", script: "json_dumps_crash.py"},
		{name: "python/prefix compare", want: "prefix-compare", say: "v1-empty, v1-short", script: "prefix_compare.py"},
		{name: "python/crash on a missing header", want: "crash", say: "missing: the connection was closed without an answer", script: "crash_missing_header.py"},

		{name: "javascript/correct", script: "correct.js"},
		{name: "javascript/JSON.stringify", want: "parsed-json", say: "JavaScript's JSON.stringify", script: "json_stringify.js"},
		{name: "javascript/missing header accepted", want: "missing-accepted", say: "missing, empty", script: "missing_accepted.js"},
		{name: "javascript/no time window", want: "no-window", say: "no replay protection", script: "no_window.js"},
		{name: "javascript/secret hex-decoded", want: "decoded-secret", say: "hex-decoded", script: "secret_hex.js"},
		{name: "javascript/secret base64-decoded, prefix and all", secret: vectorSecret, want: "decoded-secret", say: "base64-decoded", script: "secret_base64.js"},
		{name: "javascript/crash on a missing header, the process ends", want: "crash", say: "the failure ended its process", script: "crash_missing_header.js"},
	}
}

// Each handler of the zoo gets its one mistake as the first root cause,
// and no other; the correct ones pass.
func TestZoo(t *testing.T) {
	for _, z := range zoo() {
		t.Run(z.name, func(t *testing.T) {
			var rep *check.Report
			if z.h != nil {
				rep = run(t, z.h, check.Config{Secret: z.secret})
			} else {
				// The handler's own clock: the suite's is the real one too.
				rep = runURL(t, check.Config{URL: startScript(t, z.script, z.secret) + "/webhooks", Secret: z.secret, Timeout: 10 * time.Second})
			}
			text := dump(rep)
			var mistakes []check.Finding
			for _, f := range rep.Findings {
				if f.Kind == check.KindMistake {
					mistakes = append(mistakes, f)
				}
			}
			if z.want == "" {
				if !rep.Conformed || len(mistakes) > 0 {
					t.Fatalf("a correct handler does not pass:\n%s", text)
				}
				return
			}
			if rep.Conformed {
				t.Fatalf("passes:\n%s", text)
			}
			if len(mistakes) == 0 || mistakes[0].ID != z.want {
				t.Fatalf("the first root cause is not %s:\n%s", z.want, text)
			}
			for _, m := range mistakes[1:] {
				t.Errorf("another root cause claimed, %s: %s", m.ID, m.Text)
			}
			if !strings.Contains(mistakes[0].Text, z.say) {
				t.Errorf("%s does not say %q: %s", z.want, z.say, mistakes[0].Text)
			}
			if t.Failed() || os.Getenv("ZOO_DUMP") != "" {
				t.Log("\n" + text)
			}
		})
	}
}

// interpreter returns the program that runs a zoo script. Without it the
// test skips, unless CI is set: there it fails.
func interpreter(t *testing.T, script string) string {
	t.Helper()
	var bin string
	switch filepath.Ext(script) {
	case ".py":
		bin = "/usr/bin/python3"
		if _, err := os.Stat(bin); err != nil {
			bin = ""
		}
	case ".js":
		bin, _ = exec.LookPath("node")
	default:
		t.Fatalf("no interpreter for %s", script)
	}
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("no interpreter for %s, and CI is set: .ci/run installs python3 and nodejs", script)
		}
		t.Skipf("no interpreter for %s (CI unset)", script)
	}
	return bin
}

// startScript runs a zoo handler as a process, with key (default: the
// test's secret) in WEBHOOK_SECRET; the handler listens on a free loopback port and prints
// it. The process is killed, by its pid, when the test ends.
func startScript(t *testing.T, script, key string) string {
	t.Helper()
	cmd := exec.Command(interpreter(t, script), filepath.Join("testdata", "zoo", script))
	if key == "" {
		key = secret
	}
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	port := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		port <- strings.TrimSpace(line)
		io.Copy(io.Discard, r) // what it prints next; ends when it does
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-read // its standard output closed: then Wait may close the pipe
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s's standard error:\n%s", script, stderr.String())
		}
	})
	select {
	case p := <-port:
		if p == "" {
			t.Fatalf("%s printed no port", script)
		}
		return "http://127.0.0.1:" + p
	case <-time.After(30 * time.Second):
		t.Fatalf("%s printed no port within 30s", script)
	}
	return ""
}

// The layout cases' bodies are exactly what each encoder writes when it
// parses the body and encodes it again: the real python3 and node, and
// Go's encoding/json.
func TestLayoutCasesAreTheEncoders(t *testing.T) {
	bodies := map[int][]byte{}
	n := 0
	rec := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		b.ReadFrom(r.Body)
		bodies[n] = b.Bytes()
		n++
	})
	rep := run(t, rec, check.Config{})
	got := map[string][]byte{}
	i := 0
	for _, r := range rep.Results {
		if r.Outcome != check.Skipped {
			got[r.Case] = bodies[i]
			i++
		}
	}
	src := got["layout-js"]
	if !bytes.Contains(src, []byte(check.TextError)) {
		t.Fatalf("layout-js does not carry the text as is: %s", src)
	}
	var m map[string]any
	if err := json.Unmarshal(src, &m); err != nil {
		t.Fatal(err)
	}
	goMap, _ := json.Marshal(m)
	encoders := []struct {
		c    string
		argv []string
	}{
		{"layout-python", []string{"/usr/bin/python3", "-c", "import json, sys; sys.stdout.write(json.dumps(json.loads(sys.stdin.buffer.read())))"}},
		{"layout-python-utf8", []string{"/usr/bin/python3", "-c", "import json, sys; sys.stdout.buffer.write(json.dumps(json.loads(sys.stdin.buffer.read()), ensure_ascii=False).encode())"}},
		{"layout-js", []string{"node", "-e", "let b = []; process.stdin.on('data', (c) => b.push(c)); process.stdin.on('end', () => process.stdout.write(JSON.stringify(JSON.parse(Buffer.concat(b).toString()))))"}},
	}
	for _, e := range encoders {
		t.Run(e.c, func(t *testing.T) {
			cmd := exec.Command(interpreter(t, map[string]string{"layout-python": "x.py", "layout-python-utf8": "x.py", "layout-js": "x.js"}[e.c]), e.argv[1:]...)
			// The bodies in the run's key order: an encoder keeps it.
			for _, in := range [][]byte{got["layout-python"], got["layout-js"]} {
				cmd := exec.Command(cmd.Path, e.argv[1:]...)
				cmd.Stdin = bytes.NewReader(in)
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("%s: %v", e.argv[0], err)
				}
				if !bytes.Equal(out, got[e.c]) {
					t.Errorf("the encoder writes\n%s\nthe case sends\n%s", out, got[e.c])
				}
			}
		})
	}
	if !bytes.Equal(goMap, got["layout-go-map"]) {
		t.Errorf("json.Marshal of a map writes\n%s\nlayout-go-map sends\n%s", goMap, got["layout-go-map"])
	}
	layouts := []string{"layout-python", "layout-python-utf8", "layout-js", "layout-go-map"}
	for _, a := range layouts {
		for _, b := range append(layouts, "valid", "valid-spaced", "valid-sorted") {
			if a != b && bytes.Equal(got[a], got[b]) {
				t.Errorf("%s and %s send the same body: they cannot tell the encoders apart", a, b)
			}
		}
	}
}
