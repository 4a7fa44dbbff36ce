package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/check"
)

const checkSecret = "whsec_check_cmd"

// secondsHandler makes the commonest mistake: it compares t with a clock
// in seconds.
func secondsHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h := r.Header.Get("service-signature")
	if h == "" {
		http.Error(w, "Unauthorized: Missing Signature", 401)
		return
	}
	parts := strings.Split(h, ",")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "t=") || !strings.HasPrefix(parts[1], "v1=") {
		http.Error(w, "Unauthorized: Invalid Signature Format", 401)
		return
	}
	t, err := strconv.ParseInt(parts[0][2:], 10, 64)
	if err != nil {
		http.Error(w, "Unauthorized: Invalid Signature Format", 401)
		return
	}
	if now := time.Now().Unix(); t <= now-300 || t >= now+60 {
		http.Error(w, "Unauthorized: Invalid Time Value", 401)
		return
	}
	m := hmac.New(sha256.New, []byte(checkSecret))
	m.Write([]byte(parts[0][2:] + "."))
	m.Write(body)
	if !hmac.Equal([]byte(parts[1][3:]), []byte(hex.EncodeToString(m.Sum(nil)))) {
		http.Error(w, "Unauthorized: Invalid signature", 401)
		return
	}
	io.WriteString(w, "ok")
}

func TestCheckCommand(t *testing.T) {
	wrong := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer wrong.Close()
	down := "http://" + closedAddr(t) + "/webhooks"
	tests := []struct {
		name    string
		args    []string
		code    int
		want    []string // in stdout
		wantErr []string // in the error
	}{
		{name: "self", args: []string{"check", "--self"}, code: 0,
			want: []string{"CASE", "valid-ahead", "PASS: every required case", "answers every required case as the reference receiver does", "[constant-time] whether the signature is compared in constant time"}},
		{name: "self, strict skew", args: []string{"check", "--self", "--skew", "5s"}, code: 0,
			want: []string{"at most 5s ahead", "PASS"}},
		{name: "a handler reading t as seconds", args: []string{"check", wrong.URL, "--secret", checkSecret}, code: 1,
			want:    []string{"t-seconds", "FAIL", "401 Invalid Time Value", "compares t with a", "clock in seconds"},
			wantErr: []string{wrong.URL, "differently from the reference receiver"}},
		{name: "unreachable", args: []string{"check", down, "--secret", checkSecret, "--timeout", "2s"}, code: 2,
			wantErr: []string{"cannot reach the handler at " + down, "connection refused"}},
		{name: "no URL", args: []string{"check", "--secret", "s"}, code: 1, wantErr: []string{"give the handler's URL"}},
		{name: "URL and --self", args: []string{"check", wrong.URL, "--self"}, code: 1, wantErr: []string{"not both"}},
		{name: "no secret", args: []string{"check", wrong.URL}, code: 1, wantErr: []string{"--secret is required"}},
	}
	t.Setenv("DEVHOOK_SECRET", "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCmd(t, "", tt.args...)
			if got := exitCode(err); got != tt.code {
				t.Fatalf("exit status %d (%v), want %d\n%s", got, err, tt.code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not say %q", err, w)
				}
			}
		})
	}
}

func TestCheckJSON(t *testing.T) {
	wrong := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer wrong.Close()
	out, _, err := runCmd(t, "", "check", wrong.URL, "--secret", checkSecret, "--json")
	if exitCode(err) != 1 {
		t.Fatalf("exit status %d: %v", exitCode(err), err)
	}
	var rep check.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json printed no report: %v\n%s", err, out)
	}
	if rep.Conformed || rep.Failed == 0 || len(rep.Results) != len(check.Cases()) || rep.URL != wrong.URL {
		t.Fatalf("report %+v", rep)
	}
	ids := map[string]string{}
	for _, f := range rep.Findings {
		ids[f.ID] = f.Kind
	}
	if ids["t-seconds"] != check.KindMistake || ids["constant-time"] != check.KindUnobservable {
		t.Fatalf("findings %v", ids)
	}
	for _, r := range rep.Results {
		if r.Case == "valid" && (r.Handler.Status != 401 || r.Handler.Text != "Unauthorized: Invalid Time Value" || r.Outcome != check.Fail) {
			t.Fatalf("valid: %+v", r)
		}
	}
}

// The commonest first handler answers 200 to everything: --json names one
// root cause, no-verification, with its id and kind, and no claim about
// secrets, layouts or clocks.
func TestCheckJSONKeepsTheRootCause(t *testing.T) {
	all := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer all.Close()
	out, _, err := runCmd(t, "", "check", all.URL, "--secret", checkSecret, "--json")
	if exitCode(err) != 1 {
		t.Fatalf("exit status %d: %v", exitCode(err), err)
	}
	var doc struct {
		Diagnosis []map[string]any `json:"diagnosis"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json printed no report: %v\n%s", err, out)
	}
	var mistakes []string
	for _, f := range doc.Diagnosis {
		if f["kind"] == check.KindMistake {
			id, _ := f["id"].(string)
			mistakes = append(mistakes, id)
		}
	}
	if len(mistakes) != 1 || mistakes[0] != "no-verification" {
		t.Fatalf("mistakes %v, want no-verification alone:\n%s", mistakes, out)
	}
	first := doc.Diagnosis[0]
	if cases, _ := first["cases"].([]any); first["id"] != "no-verification" || len(cases) == 0 {
		t.Fatalf("first finding %v", first)
	}
}

// The exit statuses are the process's own: 0, 1 and 2.
func TestCheckExitStatus(t *testing.T) {
	bin := devhookBinary(t)
	wrong := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer wrong.Close()
	down := "http://" + closedAddr(t) + "/webhooks"
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"check", "--self"}, 0, ""},
		{[]string{"check", wrong.URL, "--secret", checkSecret}, 1, "differently from the reference receiver"},
		{[]string{"check", down, "--secret", checkSecret}, 2, "cannot reach the handler at " + down},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("exit status %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.stderr)
			}
		})
	}
}

// A receiver that refuses deliveries whose signature devhook verified:
// listen's line, deliveries show and the inspector's page carry the hint.
func TestListenHintsWhenTheReceiverRefusesAValidDelivery(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer recv.Close()
	data := t.TempDir()
	lr := startListen(t, "--forward", recv.URL, "--secret", checkSecret, "--data", data)
	pub, _ := lr.next(t, "ready")["public_url"].(string)

	out, _, err := runCmd(t, "", "send", pub+"/hook", "--secret", checkSecret)
	if err == nil || !strings.Contains(out, "401 Unauthorized") {
		t.Fatalf("send: %v\n%s", err, out)
	}
	d := lr.next(t, "delivery")
	hint, _ := d["hint"].(string)
	if d["verdict"] != "ok" || d["status"] != float64(401) ||
		!strings.Contains(hint, "`devhook check "+recv.URL+"/hook --secret …`") || !strings.Contains(hint, "Invalid Time Value") {
		t.Fatalf("delivery line %v", d)
	}
	lr.stop(t)

	id, _ := d["id"].(string)
	out, _, err = runCmd(t, "", "deliveries", "show", id, "--data", data, "--inspect", closedAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "  hint: your receiver refused a delivery whose signature is valid; run `devhook check "+recv.URL+"/hook") {
		t.Fatalf("deliveries show:\n%s", out)
	}
}

func TestPrinterHintLine(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 4, 5, 123e6, time.UTC)
	r := agent.Result{
		Delivery: &devhook.Delivery{ID: "d1", ReceivedAt: at, Method: "POST", Path: "/hook", Verdict: devhook.Verdict{Result: devhook.VerdictOK, T: at.UnixMilli()}},
		Attempt:  &devhook.Attempt{Status: 401, Target: "http://localhost:8080/hook", StartedAt: at, Body: []byte("Unauthorized: Invalid signature")},
		Status:   401,
	}
	var human, js bytes.Buffer
	(&printer{w: &human, loc: time.UTC}).result(r)
	(&printer{w: &js, json: true}).result(r)
	lines := strings.Split(strings.TrimSuffix(human.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "              hint: your receiver refused") || !strings.Contains(lines[1], "another secret") {
		t.Fatalf("human lines:\n%s", human.String())
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil || !strings.Contains(m["hint"].(string), "devhook check http://localhost:8080/hook") {
		t.Fatalf("json line %s (%v)", js.String(), err)
	}
}
