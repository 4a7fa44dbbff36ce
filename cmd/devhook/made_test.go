package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/storage"
)

// deliveries show says how each attempt was made and what it sent: an
// edited body replayed without re-signing shows its own Content-Length,
// and a hint that the receiver was right to refuse it, not one that
// blames the receiver.
func TestDeliveriesShowEditedReplay(t *testing.T) {
	const secret = "whsec_show_made"
	dir, d := seedStore(t, secret, time.Now(), 200)
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	db, err := storage.Open(filepath.Join(dir, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{Store: db, Secret: secret, Forward: []string{recv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	no := false
	for _, opt := range []devhook.ReplayOptions{
		{Resign: &no, Body: []byte(`{"edited":true}`), HasBody: true},
		{}, // re-signed
	} {
		if _, err := ag.Replay(context.Background(), d.ID, opt); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	out, _, err := devhookCmd(t, "deliveries", "show", d.ID, "--data", dir, "--inspect", closedAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	_, edited, _ := strings.Cut(out, "\nattempt 2 (replay)")
	edited, resigned, _ := strings.Cut(edited, "\nattempt 3 (replay)")
	for _, want := range []string{
		"status 401",
		"  made: edited, not re-signed",
		"  request as sent: POST /hook (15 bytes of body)",
		"    Content-Length: 15",
		`    {"edited":true}`,
		"  hint: the body was edited and not re-signed: the receiver was right to refuse it; replay with re-signing to test the handler",
	} {
		if !strings.Contains(edited, want) {
			t.Errorf("the edited replay's attempt does not say %q:\n%s", want, edited)
		}
	}
	if strings.Contains(edited, "whose signature is valid") {
		t.Errorf("the edited replay's refusal is blamed on the receiver:\n%s", edited)
	}
	if !strings.Contains(resigned, "status 200") || !strings.Contains(resigned, "  made: as it arrived, re-signed with a fresh t") || strings.Contains(resigned, "hint:") {
		t.Errorf("the re-signed replay's attempt:\n%s", resigned)
	}
	if _, first, _ := strings.Cut(out, "\nattempt 1 (forward)"); strings.Contains(strings.Split(first, "\nattempt 2")[0], "made:") {
		t.Errorf("an attempt recorded without how it was made says how:\n%s", first)
	}

	out, _, err = devhookCmd(t, "deliveries", "show", d.ID, "--data", dir, "--inspect", closedAddr(t), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got devhook.Delivery
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Attempts) != 3 || got.Attempts[0].Made != "" || got.Attempts[1].Made != devhook.MadeEdited || got.Attempts[2].Made != devhook.MadeResigned ||
		got.Attempts[1].Request.Header.Get("Content-Length") != "15" || !strings.Contains(out, `"made": "edited"`) && !strings.Contains(out, `"made":"edited"`) {
		t.Errorf("deliveries show --json:\n%s", out)
	}
}

// listen's line for a replay says how it was made, and the hint once.
func TestPrinterReplayLine(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 4, 5, 123e6, time.UTC)
	d := &devhook.Delivery{ID: "d1", ReceivedAt: at, Method: "POST", Path: "/hook", Body: []byte(`{"a":1}`),
		Verdict: devhook.Verdict{Result: devhook.VerdictOK, T: at.UnixMilli()}}
	r := agent.Result{Delivery: d, Replay: true, Status: 401, Attempt: &devhook.Attempt{
		Seq: 2, Kind: devhook.AttemptReplay, Made: devhook.MadeEdited, Status: 401, Target: "http://localhost:8080/hook", StartedAt: at,
		Request: &devhook.Request{Method: "POST", Path: "/hook", Body: []byte(`{"edited":true}`)}, Body: []byte("Unauthorized: Invalid signature")}}
	var human, js bytes.Buffer
	p := &printer{w: &human, loc: time.UTC}
	p.result(r)
	p.result(r)
	(&printer{w: &js, json: true}).result(r)
	lines := strings.Split(strings.TrimSuffix(human.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "replay of d1 → 401") || !strings.Contains(lines[0], "(edited, not re-signed)") ||
		!strings.HasPrefix(lines[1], "              hint: the body was edited and not re-signed") || !strings.Contains(lines[2], "(edited, not re-signed)") {
		t.Fatalf("human lines:\n%s", human.String())
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil || m["made"] != devhook.MadeEdited || m["resigned"] != nil ||
		!strings.Contains(m["hint"].(string), "the receiver was right to refuse it") {
		t.Fatalf("json line %s (%v)", js.String(), err)
	}
}
