package boltrelay_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
)

// fullDiskDirEnv makes the test binary run TestStore_RealFullDisk's
// scenario in the directory it names: a small tmpfs of its own.
const fullDiskDirEnv = "DEVHOOK_BOLTRELAY_FULLDISK_DIR"

// Issue 36: relay.db on a filesystem that is really full (a 4 MiB tmpfs,
// in a private mount namespace of a child process: it needs root and
// unshare; skipped otherwise, and failed under CI). Deliveries are queued
// until the disk is full (503 and its reason), then the rest of the disk
// is filled by another file. An agent then connects: every queued
// delivery reaches it once, and their removals succeed although the disk
// is full (bbolt writes a removal's pages into pages of relay.db it freed
// before, none new), or else are tried again by the backoff, not in a
// loop, and succeed once there is room; the queue ends empty, each
// removal counted once. Then the room removals freed in relay.db takes a
// new delivery (202), the disk still full.
func TestStore_RealFullDisk(t *testing.T) {
	if dir := os.Getenv(fullDiskDirEnv); dir != "" {
		realFullDisk(t, dir)
		return
	}
	skip := func(why string) {
		if os.Getenv("CI") != "" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	if os.Getuid() != 0 {
		skip("a full disk is a tmpfs mounted by root: run as root (CI does)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		skip("a full disk is a tmpfs in a private mount namespace: unshare is needed")
	}
	dir := t.TempDir()
	cmd := exec.Command("unshare", "-m", "sh", "-c",
		`mount -t tmpfs -o size=4m tmpfs "$0" || exit 77; exec "$1" -test.run='^TestStore_RealFullDisk$' -test.v -test.timeout=5m`, dir, os.Args[0])
	cmd.Env = append(os.Environ(), fullDiskDirEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 77 {
		skip("cannot mount a tmpfs here: " + string(out))
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestStore_RealFullDisk")) {
		t.Fatalf("child did not run the scenario:\n%s", out)
	}
	t.Logf("child:\n%s", out)
}

func realFullDisk(t *testing.T, dir string) {
	s, err := boltrelay.Open(filepath.Join(dir, "relay.db"), boltrelay.Config{Quota: relay.Quota{ChannelBytes: 1 << 30, TotalBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv, err := relay.NewServer(relay.Config{Store: s, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); srv.Close() }()
	cr, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	url := hs.URL + "/c/" + cr.Channel + "/hook"

	body := bytes.Repeat([]byte("q"), 16<<10)
	var queued []string
	for {
		code, id, answer := postTo(t, url, body)
		if code == http.StatusAccepted {
			queued = append(queued, id)
			continue
		}
		if code != http.StatusServiceUnavailable || !bytes.Contains([]byte(answer), []byte("storage is full")) {
			t.Fatalf("after %d queued: %d %q, want 503: the storage is full", len(queued), code, answer)
		}
		break
	}
	if len(queued) < 20 {
		t.Fatalf("%d deliveries of 16 KiB queued on 4 MiB", len(queued))
	}
	fillDisk(t, dir)
	t.Logf("%d deliveries queued, then the disk full", len(queued))

	got := map[string]int{}
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			d, err := conn.Receive()
			if err != nil {
				return
			}
			mu.Lock()
			got[d.ID]++
			mu.Unlock()
			conn.Respond(d.ID, http.StatusOK, nil, []byte("ok"))
			if d.Queued {
				conn.Ack(d.ID)
			}
		}
	}()
	if code, _, answer := postTo(t, url, []byte("live")); code != http.StatusOK || answer != "ok" {
		t.Fatalf("a live delivery on a full disk: %d %q, want the agent's answer", code, answer)
	}
	removed := func() bool { n, err := s.QueueLen(cr.Channel); return err == nil && n == 0 }
	waitFull(t, 20*time.Second, removed)
	errs := metricOf(t, hs.URL, "devhook_relay_queue_remove_errors_total")
	t.Logf("on the full disk: queue empty %v, removals that failed %s", removed(), errs)
	if !removed() {
		// Removals need room here: they back off until there is some.
		os.Remove(filepath.Join(dir, "filler"))
		waitFull(t, 30*time.Second, removed)
		if !removed() {
			t.Fatalf("the queue is not empty 30 s after the disk has room; removals that failed: %s", metricOf(t, hs.URL, "devhook_relay_queue_remove_errors_total"))
		}
	}
	waitFull(t, 20*time.Second, func() bool {
		return metricOf(t, hs.URL, "devhook_relay_queue_acked_total") == strconv.Itoa(len(queued))
	})
	if v := metricOf(t, hs.URL, "devhook_relay_queue_acked_total"); v != strconv.Itoa(len(queued)) {
		t.Fatalf("devhook_relay_queue_acked_total = %s, want %d", v, len(queued))
	}
	mu.Lock()
	for _, id := range queued {
		if got[id] != 1 {
			t.Errorf("delivery %s reached the agent %d times, want once", id, got[id])
		}
	}
	mu.Unlock()
	conn.Close()
	<-done

	// What the removals freed in relay.db takes new deliveries.
	waitFull(t, 20*time.Second, func() bool { return metricOf(t, hs.URL, "devhook_relay_agents_connected") == "0" })
	if code, _, answer := postTo(t, url, body); code != http.StatusAccepted {
		t.Fatalf("with the queue drained, the disk still full: %d %q, want 202 (relay.db's free pages)", code, answer)
	}
}

// fillDisk fills what is left of the filesystem of dir with a file.
func fillDisk(t *testing.T, dir string) {
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return
		}
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// postTo posts body and returns the status, the delivery's id and the
// answer's body.
func postTo(t *testing.T, url string, body []byte) (int, string, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Devhook-Delivery"), string(b)
}

// metricOf returns a counter or gauge of the relay's /metrics.
func metricOf(t *testing.T, url, name string) string {
	t.Helper()
	_, _, text := getText(t, url+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

func getText(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// waitFull polls cond for up to limit; the caller checks it again.
func waitFull(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}
