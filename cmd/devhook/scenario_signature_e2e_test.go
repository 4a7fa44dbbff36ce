package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// Issue 30: a run recorded with a delivery signed with another secret, one
// unsigned and one with a malformed header is saved with what each
// signature was; played against the very handler that recorded them it
// passes (exit 0), because play sends each as it failed and the handler
// refuses them again; --resign signs them afresh, and then the handler
// accepts what it had refused (exit 1).
func TestScenario_FailedSignaturesPlayBackAsRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	const secret = "whsec_scenario_sig"
	rec := &recording{}
	recv := httptest.NewServer(rec.reference(secret))
	defer recv.Close()
	data, inspect := t.TempDir(), closedAddr(t)
	lr := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", data, "--inspect", inspect)
	pub := lr.next(t, "ready")["public_url"].(string)

	statuses := []string{"queued", "running", "succeeded", "succeeded"}
	sigs := []func(body []byte) string{
		func(b []byte) string { return signature.Sign(secret, time.Now(), b) },
		func(b []byte) string { return signature.Sign("whsec_another", time.Now(), b) },
		func([]byte) string { return "" },
		func([]byte) string { return "t=soon,v1=abc" },
	}
	wantStatus := []float64{200, 401, 401, 401}
	for i, sig := range sigs {
		body, _ := json.Marshal(devhook.NewRunStatus("run-sig", "app-1", statuses[i], time.Now()))
		req, _ := http.NewRequest(http.MethodPost, pub+"/hook", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if s := sig(body); s != "" {
			req.Header.Set(devhook.SignatureHeader, s)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if d := lr.next(t, "delivery"); d["status"] != wantStatus[i] {
			t.Fatalf("delivery %d: %v, want the receiver's %v", i+1, d, wantStatus[i])
		}
	}

	file := filepath.Join(t.TempDir(), "sig.json")
	out, stderr, err := devhookCmd(t, "scenario", "save", file, "--last", "4", "--data", data, "--inspect", inspect)
	if err != nil || !strings.Contains(out, "3 deliveries' signatures failed when recorded: play sends them as they failed") {
		t.Fatalf("scenario save: %v %s\n%s", err, stderr, out)
	}
	out, _, err = devhookCmd(t, "scenario", "show", file)
	for _, want := range []string{"version 2", "invalid (as recorded)", "missing (as recorded)", "malformed (as recorded)", "afresh"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("scenario show: %v; no %q in\n%s", err, want, out)
		}
	}

	// Against the handler that recorded them: every answer as recorded.
	rec2 := &recording{}
	recv2 := httptest.NewServer(rec2.reference(secret))
	defer recv2.Close()
	out, _, err = devhookCmd(t, "scenario", "play", file, "--to", recv2.URL, "--secret", secret, "--speed", "0")
	if exitCode(err) != 0 || !strings.Contains(out, "PASS: 4 of 4") || !strings.Contains(out, "signed with another secret, as recorded") {
		t.Fatalf("play: exit %d (%v)\n%s", exitCode(err), err, out)
	}
	wantVerdicts := []string{devhook.VerdictOK, devhook.VerdictInvalidSignature, devhook.VerdictMissingSignature, devhook.VerdictInvalidFormat}
	for i, want := range wantVerdicts {
		if rec2.verds[i].Result != want {
			t.Errorf("played delivery %d: the handler's verdict %s, want %s", i+1, rec2.verds[i].Result, want)
		}
	}
	if got := rec2.reqs[3].Header.Get(devhook.SignatureHeader); got != "t=soon,v1=abc" {
		t.Errorf("the malformed header was played as %q, not as recorded", got)
	}

	// --resign: all signed afresh, and the refusals recorded are not met.
	out, _, err = devhookCmd(t, "scenario", "play", file, "--to", recv2.URL, "--secret", secret, "--speed", "0", "--resign")
	if exitCode(err) != 1 || !strings.Contains(out, "FAIL: 3 of 4") {
		t.Errorf("play --resign: exit %d (%v)\n%s", exitCode(err), err, out)
	}
}
