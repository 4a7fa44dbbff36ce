package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/internal/fulldisk"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/storage"
)

// Issue 36: listen started with its --data on a really full file system
// (a tmpfs filled to its last byte) starts: every file of its start
// (channels.json for a new channel, webhooks.json of --register,
// listen.json) waits for room instead of stopping it, and is said once.
// The relay, on another disk, queues what is sent meanwhile (202); once
// the filler file is deleted, the files are written and the queued
// deliveries reach the receiver, without a restart. A disk that fills
// while connected answers live deliveries 503 (a known limit, kept) and
// takes them again once there is room.
func TestListen_StartsOnAReallyFullDisk(t *testing.T) {
	bin := devhookBinary(t)
	disk := fulldisk.Mount(t, "4m")
	base, c := newTestService(t)
	_, relayURL := relayProc(t) // its own directory, on another disk
	recv := &bodies{}
	rs := httptest.NewServer(recv)
	defer rs.Close()

	// The delivery store of an earlier start; no channel, no webhook yet.
	data := disk.Dir
	db, err := storage.Open(filepath.Join(data, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	disk.Fill()

	l := startCmd(t, bin, "listen", "--json", "--relay", relayURL, "--forward", rs.URL, "--data", data,
		"--inspect", "127.0.0.1:0", "--register", "--endpoint", base, "--api-key", svcKey)
	ev := l.collect()
	var ready map[string]any
	waitUntil(t, "the ready line on a full disk", func() bool {
		select {
		case <-l.done:
			t.Fatalf("listen on a full disk ended: %v; stderr: %s", l.err, l.stderr)
		default:
		}
		r := ev.of("ready")
		if len(r) > 0 {
			ready = r[0]
		}
		return ready != nil
	})
	public, _ := ready["public_url"].(string)
	webhook, _ := ready["webhook"].(string)
	logs := func() string {
		var s []string
		for _, m := range ev.of("log") {
			s = append(s, fmt.Sprint(m["message"]))
		}
		return strings.Join(s, "\n")
	}
	defer func() {
		if t.Failed() {
			t.Logf("listen's output:\n%s\nstderr: %s", ev, l.stderr)
		}
	}()
	if public == "" || !strings.HasPrefix(webhook, "devhook-") {
		t.Fatalf("ready line %v", ready)
	}
	if ready["connected"] != false {
		t.Errorf("ready line on a full disk has connected %v, want false: listen is not connected until it can record", ready["connected"])
	}
	waitUntil(t, "listen to say it cannot record", func() bool { return strings.Contains(logs(), "cannot record deliveries") })
	for _, f := range []string{"channels.json", "webhooks.json", "listen.json"} {
		if n := strings.Count(logs(), "cannot write "+f+" ("); n != 1 {
			t.Errorf("said %d times that %s waits for room, want once", n, f)
		}
		if _, err := os.Stat(filepath.Join(data, f)); err == nil {
			t.Errorf("%s written on a full disk", f)
		}
	}

	// Sent while the disk is full: the relay queues them.
	var want []string
	for i := range 3 {
		body := fmt.Sprintf(`{"while_full":%d}`, i)
		if st, _, b := post(t, public+"/hook", []byte(body)); st != http.StatusAccepted {
			t.Fatalf("delivery %d while the disk is full: %d %s, want 202", i, st, b)
		}
		want = append(want, body)
	}

	// Room again: the files are written, the queue reaches the receiver.
	disk.Free()
	waitUntil(t, "the queued deliveries at the receiver", func() bool { return recv.total() >= len(want) })
	if c := ev.of("connected"); len(c) != 1 {
		t.Errorf("%d connected lines once there was room, want 1", len(c))
	}
	for i, body := range want {
		if n := recv.count(body); n != 1 {
			t.Errorf("queued delivery %d reached the receiver %d times, want 1", i, n)
		}
	}
	waitUntil(t, "the start's files written", func() bool {
		for _, f := range []string{"channels.json", "webhooks.json", "listen.json"} {
			if !strings.Contains(logs(), "wrote "+f+", which waited") {
				return false
			}
		}
		return true
	})
	if r, err := running.Read(data); err != nil || r.PublicURL != public || r.Webhook != webhook {
		t.Errorf("listen.json once there was room: %+v %v", r, err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "channels.json")); err != nil || !strings.Contains(string(b), strings.TrimPrefix(public[strings.LastIndex(public, "/"):], "/")) {
		t.Errorf("channels.json once there was room: %s %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "webhooks.json")); err != nil || !strings.Contains(string(b), webhook) {
		t.Errorf("webhooks.json once there was room: %s %v", b, err)
	}

	// Full while connected: live deliveries are recorded while the
	// journal's last pages hold them, then refused (503), never
	// forwarded unrecorded; taken again once there is room.
	disk.Fill()
	refused := ""
	for i := 0; refused == "" && i < 400; i++ { // 400 × 16 KiB: four times the disk
		body := fmt.Sprintf(`{"live_full":%d,"pad":"%s"}`, i, strings.Repeat("f", 16<<10))
		switch st, _, _ := post(t, public+"/hook", []byte(body)); st {
		case http.StatusServiceUnavailable:
			refused = body
		case http.StatusOK:
		default:
			t.Fatalf("live delivery %d on a disk full while connected: %d", i, st)
		}
	}
	if refused == "" {
		t.Fatal("no live delivery refused on a disk full while connected")
	}
	disk.Free()
	waitUntil(t, "a live delivery answered 200 again", func() bool {
		st, _, _ := post(t, public+"/hook", []byte(`{"live":"room"}`))
		return st == http.StatusOK
	})
	if recv.count(refused) != 0 {
		t.Error("a live delivery refused 503 reached the receiver")
	}

	// Stopped: the webhook is deleted and both its entry and listen.json
	// go.
	l.stop(t, 20*time.Second)
	if _, err := c.GetWebhook(t.Context(), webhook); !cloud.IsNotFound(err) {
		t.Errorf("webhook %s after listen stopped: %v", webhook, err)
	}
	if _, err := running.Read(data); err == nil {
		t.Error("listen.json left after listen stopped")
	}
}

// A listen whose ready block comes before it can record (its --data on a
// really full disk, its stores made before) says so in that block, rather
// than "devhook is listening": with the built-in relay, whose queue is on
// the same full disk, a sender gets 503, as the block says; once there is
// room, listen says that it connected.
func TestListen_ReadyBlockOnAFullDiskSaysNotConnected(t *testing.T) {
	bin := devhookBinary(t)
	disk := fulldisk.Mount(t, "4m")
	args := []string{"listen", "--relay-addr", "127.0.0.1:0", "--inspect", "off", "--forward", "127.0.0.1:9", "--data", disk.Dir}
	first := startCmd(t, bin, args...) // its stores, made with room
	first.nextLine(t, "devhook is listening")
	first.stop(t, 20*time.Second)
	disk.Fill()

	l := startCmd(t, bin, args...)
	var block []string
	for line := l.nextLine(t, ""); line != ""; line = l.nextLine(t, "") {
		block = append(block, line)
	}
	text := strings.Join(block, "\n")
	defer func() {
		if t.Failed() {
			t.Logf("ready block:\n%s\nstderr: %s", text, l.stderr)
		}
	}()
	if !strings.HasPrefix(text, "devhook is not connected yet: it cannot record deliveries") {
		t.Errorf("ready block on a full disk does not say that listen is not connected yet")
	}
	if !strings.Contains(text, "answers 503") {
		t.Errorf("ready block on a full disk does not say what a sender gets from the built-in relay")
	}
	public := ""
	for _, line := range block {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "public" {
			public = f[2]
		}
	}
	if public == "" {
		t.Fatal("no public URL in the ready block")
	}
	if st, _, b := post(t, public+"/hook", []byte(`{"while_full":1}`)); st != http.StatusServiceUnavailable {
		t.Errorf("delivery to the built-in relay on a full disk: %d %s, want 503", st, b)
	}
	disk.Free()
	waitUntil(t, "listen to say it connected", func() bool { return strings.Contains(l.stderr.String(), "connected after waiting ") })
	l.stop(t, 20*time.Second)
}

// A listen whose ready block comes before it can record (a really full
// disk) while its relay, another process, is down too says so: the relay
// did not answer the check of its channel, so the block does not promise
// that the relay queues what is sent (a sender meanwhile cannot reach it
// at all), as it once did.
//
// Once there is room, and then the relay is up again, listen says that it
// connected in one line that parts the wait: so long to record, so long
// for the relay, which failed tries (not a line of those tries and
// another that put the whole wait on recording).
func TestListen_ReadyBlockOnAFullDiskWithTheRelayDown(t *testing.T) {
	bin := devhookBinary(t)
	disk := fulldisk.Mount(t, "4m")
	relayData := t.TempDir()
	relayArgs := []string{"relay", "serve", "--data", relayData, "--addr"}
	r := startProc(t, append(relayArgs, "127.0.0.1:0")...)
	relayURL := strings.TrimPrefix(r.nextLine(t, "devhook relay on "), "devhook relay on ")
	args := []string{"listen", "--relay", relayURL, "--inspect", "off", "--forward", "127.0.0.1:9", "--data", disk.Dir}
	first := startCmd(t, bin, args...) // its stores and channel, made with room
	first.nextLine(t, "devhook is listening")
	first.stop(t, 20*time.Second)
	r.kill()
	disk.Fill()

	l := startCmd(t, bin, args...)
	defer l.stop(t, 20*time.Second)
	var block []string
	for line := l.nextLine(t, ""); line != ""; line = l.nextLine(t, "") {
		block = append(block, line)
	}
	text := strings.Join(block, "\n")
	if !strings.HasPrefix(text, "devhook is not connected yet") ||
		!strings.Contains(text, "nor did the relay answer (nothing accepts connections") ||
		strings.Contains(text, "; the relay queues what is sent meanwhile") {
		t.Errorf("ready block on a full disk with the relay down does not say that the relay did not answer:\n%s\nstderr: %s", text, l.stderr)
	}

	disk.Free()
	waitUntil(t, "listen to try the relay, once it can record", func() bool { return strings.Contains(l.stderr.String(), "cannot reach the relay") })
	r = startProc(t, append(relayArgs, strings.TrimPrefix(relayURL, "http://"))...)
	r.nextLine(t, "devhook relay on ")
	waitUntil(t, "listen to say it connected", func() bool { return strings.Contains(l.stderr.String(), "connected after") })
	var said []string
	for _, line := range strings.Split(l.stderr.String(), "\n") {
		if strings.Contains(line, "connected") && !strings.Contains(line, "not connected") {
			said = append(said, line)
		}
	}
	if len(said) != 1 || !regexp.MustCompile(`^connected after waiting [\dms.]+: ([\dms.]+ to record, )?[\dms.]+ for the relay \(\d+ failed tr(y|ies)\)`).MatchString(said[0]) {
		t.Errorf("listen said of its connection %q, want one line parting the wait to record from the wait for the relay; stderr:\n%s", said, l.stderr)
	}
}
