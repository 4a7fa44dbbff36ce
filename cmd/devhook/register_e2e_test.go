package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/signature"
)

// verifyingReceiver checks each delivery's signature with the secret it is
// given, and answers 202 with a body naming the run's status, so that the
// service's conversations can be told apart from anything devhook makes up.
type verifyingReceiver struct {
	mu       sync.Mutex
	secret   string
	statuses []string
	verdicts []string
}

func (v *verifyingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	v.mu.Lock()
	verdict := signature.Verify(v.secret, r.Header.Get("service-signature"), body, time.Now())
	ev := devhook.ParseEvent(body)
	v.statuses = append(v.statuses, ev.StatusV2)
	v.verdicts = append(v.verdicts, verdict.Result)
	v.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, "receiver got %s", ev.StatusV2)
}

func (v *verifyingReceiver) seen() ([]string, []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.statuses...), append([]string(nil), v.verdicts...)
}

// The promise, with the real binary: emulate's service, listen
// --register in front of a receiver, runs start --wait; three deliveries
// verified in order; conversations with the receiver's own answers; the
// webhook gone after SIGTERM; and after SIGKILL and a restart, one webhook.
func TestListenRegister_EndToEnd(t *testing.T) {
	bin := devhookBinary(t)
	base, c := newTestService(t) // HOME is a temporary directory, for the processes too
	ctx := t.Context()
	if _, err := c.CreateApplication(ctx, cloud.ApplicationInput{ID: "app", Name: "App"}); err != nil {
		t.Fatal(err)
	}
	recv := &verifyingReceiver{}
	rs := httptest.NewServer(recv)
	defer rs.Close()
	data := t.TempDir()
	listenArgs := []string{"listen", "--json", "--register", "--forward", rs.URL, "--data", data,
		"--relay-addr", "127.0.0.1:0", "--inspect", "off", "--endpoint", base, "--api-key", svcKey}

	p := startProc(t, listenArgs...)
	ready := p.nextJSON(t, "ready")
	id, _ := ready["webhook"].(string)
	if !strings.HasPrefix(id, "devhook-") || ready["secret_known"] != true {
		t.Fatalf("ready line %v", ready)
	}
	s, err := c.WebhookSecret(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	recv.mu.Lock()
	recv.secret = s.Secret
	recv.mu.Unlock()

	run := exec.Command(bin, "runs", "start", "app", "--input", "-", "--wait", "--poll", "20ms", "--endpoint", base, "--api-key", svcKey)
	run.Stdin = strings.NewReader(`{"hello":"laptop"}`)
	out, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "succeeded") || !strings.Contains(string(out), `"hello": "laptop"`) {
		t.Fatalf("runs start --wait: %v\n%s", err, out)
	}

	// listen verified each with the secret it fetched, in order.
	for _, want := range []string{"queued", "running", "succeeded"} {
		d := p.nextJSON(t, "delivery")
		if d["verdict"] != "ok" || d["status_v2"] != want || d["status"] != float64(202) {
			t.Errorf("listen's delivery line %v, want %s verified ok, answered 202", d, want)
		}
	}
	statuses, verdicts := recv.seen()
	if strings.Join(statuses, ",") != "queued,running,succeeded" || strings.Join(verdicts, ",") != "ok,ok,ok" {
		t.Errorf("the receiver got %v with verdicts %v", statuses, verdicts)
	}

	// The service's conversations hold the receiver's real answers.
	var cs cloud.Conversations
	waitUntil(t, "three conversations", func() bool {
		cs, err = c.ListConversations(ctx, id)
		return err == nil && len(cs.Items) == 3
	})
	for i, want := range []string{"succeeded", "running", "queued"} { // newest first
		cv, err := c.GetConversation(ctx, id, cs.Items[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if cv.HTTPStatus != 202 || cv.ResponseBody != "receiver got "+want || cv.Status != "succeeded" {
			t.Errorf("conversation %d: status %d body %q (%s)", i, cv.HTTPStatus, cv.ResponseBody, cv.Status)
		}
	}

	// SIGTERM: the webhook goes with listen.
	p.stop(t, 15*time.Second)
	if _, err := c.GetWebhook(ctx, id); !cloud.IsNotFound(err) {
		t.Errorf("webhook %s is still there after SIGTERM: %v", id, err)
	}
	if m := p.nextJSON(t, "webhook"); !strings.Contains(fmt.Sprint(m["message"]), "deleted webhook "+id) {
		t.Errorf("exit line %v", m)
	}

	// SIGKILL leaves the webhook; the next start takes it over, pointing
	// it at its own URL: never two.
	p = startProc(t, listenArgs...)
	left := p.nextJSON(t, "ready")["webhook"]
	p.kill()
	p = startProc(t, listenArgs...)
	ready = p.nextJSON(t, "ready")
	if ready["webhook"] != left {
		t.Errorf("after SIGKILL the next start registered %v, not the %v left behind", ready["webhook"], left)
	}
	ws, err := c.ListWebhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range ws.Items {
		if strings.HasPrefix(h.ID, "devhook-") {
			n++
			if h.EndpointURL != ready["public_url"] {
				t.Errorf("webhook %s points at %s, not %v", h.ID, h.EndpointURL, ready["public_url"])
			}
		}
	}
	if n != 1 {
		t.Errorf("%d devhook webhooks after SIGKILL and restart, want 1: %+v", n, ws.Items)
	}
	p.stop(t, 15*time.Second)
	if ws, _ := c.ListWebhooks(ctx); len(ws.Items) != 0 {
		t.Errorf("%d webhooks left after the restarted listen stopped", len(ws.Items))
	}
}
