package export_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
)

// rawRequest is a request as its bytes came over the connection, read by
// hand so that nothing is normalised on the way: the request target as
// written, every header line in order, the body.
type rawRequest struct {
	Method, Target, Proto string
	Lines                 [][2]string // name and value of each header line, in order
	Body                  []byte
}

// values returns the values of every header line named name (any case),
// in order.
func (r rawRequest) values(name string) []string {
	var out []string
	for _, l := range r.Lines {
		if strings.EqualFold(l[0], name) {
			out = append(out, l[1])
		}
	}
	return out
}

// rawServer is a TCP listener on 127.0.0.1:0 that reads HTTP/1.1 requests
// by hand and answers each 200 "ok", closing the connection.
type rawServer struct {
	URL  string
	ln   net.Listener
	reqs chan rawRequest
	errs chan error
	wg   sync.WaitGroup
}

func startRawServer(t *testing.T) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{URL: "http://" + ln.Addr().String(), ln: ln, reqs: make(chan rawRequest, 100), errs: make(chan error, 100)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(time.Minute))
				r, err := readRaw(bufio.NewReader(c), c)
				if err != nil {
					s.errs <- err
					return
				}
				s.reqs <- r
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// next returns the next request the server read.
func (s *rawServer) next(t *testing.T) rawRequest {
	t.Helper()
	select {
	case r := <-s.reqs:
		return r
	case err := <-s.errs:
		t.Fatalf("reading a request: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no request came within 30s")
	}
	return rawRequest{}
}

// none fails when the server read a request nobody took.
func (s *rawServer) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-s.reqs:
		t.Errorf("one request more than expected: %s %s", r.Method, r.Target)
	case err := <-s.errs:
		t.Errorf("reading a request: %v", err)
	default:
	}
}

func readRaw(br *bufio.Reader, w io.Writer) (rawRequest, error) {
	var r rawRequest
	line, err := br.ReadString('\n')
	if err != nil {
		return r, fmt.Errorf("request line: %w", err)
	}
	parts := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
	if len(parts) != 3 {
		return r, fmt.Errorf("request line %q", line)
	}
	r.Method, r.Target, r.Proto = parts[0], parts[1], parts[2]
	length := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return r, fmt.Errorf("header: %w", err)
		}
		if !strings.HasSuffix(line, "\r\n") {
			return r, fmt.Errorf("header line %q does not end in CRLF", line)
		}
		line = strings.TrimSuffix(line, "\r\n")
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return r, fmt.Errorf("header line %q", line)
		}
		value = strings.Trim(value, " \t")
		r.Lines = append(r.Lines, [2]string{name, value})
		switch {
		case strings.EqualFold(name, "Content-Length"):
			if length, err = strconv.Atoi(value); err != nil {
				return r, fmt.Errorf("Content-Length %q", value)
			}
		case strings.EqualFold(name, "Transfer-Encoding"):
			return r, fmt.Errorf("the body came as Transfer-Encoding %s", value)
		case strings.EqualFold(name, "Expect"):
			io.WriteString(w, "HTTP/1.1 100 Continue\r\n\r\n")
		}
	}
	r.Body = make([]byte, length)
	if _, err := io.ReadFull(br, r.Body); err != nil {
		return r, fmt.Errorf("body of %d bytes: %w", length, err)
	}
	return r, nil
}

// sentAsRecorded compares what curl sent with d as recorded: method,
// path and query of target, every header d has but Host and
// Content-Length, and no other (Host and Content-Length aside), the
// body byte for byte. skip names headers not compared (a signature made
// afresh).
func sentAsRecorded(t *testing.T, got rawRequest, d *devhook.Delivery, target string, skip ...string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	wantTarget := strings.TrimPrefix(target, u.Scheme+"://"+u.Host)
	if got.Method != d.Method || got.Target != wantTarget || got.Proto != "HTTP/1.1" {
		t.Errorf("delivery %s: request line %s %s %s, want %s %s HTTP/1.1", d.ID, got.Method, got.Target, got.Proto, d.Method, wantTarget)
	}
	want := map[string][]string{}
	for k, vs := range d.Header {
		want[strings.ToLower(k)] = vs
	}
	gotH := map[string][]string{}
	for _, l := range got.Lines {
		gotH[strings.ToLower(l[0])] = append(gotH[strings.ToLower(l[0])], l[1])
	}
	for _, k := range append([]string{"host", "content-length"}, skip...) {
		delete(want, strings.ToLower(k))
		delete(gotH, strings.ToLower(k))
	}
	for k, vs := range want {
		if !sameStrings(gotH[k], vs) {
			t.Errorf("delivery %s: header %s sent %q, recorded %q", d.ID, k, gotH[k], vs)
		}
	}
	for k, vs := range gotH {
		if _, ok := want[k]; !ok {
			t.Errorf("delivery %s: header %s: %q sent, not recorded", d.ID, k, vs)
		}
	}
	if hosts := got.values("Host"); len(hosts) != 1 || hosts[0] != u.Host {
		t.Errorf("delivery %s: Host %q, want %s", d.ID, hosts, u.Host)
	}
	cl := got.values("Content-Length")
	switch {
	case len(d.Body) > 0 || d.Header.Get("Content-Length") != "":
		if len(cl) != 1 || cl[0] != strconv.Itoa(len(d.Body)) {
			t.Errorf("delivery %s: Content-Length %q, want %d", d.ID, cl, len(d.Body))
		}
	case len(cl) > 0:
		t.Errorf("delivery %s: Content-Length %q sent for a request that had none", d.ID, cl)
	}
	if !bytes.Equal(got.Body, d.Body) {
		t.Errorf("delivery %s: body of %d bytes differs from the %d recorded: %.80q", d.ID, len(got.Body), len(d.Body), got.Body)
	}
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// shells are the shells a script is run with: sh (dash on Debian), and
// bash when there is one.
func shells(t *testing.T) []string {
	t.Helper()
	out := []string{"sh"}
	if _, err := exec.LookPath("bash"); err == nil {
		out = append(out, "bash")
	}
	return out
}

// needTool skips without name, or fails under CI, where .ci/run installs it.
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (.ci/run installs it)", name)
		}
		t.Skipf("%s is not installed", name)
	}
}

// runScript runs a shell script file in dir with a clean environment (no
// proxy) but for env, and a HOME whose ~/.curlrc adds a header and a
// User-Agent, which the script must not send.
func runScript(t *testing.T, dir, shell string, args []string, env ...string) string {
	t.Helper()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".curlrc"), []byte("header = \"X-From-Curlrc: yes\"\nuser-agent = \"curlrc\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(shell, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LC_ALL=C"}, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s\n%s", shell, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
