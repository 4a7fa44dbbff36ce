package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
)

// Issue 30: devhook send names who answered. A 502 that devhook listen
// made because the receiver could not be reached, or a 404 of the relay,
// is not "the receiver answered".
func TestSend_NamesWhoAnswered(t *testing.T) {
	const secret = "whsec_send_who"
	down := closedAddr(t)
	lr := startListen(t, "--forward", "http://"+down, "--secret", secret, "--data", t.TempDir())
	pub := lr.next(t, "ready")["public_url"].(string)

	_, _, err := devhookCmd(t, "send", pub+"/hook", "--secret", secret)
	if err == nil || !strings.Contains(err.Error(), "devhook listen answered 502 Bad Gateway, not the receiver: devhook: the local receiver did not answer") {
		t.Errorf("send with the receiver down: %v", err)
	}
	i := strings.LastIndex(pub, "/c/")
	_, _, err = devhookCmd(t, "send", pub[:i]+"/c/nosuchchannel/hook", "--secret", secret)
	if err == nil || !strings.Contains(err.Error(), "the devhook relay answered 404 Not Found, not the receiver: devhook relay: ") {
		t.Errorf("send to an unknown channel: %v", err)
	}

	// The receiver's own refusal is the receiver's.
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no thanks", http.StatusInternalServerError)
	}))
	defer recv.Close()
	_, _, err = devhookCmd(t, "send", recv.URL+"/hook", "--secret", secret)
	if err == nil || err.Error() != "the receiver answered 500 Internal Server Error" {
		t.Errorf("send to a receiver answering 500: %v", err)
	}
}

// devhook send says when the body it printed is not the receiver's whole
// answer: devhook listen passed it on cut (over 10 MiB: Devhook-Answer-Cut),
// and send prints 1 MiB of a body at most. It printed the first MiB and
// exited 0 without a word.
func TestSend_SaysAnAnswerIsCut(t *testing.T) {
	const secret = "whsec_send_cut"
	big := bytes.Repeat([]byte("x"), 11<<20)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(big) }))
	defer recv.Close()
	lr := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", t.TempDir())
	pub := lr.next(t, "ready")["public_url"].(string)

	stdout, stderr, err := devhookCmd(t, "send", pub+"/hook", "--secret", secret)
	if err != nil {
		t.Fatalf("send: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "Devhook-Answer-Cut: 10485760") {
		t.Fatalf("the answer has no Devhook-Answer-Cut: 10485760:\n%.500s", stdout)
	}
	for _, want := range []string{"passed on cut: the sender got its first 10485760 bytes", "longer than the first 1048576 bytes printed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("standard error does not say %q:\n%s", want, stderr)
		}
	}

	// A whole answer of less than 1 MiB: nothing said.
	small := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer small.Close()
	if _, stderr, err := devhookCmd(t, "send", small.URL+"/hook", "--secret", secret); err != nil || stderr != "" {
		t.Errorf("send to a small answer: %v, standard error %q", err, stderr)
	}
}

// send --status takes every status_v2 a run has, and the delivery is the
// service's at that state: the legacy status beside it, an error for a
// run that failed or was canceled, signed so that the reference receiver
// accepts it.
func TestSend_EveryRunStatus(t *testing.T) {
	const secret = "whsec_send_status"
	var got []devhook.RunStatus
	var verdicts []string
	var mu sync.Mutex
	srv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret, OnRequest: func(r *http.Request, body []byte, v devhook.Verdict) {
		var rs devhook.RunStatus
		json.Unmarshal(body, &rs)
		mu.Lock()
		defer mu.Unlock()
		got, verdicts = append(got, rs), append(verdicts, v.Result)
	}}))
	defer srv.Close()
	want := map[string]struct {
		legacy string
		err    bool
	}{
		"queued": {"running", false}, "running": {"running", false}, "succeeded": {"succeeded", false},
		"failed": {"failed", true}, "canceled": {"failed", true},
	}
	for _, st := range []string{"queued", "running", "succeeded", "failed", "canceled"} {
		if _, _, err := devhookCmd(t, "send", srv.URL+"/hook", "--secret", secret, "--status", st); err != nil {
			t.Errorf("send --status %s: %v", st, err)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the receiver got %d deliveries, want %d", len(got), len(want))
	}
	for i, rs := range got {
		w := want[rs.Data.StatusV2]
		if verdicts[i] != devhook.VerdictOK || rs.Data.Status != w.legacy || (rs.Data.Error != nil) != w.err {
			t.Errorf("--status %s: verdict %s, status %q, error %v", rs.Data.StatusV2, verdicts[i], rs.Data.Status, rs.Data.Error)
		}
	}
	if _, _, err := devhookCmd(t, "send", srv.URL+"/hook", "--secret", secret, "--status", "done"); err == nil ||
		!strings.Contains(err.Error(), "--status must be one of queued, running, succeeded, failed, canceled") {
		t.Errorf("send --status done: %v", err)
	}
}
