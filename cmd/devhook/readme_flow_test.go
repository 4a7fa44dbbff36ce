package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The README's "Your first delivery" and its flow with devhook emulate run
// top to bottom as written: each line of their code blocks, in a shell,
// with the devhook binary on PATH and a new HOME (so ~/.devhook and
// ~/.service are empty). Commands that keep running (receive, listen,
// emulate) run as in their own terminal; starting one again stops the one
// before, as the README says to. The one change to the lines: the ports
// (8080, 4010, 4040, 4041) are moved to free ones, so that tests running
// at once on this machine do not collide; the flags that move them are
// the ones the README names (--addr, --inspect, --relay-addr).
func TestReadmeFlowsRunAsWritten(t *testing.T) {
	bin := devhookBinary(t)
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	first := codeBlockAfter(t, readme, "## Your first delivery")
	emu := codeBlockAfter(t, readme, "### On one machine, with `devhook emulate`")

	sh := &readmeShell{t: t, env: []string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + t.TempDir(), "NO_COLOR=1"}, running: map[string]*readmeProc{}, ports: map[string]string{}}
	// Four different ports: each listener is held until all four are
	// chosen (one closed before the next is opened may be given again).
	var held []net.Listener
	for _, p := range []string{"8080", "4010", "4040", "4041"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		_, sh.ports[p], _ = net.SplitHostPort(l.Addr().String())
	}
	for _, l := range held {
		l.Close()
	}
	t.Cleanup(sh.stopAll)

	sh.run(first)
	send := sh.last
	if !strings.Contains(send, "200 OK") {
		t.Fatalf("devhook send printed:\n%s", send)
	}
	// listen prints a delivery's line once it has answered: send may
	// return first.
	lp := sh.running["listen"]
	waitUntil(t, "listen's line of the delivery", func() bool { return strings.Contains(lp.out.String(), "→ ") })
	if out := lp.out.String(); !strings.Contains(out, " ok ") || !strings.Contains(out, "→ 200") {
		t.Fatalf("listen printed no verified, accepted delivery:\n%s", out)
	}

	sh.run(emu)
	listen := sh.running["listen"]
	waitUntil(t, "three deliveries at listen", func() bool { return strings.Count(listen.out.String(), "→ 200") >= 3 })
	out := listen.out.String()
	for _, st := range []string{"queued", "running", "succeeded"} {
		if !strings.Contains(out, st) {
			t.Errorf("listen shows no %s delivery:\n%s", st, out)
		}
	}
	if strings.Contains(out, "hint:") || strings.Count(out, " ok ") < 3 {
		t.Errorf("the emulator's deliveries were not all verified and accepted:\n%s", out)
	}
	if !strings.Contains(out, "  secret      ") {
		t.Errorf("listen --register printed no secret:\n%s", out)
	}
}

// codeBlockAfter is the first fenced code block after heading.
func codeBlockAfter(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no %q", heading)
	}
	rest := md[i:]
	start := strings.Index(rest, "```sh\n")
	if start < 0 {
		t.Fatalf("no code block after %q", heading)
	}
	rest = rest[start+len("```sh\n"):]
	return rest[:strings.Index(rest, "```")]
}

type readmeProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// readmeShell runs README lines as a user in several terminals would.
type readmeShell struct {
	t       *testing.T
	env     []string
	ports   map[string]string // README's port → this test's
	running map[string]*readmeProc
	last    string // the output of the last command that ended
}

func (s *readmeShell) run(block string) {
	t := s.t
	for _, line := range strings.Split(block, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		for from, to := range s.ports {
			line = strings.ReplaceAll(line, ":"+from, ":"+to)
		}
		if vars, ok := strings.CutPrefix(line, "export "); ok {
			s.env = append(s.env, strings.Fields(vars)...)
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "devhook" && (f[1] == "receive" || f[1] == "listen" || f[1] == "emulate") {
			s.start(f[1], line)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Env = s.env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		s.last = string(out)
	}
}

// start runs a command that keeps running, after stopping the one of the
// same name, and waits until it serves.
func (s *readmeShell) start(name, line string) {
	t := s.t
	if p := s.running[name]; p != nil {
		p.stop(t)
	}
	var port string
	switch name {
	case "receive":
		port = s.ports["8080"]
		line += " --addr 127.0.0.1:" + port
	case "emulate":
		port = s.ports["4010"]
		line += " --addr 127.0.0.1:" + port
	case "listen":
		line += " --inspect 127.0.0.1:" + s.ports["4040"] + " --relay-addr 127.0.0.1:" + s.ports["4041"]
	}
	p := &readmeProc{cmd: exec.Command("sh", "-c", "exec "+line), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = s.env, p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	s.running[name] = p
	waitUntil(t, line+" to serve", func() bool {
		select {
		case <-p.done:
			t.Fatalf("%s ended:\n%s", line, p.out)
		default:
		}
		// What the command prints once it serves, not a connection to
		// its port: another process on that port would answer too.
		switch name {
		case "listen":
			return strings.Contains(p.out.String(), "  recording ")
		case "receive":
			return strings.Contains(p.out.String(), "reference receiver on http://127.0.0.1:"+port+"\n")
		}
		return strings.Contains(p.out.String(), "service emulator on http://127.0.0.1:"+port+"\n")
	})
}

// stop sends SIGINT, as Ctrl-C in its terminal, and waits for the end.
func (p *readmeProc) stop(t *testing.T) {
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop on SIGINT:\n%s", p.cmd.Args, p.out)
	}
}

func (s *readmeShell) stopAll() {
	for name, p := range s.running {
		p.stop(s.t)
		if s.t.Failed() {
			s.t.Logf("devhook %s printed:\n%s", name, p.out)
		}
	}
}
