package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/storage"
)

// seedMore records, in data's store, a delivery received now for each
// status (0: no answer), and returns their ids.
func seedMore(t *testing.T, data string, statuses []int) []string {
	t.Helper()
	db, err := storage.Open(filepath.Join(data, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ids []string
	for _, status := range statuses {
		now := time.Now()
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: now, Method: http.MethodPost, Path: "/hook",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)}
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
		a := devhook.Attempt{Kind: devhook.AttemptForward, Target: "http://127.0.0.1:9/hook", StartedAt: now, Status: status}
		if _, err := db.AddAttempt(d.ID, a); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	return ids
}

// uniquePrefix is the shortest start of id that no other of all has.
func uniquePrefix(id string, all []string) string {
	for n := 1; n <= len(id); n++ {
		shared := false
		for _, o := range all {
			if o != id && strings.HasPrefix(o, id[:n]) {
				shared = true
				break
			}
		}
		if !shared {
			return id[:n]
		}
	}
	return id
}

// commonPrefix is the start all of ids share.
func commonPrefix(ids []string) string {
	p := ids[0]
	for _, id := range ids[1:] {
		for !strings.HasPrefix(id, p) {
			p = p[:len(p)-1]
		}
	}
	return p
}

// sseEvents reads the event names and data of an inspector's live stream
// into a channel.
func sseEvents(t *testing.T, inspectorURL string) <-chan [2]string {
	t.Helper()
	res, err := http.Get(inspectorURL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	out := make(chan [2]string, 64)
	go func() {
		defer close(out)
		r := bufio.NewReader(res.Body)
		var event string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				event = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				select {
				case out <- [2]string{event, line[len("data: "):]}:
				default:
				}
			}
		}
	}()
	return out
}

// nextDeleted waits for the next "deleted" event.
func nextDeleted(t *testing.T, events <-chan [2]string) devhook.Change {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the event stream ended")
			}
			if ev[0] != "deleted" {
				continue
			}
			var c devhook.Change
			if err := json.Unmarshal([]byte(ev[1]), &c); err != nil {
				t.Fatal(err)
			}
			return c
		case <-timeout:
			t.Fatal("no deleted event within 30s")
		}
	}
}

// With a listen running, the commands take a delivery id by a prefix only
// it has (with or without its dashes), say which deliveries an ambiguous
// prefix starts and where a missing one was looked for; delete deletes
// through the listen, whose inspector says so live; --all asks for --yes
// off a terminal; a kill of the listen right after a delete loses none of
// it.
func TestDeliveries_PrefixesAndDeleteThroughListen(t *testing.T) {
	const secret = "whsec_delete"
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	data := filepath.Join(t.TempDir(), "data")
	l := startProc(t, "listen", "--json", "--forward", recv.URL, "--secret", secret, "--data", data,
		"--inspect", "127.0.0.1:0", "--relay-addr", "127.0.0.1:0")
	ready := l.nextJSON(t, "ready")
	pub, insp := ready["public_url"].(string), ready["inspector_url"].(string)
	var ids []string
	for i := range 6 {
		if _, stderr, err := runDevhook(t, "send", pub+"/hook", "--secret", secret, "--run-id", fmt.Sprintf("run-%d", i)); err != nil {
			t.Fatalf("send: %v %s", err, stderr)
		}
		ids = append(ids, l.nextJSON(t, "delivery")["id"].(string))
	}

	// show, by a prefix only it has, as typed, without dashes, in upper case.
	p := uniquePrefix(ids[2], ids)
	for _, ref := range []string{p, strings.ReplaceAll(p, "-", ""), strings.ToUpper(p)} {
		out, stderr, err := runDevhook(t, "deliveries", "show", ref, "--data", data)
		if err != nil || !strings.Contains(out, "delivery  "+ids[2]) {
			t.Fatalf("deliveries show %s: %v %s\n%s", ref, err, stderr, out)
		}
	}
	// An ambiguous prefix names the deliveries it starts, with their times.
	common := commonPrefix(ids)
	_, stderr, err := runDevhook(t, "deliveries", "show", common, "--data", data)
	if err == nil || !strings.Contains(stderr, fmt.Sprintf("%q starts the ids of 6 deliveries", common)) ||
		!strings.Contains(stderr, "give more of the id") || !strings.Contains(stderr, ids[0]+"  ") || !strings.Contains(stderr, "POST /hook") {
		t.Fatalf("deliveries show of an ambiguous prefix: %v\n%s", err, stderr)
	}
	// A missing one says where it was looked for.
	_, stderr, err = runDevhook(t, "deliveries", "show", "ffff", "--data", data)
	if err == nil || !strings.Contains(stderr, `no delivery with id or prefix "ffff" in `+absDir(data)) {
		t.Fatalf("deliveries show of a missing prefix: %v\n%s", err, stderr)
	}
	// replay by prefix, through the listen.
	if out, stderr, err := runDevhook(t, "replay", uniquePrefix(ids[1], ids), "--data", data); err != nil || !strings.Contains(out, "attempt 2") {
		t.Fatalf("replay by prefix: %v %s\n%s", err, stderr, out)
	}
	if r := l.nextJSON(t, "replay"); r["id"] != ids[1] {
		t.Errorf("the replay was of %v, want %s", r["id"], ids[1])
	}

	// delete: through the listen, its inspector says so live.
	events := sseEvents(t, insp)
	_, stderr, err = runDevhook(t, "deliveries", "delete", uniquePrefix(ids[0], ids), "ffff", "--data", data)
	if err == nil || !strings.Contains(stderr, "nothing was deleted") {
		t.Fatalf("delete of a found and a missing id: %v\n%s", err, stderr)
	}
	out, stderr, err := runDevhook(t, "deliveries", "delete", uniquePrefix(ids[0], ids), strings.ReplaceAll(ids[3], "-", ""), "--data", data)
	if err != nil || out != "deleted "+ids[0]+"\ndeleted "+ids[3]+"\n" {
		t.Fatalf("deliveries delete: %v %s\n%q", err, stderr, out)
	}
	if c := nextDeleted(t, events); !slices.Equal(c.Deleted, []string{ids[0], ids[3]}) {
		t.Errorf("the deleted event: %+v", c)
	}
	var page struct{ Items []devhook.Summary }
	getJSON(t, insp+"/api/deliveries", &page)
	if len(page.Items) != 4 {
		t.Errorf("the inspector lists %d deliveries after the delete, want 4", len(page.Items))
	}
	// --all needs --yes when stdin is not a terminal.
	_, stderr, err = runDevhook(t, "deliveries", "delete", "--all", "--data", data)
	if err == nil || !strings.Contains(stderr, "pass --yes") {
		t.Fatalf("delete --all without --yes off a terminal: %v\n%s", err, stderr)
	}

	// Killed right after a delete: it holds.
	l.kill()
	out, stderr, err = runDevhook(t, "deliveries", "list", "--data", data)
	if err != nil {
		t.Fatalf("deliveries list after the kill: %v %s", err, stderr)
	}
	for i, id := range ids {
		if got, want := strings.Contains(out, id), i != 0 && i != 3; got != want {
			t.Errorf("after the kill, delivery %d listed: %v, want %v\n%s", i, got, want, out)
		}
	}
}

// Without a listen, the commands read and delete the data directory
// itself: by prefix, by age, by status, all.
func TestDeliveries_DeleteOffline(t *testing.T) {
	devhookBinary(t)
	data, old := seedStore(t, "whsec_offline", time.Now().Add(-3*time.Hour), 500)
	// Two more, recent, into the same store: one the receiver took, one
	// it did not answer.
	recent := seedMore(t, data, []int{200, 0})

	p := strings.ReplaceAll(uniquePrefix(old.ID, append(recent, old.ID)), "-", "")
	if out, stderr, err := runDevhook(t, "deliveries", "show", p, "--data", data); err != nil || !strings.Contains(out, old.ID) {
		t.Fatalf("show by a prefix without dashes: %v %s\n%s", err, stderr, out)
	}
	if out, stderr, err := runDevhook(t, "deliveries", "delete", "--before", "2h", "--yes", "--data", data, "--json"); err != nil || !strings.Contains(out, `"deleted": 1`) || !strings.Contains(out, old.ID) {
		t.Fatalf("delete --before 2h: %v %s\n%s", err, stderr, out)
	}
	if out, stderr, err := runDevhook(t, "deliveries", "delete", "--status", "none", "--yes", "--data", data); err != nil || out != "deleted "+recent[1]+"\n" {
		t.Fatalf("delete --status none: %v %s\n%q", err, stderr, out)
	}
	if out, _, err := runDevhook(t, "deliveries", "delete", "--status", "503", "--yes", "--data", data); err != nil || !strings.Contains(out, "no delivery matches") {
		t.Fatalf("delete --status 503: %v\n%s", err, out)
	}
	if _, stderr, err := runDevhook(t, "deliveries", "delete", recent[0], "--all", "--data", data); err == nil || !strings.Contains(stderr, "not both") {
		t.Fatalf("ids and --all: %v\n%s", err, stderr)
	}
	if _, stderr, err := runDevhook(t, "deliveries", "delete", "--data", data); err == nil || !strings.Contains(stderr, "which deliveries?") {
		t.Fatalf("delete with nothing: %v\n%s", err, stderr)
	}
	if out, stderr, err := runDevhook(t, "deliveries", "delete", "--all", "-y", "--data", data); err != nil || out != "deleted "+recent[0]+"\n" {
		t.Fatalf("delete --all: %v %s\n%q", err, stderr, out)
	}
	if out, _, err := runDevhook(t, "deliveries", "list", "--data", data); err != nil || !strings.Contains(out, "no deliveries recorded yet") {
		t.Fatalf("list after delete --all: %v\n%s", err, out)
	}
}

// A queued delivery owed to a receiver that is down, deleted: listen stops
// retrying it at once (its status says one fewer owed), and once the
// receiver is back it gets the other one, never the deleted one.
func TestDeliveries_DeleteOwed(t *testing.T) {
	devhookBinary(t)
	dir := t.TempDir()
	recvAddr := closedAddr(t) // the receiver is down
	_, relayURL := startRelay(t, filepath.Join(dir, "relay"))
	data := filepath.Join(dir, "data")
	public := openChannel(t, relayURL, data, recvAddr)
	sent := queueBodies(t, public, 2, 10, "owed")

	l := startProc(t, "listen", "--json", "--relay", relayURL, "--forward", recvAddr, "--secret", e2eSecret,
		"--inspect", "127.0.0.1:0", "--data", data)
	insp := l.nextJSON(t, "ready")["inspector_url"].(string)
	ev := l.collect()
	var h devhook.Health
	waitUntil(t, "both deliveries owed", func() bool { getJSON(t, insp+"/api/status", &h); return h.Owed == 2 })
	var page struct{ Items []devhook.Summary }
	getJSON(t, insp+"/api/deliveries", &page)
	if len(page.Items) != 2 {
		t.Fatalf("%d deliveries recorded, want 2", len(page.Items))
	}
	first := page.Items[1].ID // oldest: the one the other waits behind
	if out, stderr, err := runDevhook(t, "deliveries", "delete", first, "--data", data); err != nil {
		t.Fatalf("delete: %v %s\n%s", err, stderr, out)
	}
	getJSON(t, insp+"/api/status", &h)
	if h.Owed != 1 {
		t.Errorf("status after deleting an owed delivery: %+v, want 1 owed", h)
	}

	recv := &bodies{}
	ln, err := listenRetryE2E(recvAddr)
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewUnstartedServer(recv)
	rs.Listener.Close()
	rs.Listener = ln
	rs.Start()
	defer rs.Close()
	waitUntil(t, "the other delivered", func() bool { return recv.count(sent[1]) == 1 })
	waitUntil(t, "nothing owed", func() bool { getJSON(t, insp+"/api/status", &h); return h.Owed == 0 })
	if n := recv.count(sent[0]); n != 0 {
		t.Errorf("the deleted delivery reached the receiver %d times", n)
	}
	for _, m := range ev.of("retry") {
		if m["id"] == first {
			t.Errorf("the deleted delivery was retried: %v", m)
		}
	}
	if strings.Contains(l.stderr.String(), "could not record") || strings.Contains(l.stderr.String(), "recording failed") {
		t.Errorf("listen's stderr: %s", l.stderr)
	}
	l.stop(t, 30*time.Second)
}

// A selection cannot match a record that cannot be read (its list row
// damaged: a bit flipped in the file): delete keeps it, as evidence, and
// says so, naming it and how to remove it (before, it kept it without a
// word, and the list still showed it damaged); --json carries its id in
// kept_damaged. Deleted by its id, it goes.
func TestDeliveries_DeleteSaysWhatItKept(t *testing.T) {
	devhookBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(data, "deliveries.db")
	db, err := storage.Open(path, storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: time.Now().Add(-time.Hour), Method: http.MethodPost, Path: "/hook",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Verdict: devhook.Verdict{Result: devhook.VerdictUnchecked}}
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	damaged := ids[1]
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("summaries"))
		v := append([]byte{}, b.Get([]byte(damaged))...)
		if len(v) < 10 {
			return fmt.Errorf("list row of %s: %d bytes", damaged, len(v))
		}
		v[len(v)/2] ^= 0x10
		return b.Put([]byte(damaged), v)
	})
	if cerr := bdb.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}

	out, stderr, err := runDevhook(t, "deliveries", "delete", "--before", "30m", "--yes", "--data", data, "--inspect", closedAddr(t))
	if err != nil || out != "deleted "+ids[0]+"\ndeleted "+ids[2]+"\n" {
		t.Fatalf("delete --before 30m: %v %s\n%q", err, stderr, out)
	}
	for _, want := range []string{"kept 1 record that cannot be read", damaged, "stays as evidence", "devhook deliveries delete " + damaged} {
		if !strings.Contains(stderr, want) {
			t.Errorf("delete's stderr %q does not say %q", stderr, want)
		}
	}
	out, _, err = runDevhook(t, "deliveries", "delete", "--before", "30m", "--yes", "--json", "--data", data, "--inspect", closedAddr(t))
	var res struct {
		Deleted     int      `json:"deleted"`
		KeptDamaged []string `json:"kept_damaged"`
	}
	if jerr := json.Unmarshal([]byte(out), &res); err != nil || jerr != nil || res.Deleted != 0 || !slices.Equal(res.KeptDamaged, []string{damaged}) {
		t.Errorf("delete --json: %v %v %q, want nothing deleted and kept_damaged [%s]", err, jerr, out, damaged)
	}
	if out, stderr, err := runDevhook(t, "deliveries", "delete", damaged, "--data", data, "--inspect", closedAddr(t)); err != nil || out != "deleted "+damaged+"\n" {
		t.Errorf("delete %s: %v %s\n%q", damaged, err, stderr, out)
	}
	if out, stderr, err := runDevhook(t, "deliveries", "list", "--data", data, "--inspect", closedAddr(t)); err != nil || !strings.Contains(out, "no deliveries recorded yet") || stderr != "" {
		t.Errorf("list after: %v %q\n%s", err, stderr, out)
	}
}
