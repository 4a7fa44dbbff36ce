package export_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/export"
	"github.com/devhook/devhook/signature"
)

var epoch = time.Date(2026, 11, 22, 10, 4, 5, 0, time.UTC)

const testSecret = "whsec_export_test"

// hostile is a header value a shell would run or expand if it were not
// quoted right.
const hostile = `it's "quoted" $HOME ${PATH} $(touch pwned) ` + "`touch pwned2`" + ` \n \\ ; & | > < * ? ! # ~`

// hard returns deliveries that are hard to reproduce with curl, as a
// listen records them, each forwarded to base (its path and query
// appended) and received a second apart, in an order other than that of
// the slice.
func hard(t *testing.T, base string) []*devhook.Delivery {
	t.Helper()
	json := []byte(`{"event_type":"run.status","data":{"run_id":"run-1","status_v2":"running","note":"it's $HOME ` + "`id`" + `"}}`)
	binary := []byte("\x00\x01\x02%s\\n%%\\x00\xff\xfe\x80'\"\n\r\x7f end \x00")
	big := bytes.Repeat([]byte(`{"k":"a text body over the inline limit and over curl's Expect threshold"}`+"\n"), 1<<20/40)
	ds := []*devhook.Delivery{
		{Method: "POST", Path: "/hooks/service", RawQuery: "src=service&x=%20y&x=2", Body: json, Header: http.Header{
			"Content-Type": {"application/json"}, "User-Agent": {"service-webhooks/1"}, "Content-Length": {"0"},
			"Accept-Encoding": {"gzip"}}},
		{Method: "POST", Path: "/bin", Body: binary, Header: http.Header{
			"Content-Type": {"application/octet-stream"}}},
		{Method: "POST", Path: "/repeat", Body: []byte("a=1&b=2"), Header: http.Header{
			"X-Repeat": {"one", "two", "three"}, "Accept": {"text/plain", "application/json"},
			"X-Hostile": {hostile}, "X-Bytes": {"\xff\xfe caf\xc3\xa9 \x80"}, "X-Utf8": {"café ☃"},
			"X-Empty": {""}, "X-Tab": {"a\tb"}, "Cookie": {"a=1; b=2"}}},
		{Method: "POST", Path: "/at", Body: []byte("@/etc/passwd"), Header: http.Header{"Content-Type": {"text/plain"}}},
		{Method: "POST", Path: "/big", Body: big, Header: http.Header{"Content-Type": {"application/x-ndjson"}}},
		{Method: "GET", Path: "/a/[x]/%7By%7D/{z}/%2F/~", RawQuery: "q=[1]&r={2}&s=%ZZ&t", Header: http.Header{"Accept": {"*/*"}}},
		{Method: "POST", Path: "/empty", Header: http.Header{"Content-Length": {"0"}, "Content-Type": {"application/json"}}},
		{Method: "PUT", Path: "/text", Body: []byte("line 1\nline 'two'\r\n\ttabbed % \\ end\n"), Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}},
		{Method: "PATCH", Path: "/", Body: []byte("{}"), Header: http.Header{"content-type": {"application/json"}, "x-lower": {"kept as named"}}},
		{Method: "HEAD", Path: "/head", Header: http.Header{"Accept": {"*/*"}, "User-Agent": {"probe/1"}}},
		// Forwarded to a URL with dot segments (by an older devhook): sent as recorded.
		{Method: "POST", Path: "/dots", Body: []byte("{}"), Header: http.Header{"Content-Type": {"application/json"}}},
	}
	for i, d := range ds {
		d.ID = fmt.Sprintf("0190aaaa-0000-7000-8000-%012d", i)
		d.ReceivedAt = epoch.Add(time.Duration(len(ds)-i) * time.Second)
		if d.Header.Get("Content-Length") != "" {
			d.Header.Set("Content-Length", strconv.Itoa(len(d.Body)))
		}
		if len(d.Body) > 0 {
			d.Header.Set("Content-Length", strconv.Itoa(len(d.Body)))
		}
		d.Header.Set(devhook.SignatureHeader, signature.Sign(testSecret, d.ReceivedAt, d.Body))
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		d.Attempts = []devhook.Attempt{{Seq: 1, Kind: devhook.AttemptForward, Target: devhook.TargetURL(u, d.Path, d.RawQuery),
			StartedAt: d.ReceivedAt, Status: 200, Made: devhook.MadeAsArrived}}
		if d.Path == "/dots" {
			d.Attempts[0].Target = base + "/./a/../dots"
		}
	}
	return ds
}

// byReceived is ds in the order received.
func byReceived(ds []*devhook.Delivery) []*devhook.Delivery {
	out := make([]*devhook.Delivery, len(ds))
	for i := range ds {
		out[len(ds)-1-i] = ds[i]
	}
	return out
}

// The differential test: the script export writes, run by the real curl
// under sh and bash, sends each delivery byte for byte as recorded (method,
// path and query, every header and no other, the body), to the receiver
// it was forwarded to, to --to, with the bodies in files beside the script
// and with them in the script itself; and what the shell would expand in
// a header is sent as it is, never run.
func TestCurlScript_SendsAsRecorded(t *testing.T) {
	needTool(t, "curl")
	srv := startRawServer(t)
	for _, shell := range shells(t) {
		for _, tc := range []struct {
			name  string
			files bool
			to    string // "": the receiver it was forwarded to
		}{
			{"files", true, ""},
			{"stdout", false, ""},
			{"to", true, srv.URL + "/elsewhere?token=abc"},
		} {
			t.Run(shell+"/"+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				ds := hard(t, srv.URL+"/forwarded")
				opt := export.CurlOptions{}
				if tc.files {
					opt.BodyFiles = "repro.sh"
				}
				if tc.to != "" {
					u, _ := url.Parse(tc.to)
					opt.To = u
				}
				s, err := export.CurlScript(ds, opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.WriteFiles(filepath.Join(dir, "repro.sh")); err != nil {
					t.Fatal(err)
				}
				// Files only for bodies that cannot be inline: binary, large, @.
				if wantFiles := map[bool]int{true: 3, false: 0}[tc.files]; len(s.Files) != wantFiles {
					t.Errorf("%d body files, want %d", len(s.Files), wantFiles)
				}
				// Run from another directory: the script finds its files.
				out := runScript(t, t.TempDir(), shell, []string{filepath.Join(dir, "repro.sh")})
				if strings.Count(out, "HTTP/1.1 200 OK") != len(ds) {
					t.Errorf("the script printed %d answers, want %d:\n%s", strings.Count(out, "HTTP/1.1 200 OK"), len(ds), out)
				}
				for _, d := range byReceived(ds) {
					target := d.Attempts[0].Target
					if tc.to != "" {
						target, _ = export.Target(d, opt.To)
					}
					sentAsRecorded(t, srv.next(t), d, target)
				}
				srv.none(t)
				for _, f := range []string{"pwned", "pwned2"} {
					if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
						t.Errorf("the shell ran what a header held: %s exists", f)
					}
				}
			})
		}
	}
}

// The inspector's "Copy as curl" is one command per delivery, with its
// body in the command: the same bytes reach the receiver.
func TestCurlCommand_SendsAsRecorded(t *testing.T) {
	needTool(t, "curl")
	srv := startRawServer(t)
	dir := t.TempDir()
	for _, d := range hard(t, srv.URL) {
		cmd := export.CurlCommand(d, d.Attempts[0].Target)
		if strings.Contains(cmd, "$dir") {
			t.Fatalf("the command reads a file beside a script:\n%s", cmd)
		}
		// As pasted into a terminal: a file, as a command line is limited.
		file := filepath.Join(dir, "pasted.sh")
		if err := os.WriteFile(file, []byte(cmd), 0o644); err != nil {
			t.Fatal(err)
		}
		runScript(t, dir, "sh", []string{file})
		sentAsRecorded(t, srv.next(t), d, d.Attempts[0].Target)
	}
	srv.none(t)
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("the shell ran what a header held")
	}
}

// --resign: the script signs each request when it runs, with
// DEVHOOK_SECRET, and the signature verifies with devhook's own verifier
// at that time; the script holds no secret; without DEVHOOK_SECRET it
// stops before it sends anything.
func TestCurlScript_Resign(t *testing.T) {
	needTool(t, "curl")
	needTool(t, "openssl")
	srv := startRawServer(t)
	dir := t.TempDir()
	ds := hard(t, srv.URL)
	s, err := export.CurlScript(ds, export.CurlOptions{Resign: true, BodyFiles: "resign.sh"})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(s.Text, []byte(testSecret)) {
		t.Fatal("the script holds the secret")
	}
	script := filepath.Join(dir, "resign.sh")
	if err := s.WriteFiles(script); err != nil {
		t.Fatal(err)
	}
	cmd := execScript(dir, script)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "DEVHOOK_SECRET") {
		t.Errorf("without DEVHOOK_SECRET: %v\n%s", err, out)
	}
	srv.none(t)

	for _, shell := range shells(t) {
		start := time.Now()
		runScript(t, dir, shell, []string{script}, "DEVHOOK_SECRET="+testSecret)
		for _, d := range byReceived(ds) {
			got := srv.next(t)
			sentAsRecorded(t, got, d, d.Attempts[0].Target, devhook.SignatureHeader)
			sig := got.values(devhook.SignatureHeader)
			if len(sig) != 1 {
				t.Fatalf("delivery %s: signature headers %q", d.ID, sig)
			}
			v := signature.Verifier{Now: time.Now}.Verify(testSecret, sig[0], got.Body)
			p, _ := signature.Parse(sig[0])
			if !v.OK() || time.UnixMilli(p.T).Before(start.Truncate(time.Second)) {
				t.Errorf("delivery %s under %s: signature %q: %s %s", d.ID, shell, sig[0], v.Result, v.Reason)
			}
		}
		srv.none(t)
	}
}

func execScript(dir, script string) *exec.Cmd {
	cmd := exec.Command("sh", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	return cmd
}

// A delivery never forwarded has no receiver: the error names it, and
// --to gives one.
func TestCurlScript_NoTarget(t *testing.T) {
	d := &devhook.Delivery{ID: "0190-never", Method: "POST", Path: "/x", Header: http.Header{}}
	_, err := export.CurlScript([]*devhook.Delivery{d}, export.CurlOptions{})
	var nt *export.NoTargetError
	if !errors.As(err, &nt) || nt.ID != d.ID {
		t.Fatalf("err = %v, want a NoTargetError for %s", err, d.ID)
	}
	u, _ := url.Parse("http://127.0.0.1:9/base?k=v")
	s, err := export.CurlScript([]*devhook.Delivery{d}, export.CurlOptions{To: u})
	if err != nil || !bytes.Contains(s.Text, []byte("'http://127.0.0.1:9/base/x?k=v'")) {
		t.Fatalf("with --to: %v\n%s", err, s.Text)
	}
}

// A delivery a route of listen dropped went to no receiver: it has no
// target of its own, but the one a later replay called.
func TestTarget_DroppedByARoute(t *testing.T) {
	drop := devhook.Attempt{Seq: 1, Kind: devhook.AttemptDrop, Target: devhook.RouteDrop,
		Route: &devhook.Route{Index: 2, Text: "header:X=y -> drop", Target: devhook.RouteDrop}}
	d := &devhook.Delivery{ID: "0190-dropped", Method: "POST", Path: "/x", Header: http.Header{}, Attempts: []devhook.Attempt{drop}}
	var nt *export.NoTargetError
	if _, err := export.Target(d, nil); !errors.As(err, &nt) {
		t.Fatalf("a dropped delivery's target: %v, want a NoTargetError", err)
	}
	d.Attempts = append(d.Attempts, devhook.Attempt{Seq: 2, Kind: devhook.AttemptReplay, Target: "http://127.0.0.1:9/x"})
	if got, err := export.Target(d, nil); err != nil || got != "http://127.0.0.1:9/x" {
		t.Fatalf("a dropped delivery replayed: %q %v", got, err)
	}
}
