package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay"
)

// parkTestStore is the part of a relay store the tests fill.
type parkTestStore interface {
	Enqueue(channel string, d *devhook.Delivery) error
	Park(channel, id, reason string) error
	Queued(channel, after string, limit int) ([]*devhook.Delivery, error)
}

// parkSome queues three deliveries on two channels and parks two of them,
// as a relay does. It returns their ids: parked, queued, parked.
func parkSome(t *testing.T, s parkTestStore) []string {
	t.Helper()
	var ids []string
	for i, ch := range []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"} {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Method: "POST", Path: "/hook", RawQuery: "q=1",
			Header: http.Header{"Service-Signature": {"t=1,v1=abc"}}, Body: []byte("body" + strings.Repeat("!", i)),
			ReceivedAt: time.Now().UTC()}
		if err := s.Enqueue(ch, d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
		if i != 1 {
			if err := s.Park(ch, d.ID, "it cannot be sent to the agent: frame header too large"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

// runParked checks devhook relay parked list, show, requeue and drop on
// the store that where (--data DIR or --nats URL) names; queued reads a
// channel's queue afterwards.
func runParked(t *testing.T, ids []string, where []string, queued func(channel string) []string) {
	t.Helper()
	run := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := devhookCmd(t, append(append([]string{"relay", "parked"}, args...), where...)...)
		return out, err
	}
	out, err := run("list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CHANNEL", "REASON", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ids[0], "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", ids[2], "4 B", "6 B", "frame header too large"} {
		if !strings.Contains(out, want) {
			t.Errorf("list: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, ids[1]) {
		t.Errorf("list shows the delivery still queued:\n%s", out)
	}
	out, err = run("list", "--json", "--channel", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	var list []relay.Parked
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != ids[2] || list[0].Size != 6 {
		t.Fatalf("list --json --channel: %v\n%s", err, out)
	}

	out, err = run("show", ids[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{ids[2], "channel   bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "reason    it cannot be sent", "POST /hook?q=1", "Service-Signature: t=1,v1=abc", "body      6 B"} {
		if !strings.Contains(out, want) {
			t.Errorf("show: no %q in\n%s", want, out)
		}
	}
	if _, err := run("show", ids[1]); err == nil || !strings.Contains(err.Error(), "no parked delivery") {
		t.Errorf("show of a delivery not parked: %v", err)
	}

	// drop without --yes says what it would drop, and drops nothing.
	out, err = run("drop", ids[2])
	if err == nil || !strings.Contains(err.Error(), "--yes") || !strings.Contains(out, "would drop delivery "+ids[2]) {
		t.Fatalf("drop without --yes: %v\n%s", err, out)
	}
	if out, _ := run("list"); !strings.Contains(out, ids[2]) {
		t.Fatalf("drop without --yes dropped:\n%s", out)
	}
	if out, err := run("drop", ids[2], "--yes"); err != nil || !strings.Contains(out, "dropped delivery "+ids[2]) {
		t.Fatalf("drop --yes: %v\n%s", err, out)
	}

	if out, err := run("requeue", ids[0]); err != nil || !strings.Contains(out, "requeued delivery "+ids[0]+" on channel aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") {
		t.Fatalf("requeue: %v\n%s", err, out)
	}
	if out, err := run("list"); err != nil || !strings.Contains(out, "no parked deliveries") {
		t.Fatalf("list after requeue and drop: %v\n%s", err, out)
	}
	got := queued("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	if len(got) != 2 || !((got[0] == ids[0] && got[1] == ids[1]) || (got[0] == ids[1] && got[1] == ids[0])) {
		t.Fatalf("queue of the channel: %v, want %s and the requeued %s", got, ids[1], ids[0])
	}
	if got := queued("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"); len(got) != 0 {
		t.Fatalf("the dropped delivery is queued: %v", got)
	}
}

func queuedIDs(t *testing.T, s parkTestStore, channel string) []string {
	t.Helper()
	q, err := s.Queued(channel, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range q {
		ids = append(ids, d.ID)
	}
	return ids
}

func TestRelayParked_SingleRelay(t *testing.T) {
	dir := t.TempDir()
	db := mustRelayStore(t, dir)
	ids := parkSome(t, db)

	// A running relay holds relay.db: the command says to stop it.
	_, _, err := devhookCmd(t, "relay", "parked", "list", "--data", dir)
	if err == nil || !strings.Contains(err.Error(), "stop the relay") {
		t.Fatalf("list while the relay runs: %v", err)
	}
	db.Close()

	runParked(t, ids, []string{"--data", dir}, func(channel string) []string {
		db := mustRelayStore(t, dir)
		defer db.Close()
		return queuedIDs(t, db, channel)
	})

	if _, _, err := devhookCmd(t, "relay", "parked", "list", "--data", filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "no relay.db") {
		t.Fatalf("list of a directory without relay.db: %v", err)
	}
}

func TestRelayParked_Cluster(t *testing.T) {
	ns := natstest.Run(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := natsrelay.OpenStore(context.Background(), natsrelay.Config{Conn: nc, Prefix: "hooks"})
	if err != nil {
		t.Fatal(err)
	}
	ids := parkSome(t, s)
	runParked(t, ids, []string{"--nats", ns.ClientURL(), "--nats-prefix", "hooks"}, func(channel string) []string {
		return queuedIDs(t, s, channel)
	})
	if _, _, err := devhookCmd(t, "relay", "parked", "list", "--nats", ns.ClientURL()); err == nil || !strings.Contains(err.Error(), "--nats-prefix") {
		t.Fatalf("list under another prefix: %v", err)
	}
	if _, _, err := devhookCmd(t, "relay", "parked", "list", "--nats", ns.ClientURL(), "--data", t.TempDir()); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Fatalf("--nats with --data: %v", err)
	}
}

func mustRelayStore(t *testing.T, dir string) *boltrelay.Store {
	t.Helper()
	db, err := boltrelay.Open(filepath.Join(dir, "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return db
}
