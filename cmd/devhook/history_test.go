package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
	"github.com/devhook/devhook/storage"
)

// devhookCmd runs one devhook command in this process.
func devhookCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := newRootCmd(&o, &e)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return o.String(), e.String(), err
}

// seedStore writes, in a new data directory, one delivery signed with
// secret at signedAt and an attempt with status (0: no answer). It returns
// the directory and the delivery.
func seedStore(t *testing.T, secret string, signedAt time.Time, status int) (string, *devhook.Delivery) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	db, err := storage.Open(filepath.Join(dir, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"event_type":"run.status","data":{"run_id":"run-seed","status_v2":"succeeded"}}`)
	d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: signedAt, Method: http.MethodPost, Path: "/hook",
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   body, Event: devhook.ParseEvent(body), Verdict: devhook.Verdict{Result: devhook.VerdictOK}}
	d.Header.Set(devhook.SignatureHeader, signature.Sign(secret, signedAt, body))
	if _, err := db.PutDelivery(d); err != nil {
		t.Fatal(err)
	}
	a := devhook.Attempt{Kind: devhook.AttemptForward, Target: "http://127.0.0.1:9/hook", StartedAt: signedAt, Status: status}
	if status == 0 {
		a.Error = "connection refused: is your receiver running at http://127.0.0.1:9/hook?"
	}
	if _, err := db.AddAttempt(d.ID, a); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, d
}

// An explicit --data means that directory, even while another listen owns
// the inspector address; reading commands create nothing, and an empty
// answer says whether the directory is empty or the filter matched nothing.
func TestDeliveries_ExplicitData(t *testing.T) {
	const secret = "whsec_history"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	inspect := closedAddr(t)
	running := t.TempDir()
	lr := startListen(t, "--forward", recv.URL, "--secret", secret, "--data", running, "--inspect", inspect)
	pub := lr.next(t, "ready")["public_url"].(string)
	if _, out, err := devhookCmd(t, "send", pub+"/hook", "--secret", secret); err != nil {
		t.Fatalf("send: %v %s", err, out)
	}
	liveID := lr.next(t, "delivery")["id"].(string)

	other, seeded := seedStore(t, secret, time.Now(), 0)

	out, stderr, err := devhookCmd(t, "deliveries", "list", "--data", other, "--inspect", inspect)
	if err != nil || !strings.Contains(out, seeded.ID) || strings.Contains(out, liveID) {
		t.Fatalf("deliveries list --data %s with another listen running: %v %s\n%s", other, err, stderr, out)
	}
	if !strings.Contains(out, " none ") {
		t.Errorf("a delivery without an answer is not listed with status none:\n%s", out)
	}
	out, _, err = devhookCmd(t, "deliveries", "show", seeded.ID, "--data", other, "--inspect", inspect)
	if err != nil || !strings.Contains(out, seeded.ID) {
		t.Fatalf("deliveries show --data %s: %v\n%s", other, err, out)
	}
	if !strings.Contains(out, "run       run-seed\n          status_v2 succeeded is the run's state (the legacy status field is absent)") {
		t.Errorf("deliveries show does not explain status_v2:\n%s", out)
	}
	// The directory the running listen records in goes through it (its
	// store is locked: opening it would fail).
	out, stderr, err = devhookCmd(t, "deliveries", "list", "--data", running, "--inspect", inspect)
	if err != nil || !strings.Contains(out, liveID) {
		t.Fatalf("deliveries list --data %s of the running listen: %v %s\n%s", running, err, stderr, out)
	}

	// What the terminal says is what the filter finds: none, not 502.
	out, _, err = devhookCmd(t, "deliveries", "list", "--data", other, "--inspect", inspect, "--status", "none")
	if err != nil || !strings.Contains(out, seeded.ID) {
		t.Errorf("--status none: %v\n%s", err, out)
	}
	out, _, err = devhookCmd(t, "deliveries", "list", "--data", other, "--inspect", inspect, "--status", "502")
	if err != nil || strings.TrimSpace(out) != "no delivery matches --status 502" {
		t.Errorf("--status 502: %v %q", err, out)
	}
	if _, _, err := devhookCmd(t, "deliveries", "list", "--data", other, "--status", "nope"); err == nil || !strings.Contains(err.Error(), "none") {
		t.Errorf("--status nope: %v", err)
	}

	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	for _, args := range [][]string{{"deliveries", "list"}, {"deliveries", "show", seeded.ID}, {"replay", seeded.ID}} {
		_, _, err := devhookCmd(t, append(args, "--data", missing, "--inspect", inspect)...)
		if err == nil || !strings.Contains(err.Error(), "no devhook data in "+missing) {
			t.Errorf("%s --data %s: %v, want no devhook data", strings.Join(args, " "), missing, err)
		}
	}
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Errorf("a reading command created %s (%v)", filepath.Dir(missing), err)
	}
	empty := t.TempDir()
	if db, err := storage.Open(filepath.Join(empty, "deliveries.db"), storage.Config{}); err != nil {
		t.Fatal(err)
	} else {
		db.Close()
	}
	if out, _, err := devhookCmd(t, "deliveries", "list", "--data", empty, "--inspect", inspect); err != nil || strings.TrimSpace(out) != "no deliveries recorded yet" {
		t.Errorf("an empty store: %v %q", err, out)
	}

	// A replay through the running listen shows in its output.
	out, stderr, err = devhookCmd(t, "replay", liveID, "--inspect", inspect)
	if err != nil || !strings.Contains(out, "200") {
		t.Fatalf("replay through the running listen: %v %s\n%s", err, stderr, out)
	}
	if r := lr.next(t, "replay"); r["id"] != liveID || r["status"] != float64(200) || r["resigned"] != true {
		t.Errorf("listen's replay line: %v", r)
	}
}

func TestReplay_ExitStatusAndHints(t *testing.T) {
	const secret = "whsec_replay"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	dir, d := seedStore(t, secret, time.Now().Add(-10*time.Minute), 200)
	inspect := closedAddr(t)

	// As is, the 10-minute-old signature is refused: exit 1, and the
	// error says to re-sign.
	out, stderr, err := devhookCmd(t, "replay", d.ID, "--data", dir, "--inspect", inspect, "--to", recv.URL)
	if err == nil || !strings.Contains(err.Error(), "answered 401") || !strings.Contains(err.Error(), "--resign") {
		t.Errorf("as-is replay of an old delivery: err %v, want answered 401 and --resign\n%s", err, out)
	}
	if !strings.Contains(stderr, "sending the original signature as is") {
		t.Errorf("offline replay without a secret does not say it sends the original signature: %q", stderr)
	}
	if !strings.Contains(out, recv.URL+"/hook") {
		t.Errorf("--to does not append the delivery's path: %s", out)
	}
	out, _, err = devhookCmd(t, "replay", d.ID, "--data", dir, "--inspect", inspect, "--to", recv.URL, "--secret", secret)
	if err != nil || !strings.Contains(out, "200  (re-signed)") {
		t.Errorf("re-signed replay: %v\n%s", err, out)
	}
	recv.Close()
	if _, _, err := devhookCmd(t, "replay", d.ID, "--data", dir, "--inspect", inspect, "--to", recv.URL, "--secret", secret); err == nil || !strings.Contains(err.Error(), "no status") {
		t.Errorf("replay to a receiver that is down: %v, want an error", err)
	}
}

// A listen records in the directory but its inspector is not on --inspect:
// its store is locked, and the error says to pass the inspector's address.
func TestDeliveries_LockedStoreSaysInspect(t *testing.T) {
	other, _ := seedStore(t, "whsec_locked", time.Now(), 0)
	db, err := storage.Open(filepath.Join(other, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, _, err = devhookCmd(t, "deliveries", "list", "--data", other, "--inspect", closedAddr(t))
	if err == nil || !errors.Is(err, storage.ErrLocked) || !strings.Contains(err.Error(), "--inspect") {
		t.Fatalf("deliveries list of a locked store: %v; want the lock named and --inspect suggested", err)
	}
	// One short line: the directory, the lock, the fix.
	if msg := strings.Replace(err.Error(), other, "DIR", 1); len(msg) > 140 || strings.Contains(msg, "\n") {
		t.Errorf("the locked-store error is %d characters, want one short line: %s", len(msg), msg)
	}
}

// --limit has one bound, the store's, said in its help, whether the list
// is read through the running listen (whose inspector gives 500 a page,
// and refused more with an error naming no flag) or from the store (which
// made 0, a negative number or more than 1000 something else, silently):
// beyond it, an error names the flag; within it, through a listen, the
// pages are read one after the other.
func TestDeliveriesList_LimitBound(t *testing.T) {
	recv := httptest.NewServer(receiver.New(receiver.Config{}))
	defer recv.Close()
	const seeded = 700
	running, stored := seedDeliveries(t, seeded), seedDeliveries(t, seeded)
	inspect := closedAddr(t)
	lr := startListen(t, "--forward", recv.URL, "--data", running, "--inspect", inspect)
	lr.next(t, "ready")

	out, _, err := devhookCmd(t, "deliveries", "list", "--help")
	if err != nil || !strings.Contains(out, "how many, at most 1000 (older ones with --before)") {
		t.Errorf("the help does not say the bound: %v\n%s", err, out)
	}
	for _, data := range []string{running, stored} {
		for _, n := range []string{"1001", "5000", "0", "-3"} {
			_, _, err := devhookCmd(t, "deliveries", "list", "--data", data, "--inspect", inspect, "--limit", n)
			if want := "--limit " + n + ": give a number from 1 to 1000 (older deliveries page by page: --before the last ID listed)"; err == nil || err.Error() != want {
				t.Errorf("--data %s --limit %s: %v, want %q", data, n, err, want)
			}
		}
		for n, want := range map[string]int{"600": 600, "1000": seeded, "3": 3} {
			out, stderr, err := devhookCmd(t, "deliveries", "list", "--data", data, "--inspect", inspect, "--limit", n, "--json")
			var items []devhook.Summary
			if err == nil {
				err = json.Unmarshal([]byte(out), &items)
			}
			ids := map[string]bool{}
			for _, s := range items {
				ids[s.ID] = true
			}
			if err != nil || len(items) != want || len(ids) != want {
				t.Errorf("--data %s --limit %s: %d deliveries (%d ids), %v %s; want %d", data, n, len(items), len(ids), err, stderr, want)
			}
		}
	}
}

// seedDeliveries writes n deliveries in a new data directory.
func seedDeliveries(t *testing.T, n int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	db, err := storage.Open(filepath.Join(dir, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: time.Now(), Method: http.MethodPost, Path: "/hook",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Event: devhook.ParseEvent(body)}
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
