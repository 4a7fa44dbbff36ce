package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	"github.com/google/uuid"
)

// The packages say what went wrong without naming a flag; the commands
// add which flag changes it. Each error here names its flag.
func TestFlagAdvice_Listen(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--forward", "localhost:1", "--verify", "sometimes"}, []string{`--verify "sometimes"`, "report, enforce or off"}},
		{[]string{"--forward", "ftp://x"}, []string{`--forward: "ftp://x" is not a receiver address`, "host:port"}},
		{[]string{"--forward", " "}, []string{"--forward: the receiver's address is empty"}},
	} {
		args := append([]string{"listen", "--data", t.TempDir(), "--inspect", "off", "--relay-addr", "127.0.0.1:0"}, tt.args...)
		_, _, err := devhookCmd(t, args...)
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want %q", tt.args, err, w)
			}
		}
	}
}

func TestFlagAdvice_Replay(t *testing.T) {
	t.Setenv("DEVHOOK_SECRET", "")
	dir, d := seedStore(t, "whsec_advice", time.Now(), 200)
	inspect := closedAddr(t)

	// --resign without a secret: the agent cannot; the command says how.
	_, _, err := devhookCmd(t, "replay", d.ID, "--data", dir, "--inspect", inspect, "--resign")
	if err == nil || !strings.Contains(err.Error(), "cannot re-sign") || !strings.Contains(err.Error(), "pass --secret") || !strings.Contains(err.Error(), "--no-resign") {
		t.Errorf("--resign without a secret: %v", err)
	}
	// A --to that is no address.
	_, _, err = devhookCmd(t, "replay", d.ID, "--data", dir, "--inspect", inspect, "--to", "ftp://x")
	if err == nil || !strings.Contains(err.Error(), `--to: "ftp://x" is not a receiver address`) {
		t.Errorf("--to ftp://x: %v", err)
	}

	// A delivery never forwarded, replayed without --to.
	db, err := storage.Open(filepath.Join(dir, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	never := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: time.Now(), Method: http.MethodPost, Path: "/hook",
		Header: http.Header{}, Body: []byte("{}")}
	if _, err := db.PutDelivery(never); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, err = devhookCmd(t, "replay", never.ID, "--data", dir, "--inspect", inspect)
	if err == nil || !strings.Contains(err.Error(), "nowhere to replay") || !strings.Contains(err.Error(), "--to URL") {
		t.Errorf("replay of a delivery never forwarded: %v", err)
	}
}

func TestFlagAdvice_Scenario(t *testing.T) {
	dir, _ := seedStore(t, "whsec_advice", time.Now(), 200)
	inspect := closedAddr(t)
	out := filepath.Join(t.TempDir(), "s.json")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"scenario", "save", out, "--data", dir, "--inspect", inspect, "--last", "-1"}, "--last -1: give a number of deliveries, 1 or more"},
		{[]string{"scenario", "save", out, "--data", dir, "--inspect", inspect, "--last", "1", "--redact", "data.x"}, `--redact: redaction path "data.x": a JSON path starts with $`},
		{[]string{"scenario", "save", out, "--data", dir, "--inspect", inspect, "--run", "run-nothing-here"}, "no delivery of run run-nothing-here is recorded (devhook deliveries list --run-id run-nothing-here)"},
		{[]string{"scenario", "play", "../../scenario/testdata/run.json", "--to", "127.0.0.1:9", "--expect", "sometimes"}, `--expect "sometimes" is not an expectation`},
	} {
		_, _, err := devhookCmd(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
}
