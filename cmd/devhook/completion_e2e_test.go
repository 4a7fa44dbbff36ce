package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/signature"
)

// completeBin runs the built devhook's __complete, as the shells'
// completion scripts do. Its deadline is generous: these tests check what
// it offers, not how fast a busy machine answers.
func completeBin(t *testing.T, words ...string) (completed, string) {
	t.Helper()
	return completeBinEnv(t, nil, words...)
}

// completeBinEnv is completeBin with env added to the environment.
func completeBinEnv(t *testing.T, env []string, words ...string) (completed, string) {
	t.Helper()
	cmd := exec.Command(devhookBinary(t), append([]string{"__complete"}, words...)...)
	cmd.Env = append(append(os.Environ(), completionTimeoutEnv+"=60s"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("devhook __complete %q: %v\n%s", words, err, errb.String())
	}
	return parseCompletion(t, out.String()), errb.String()
}

// sendRun posts one signed run.status delivery of app's run to path.
func sendRun(t *testing.T, public, path, secret, app, run, statusV2 string) {
	t.Helper()
	body, _ := json.Marshal(devhook.NewRunStatus(run, app, statusV2, time.Now()))
	req, _ := http.NewRequest(http.MethodPost, public+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Trace", "t-1")
	req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, time.Now(), body))
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// dirState is each file of dir with its size, time and hash.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = fmt.Sprintf("%d %s %x", info.Size(), info.ModTime(), sha256.Sum256(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Delivery, run and application ids, and receiver statuses, come from a
// running listen (through its inspector: it holds the store) and, once it
// stopped, from its store, read without writing a byte.
func TestCompletionE2E_RecordedIDs(t *testing.T) {
	devhookBinary(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	data := filepath.Join(home, ".devhook") // runs and apps have no --data: they read the default
	const secret = "whsec_completion"
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer recv.Close()
	l := startProc(t, "listen", "--json", "--forward", recv.URL, "--secret", secret, "--inspect", "127.0.0.1:0",
		"--relay-addr", "127.0.0.1:0", "--data", data)
	public := l.nextJSON(t, "ready")["public_url"].(string)
	sends := []struct{ path, app, run, status string }{
		{"/hook", "app-one", "run-1", "queued"}, {"/hook", "app-one", "run-1", "succeeded"},
		{"/hook", "app-two", "run-2", "running"}, {"/down", "app-one", "run-3", "failed"},
	}
	var ids []string // newest first
	for _, s := range sends {
		sendRun(t, public, s.path, secret, s.app, s.run, s.status)
		ids = append([]string{l.nextJSON(t, "delivery")["id"].(string)}, ids...)
	}

	check := func(t *testing.T) { checkRecordedCompletions(t, data, ids) }
	t.Run("running", func(t *testing.T) {
		lj, err := running.Read(data)
		if err != nil {
			t.Fatal(err)
		}
		check(t)
		got, _ := completeBin(t, "deliveries", "list", "--inspect", "")
		if want := strings.TrimPrefix(lj.InspectorURL, "http://"); !slices.Equal(got.values, []string{want}) {
			t.Errorf("--inspect: %q, want %s", got.values, want)
		}
		if got, _ := completeBin(t, "send", ""); !slices.Equal(got.values, []string{public}) {
			t.Errorf("send: %q, want %s", got.values, public)
		}
	})
	l.stop(t, 30*time.Second)
	before := dirState(t, data)
	t.Run("stopped", check)
	if after := dirState(t, data); !maps.Equal(before, after) {
		t.Errorf("completion changed the data directory:\nbefore %v\nafter  %v", before, after)
	}
	t.Run("bash", func(t *testing.T) { bashCompletes(t, ids) })
}

// checkRecordedCompletions checks what TAB offers from the deliveries
// recorded in data (ids: newest first): see TestCompletionE2E_RecordedIDs.
func checkRecordedCompletions(t *testing.T, data string, ids []string) {
	t.Helper()
	got, stderr := completeBin(t, "deliveries", "show", "")
	if !slices.Equal(got.values, ids) || got.directive != noFiles {
		t.Errorf("deliveries show: %q directive %d, want %q (newest first) directive %d", got.values, got.directive, ids, noFiles)
	}
	if len(got.descs) == 4 && (!strings.Contains(got.descs[0], "POST /down") || !strings.Contains(got.descs[0], "ok → 503") ||
		!strings.Contains(got.descs[3], "POST /hook  ok → 200")) {
		t.Errorf("descriptions %q", got.descs)
	}
	if strings.TrimSpace(stderr) != "Completion ended with directive: ShellCompDirectiveNoFileComp, ShellCompDirectiveKeepOrder" {
		t.Errorf("stderr: %q", stderr)
	}
	if got, _ := completeBin(t, "replay", "--data", data, ids[2][:len(ids[2])-4]); !slices.Equal(got.values, ids[2:3]) {
		t.Errorf("replay PREFIX: %q, want %s", got.values, ids[2])
	}
	if got, _ := completeBin(t, "deliveries", "delete", ids[0], ids[2], ""); !slices.Equal(got.values, []string{ids[1], ids[3]}) {
		t.Errorf("deliveries delete ID ID: %q, want the others", got.values)
	}
	if got, _ := completeBin(t, "scenario", "save", "x.json", "--id", ids[0]+","); len(got.values) != 3 || got.values[0] != ids[0]+","+ids[1] {
		t.Errorf("scenario save --id ID,: %q", got.values)
	}
	if got, _ := completeBin(t, "deliveries", "export", "--run", ""); !slices.Equal(got.values, []string{"run-3", "run-2", "run-1"}) ||
		!strings.HasPrefix(got.descs[2], "succeeded, 2 deliveries") {
		t.Errorf("deliveries export --run: %q %q", got.values, got.descs)
	}
	if got, _ := completeBin(t, "runs", "get", ""); !slices.Equal(got.values, []string{"app-one", "app-two"}) {
		t.Errorf("runs get: %q, want the applications, most recent first", got.values)
	}
	if got, _ := completeBin(t, "runs", "logs", "app-one", ""); !slices.Equal(got.values, []string{"run-3", "run-1"}) {
		t.Errorf("runs logs app-one: %q, want its runs", got.values)
	}
	got, _ = completeBin(t, "replay", ids[1], "--remove-header", "")
	if i := slices.Index(got.values, "X-Trace"); i < 0 || got.descs[i] != "t-1" || !slices.Contains(got.values, "Service-Signature") {
		t.Errorf("replay ID --remove-header: %q %q, want the delivery's headers", got.values, got.descs)
	}
	if got, _ := completeBin(t, "deliveries", "list", "--status", ""); !slices.Equal(got.values, []string{"none", "200", "503"}) {
		t.Errorf("deliveries list --status: %q", got.values)
	}
}

// bashCompletes sources devhook completion bash in a bash with
// bash-completion, as an interactive shell would, and calls its function
// for a line as bash does on TAB: COMPREPLY holds what the shell shows.
func bashCompletes(t *testing.T, ids []string) {
	const lib = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(lib); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("bash-completion is not installed (.ci/run installs it)")
		}
		t.Skip("bash-completion is not installed")
	}
	bin := devhookBinary(t)
	complete := func(words ...string) []string {
		t.Helper()
		script := fmt.Sprintf(`source %s
source <(devhook completion bash)
COMP_WORDS=(%s)
COMP_CWORD=%d
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
COLUMNS=200
__start_devhook devhook "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%%s\n' "${COMPREPLY[@]}"
`, lib, shellWords(words), len(words)-1)
		cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), completionTimeoutEnv+"=60s")
		// Its stderr has compopt's complaint that no completion is under
		// way: bash did not call the function itself.
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash: %v\n%s%s", err, out, errb.String())
		}
		return strings.Fields(strings.TrimSpace(string(out)))
	}
	if got := complete("devhook", "listen", "--verify", "e"); !slices.Equal(got, []string{"enforce"}) {
		t.Errorf("devhook listen --verify e: COMPREPLY %q", got)
	}
	got := strings.Join(complete("devhook", "deliveries", "show", ""), " ")
	for _, id := range ids {
		if !strings.Contains(got, id) {
			t.Errorf("devhook deliveries show: COMPREPLY %q lacks %s", got, id)
		}
	}
	if !strings.Contains(got, "POST /hook") {
		t.Errorf("devhook deliveries show: COMPREPLY %q shows no description", got)
	}
	if got := complete("devhook", "deliveries", "show", ids[1][:len(ids[1])-3]); !slices.Equal(got, ids[1:2]) {
		t.Errorf("devhook deliveries show PREFIX: COMPREPLY %q, want %s alone", got, ids[1])
	}
}

// shellWords quotes words for a bash array.
func shellWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// An inspector that takes connections and never answers (a listen
// stopped with SIGSTOP) costs a completion its deadline, not the minute
// the deliveries commands wait, and it prints nothing.
func TestCompletionE2E_HungInspectorIsCutShort(t *testing.T) {
	bin := devhookBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	data := t.TempDir()
	// listen.json naming a live process (this test's) and the hung inspector.
	if _, err := running.Write(data, running.Listen{PID: os.Getpid(), Data: data, InspectorURL: "http://" + ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "__complete", "deliveries", "show", "--data", data, "")
	cmd.Env = append(os.Environ(), completionTimeoutEnv+"=500ms")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("__complete: %v %s", err, errb.String())
		}
	case <-time.After(30 * time.Second): // the inspector client's own timeout is a minute
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("__complete still waiting on a hung inspector after %s", time.Since(start))
	}
	if out.String() != fmt.Sprintf(":%d\n", noFiles) {
		t.Errorf("stdout %q, want only the directive", out.String())
	}
	if strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("stderr %q, want cobra's directive line alone", errb.String())
	}
}

// --team offers the signed-in user's teams, which the service tells over
// HTTPS only: here devhook emulate --tls, its CA trusted.
func TestCompletionE2E_TeamsOverHTTPS(t *testing.T) {
	devhookBinary(t)
	emu, _ := startEmulate(t, "--tls", "--team", "team-tls=Team TLS")
	base, ca, key := emu["base"], emu["ca"], emu["key"]
	env := []string{"HOME=" + t.TempDir(), "SSL_CERT_FILE=" + ca, "SERVICE_SYSTEM_CERTS=1", "SERVICE_PROFILE=", "SERVICE_API_KEY=", "SERVICE_ENDPOINT="}
	got, _ := completeBinEnv(t, env, "webhooks", "list", "--endpoint", base, "--api-key", key, "--team", "")
	if !slices.Equal(got.values, []string{"team-tls"}) || got.descs[0] != "Team TLS" {
		t.Errorf("--team: %q %q", got.values, got.descs)
	}
	// The webhooks of the team named on the line.
	create := exec.Command(devhookBinary(t), "webhooks", "create", "team-hook", "--url", "http://127.0.0.1:9/x",
		"--endpoint", base, "--api-key", key, "--team", "Team TLS")
	create.Env = append(os.Environ(), env...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("webhooks create: %v\n%s", err, out)
	}
	got, _ = completeBinEnv(t, env, "webhooks", "get", "--endpoint", base, "--api-key", key, "--team", "Team TLS", "")
	if !slices.Equal(got.values, []string{"team-hook"}) {
		t.Errorf("webhooks get --team 'Team TLS': %q", got.values)
	}
}
