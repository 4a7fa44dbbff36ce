package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
)

// devhook relay compact: refused, saying what to do, while the relay holds
// relay.db; with it stopped, the file of a drained flood shrinks, the
// sizes are printed, and what was queued is still there.
func TestRelayCompact(t *testing.T) {
	dir := t.TempDir()
	db := mustRelayStore(t, dir)
	const ch = "cccccccccccccccccccccccccccccccc"
	if err := db.PutChannel(relay.Channel{ID: ch, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 100 {
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), Method: "POST", Path: "/", Body: bytes.Repeat([]byte("f"), 64<<10), ReceivedAt: time.Now()}
		if err := db.Enqueue(ch, d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	for _, id := range ids[1:] {
		if err := db.Dequeue(ch, id); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := devhookCmd(t, "relay", "compact", "--data", dir)
	if err == nil || !strings.Contains(err.Error(), "running devhook relay") || !strings.Contains(err.Error(), "stop the relay") {
		t.Fatalf("compact beside a running relay: %v", err)
	}
	db.Close()
	path := filepath.Join(dir, "relay.db")
	st, _ := os.Stat(path)
	before := st.Size()
	out, _, err := devhookCmd(t, "relay", "compact", "--data", dir)
	if err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(path)
	if st.Size() >= before/4 || !strings.Contains(out, "compacted "+path+": "+sizeText(before)+" → "+sizeText(st.Size())) {
		t.Fatalf("compact: %d → %d bytes, printed %q", before, st.Size(), out)
	}
	db = mustRelayStore(t, dir)
	defer db.Close()
	if q, err := db.Queued(ch, "", 0); err != nil || len(q) != 1 || q[0].ID != ids[0] {
		t.Fatalf("after compaction: %v %v", q, err)
	}
	if _, _, err := devhookCmd(t, "relay", "compact", "--data", t.TempDir()); err == nil || !strings.Contains(err.Error(), "no relay.db") {
		t.Fatalf("compact without relay.db: %v", err)
	}
}

// devhook relay refuses to start with an open token under 16 bytes, and
// with quotas that contradict each other, saying what to change.
func TestRelay_ShortOpenTokenRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--open-token", "short"}, "at least 16"},
		{[]string{"--queue-channel-max-bytes", "2000000000"}, "may not exceed --queue-max-bytes"},
		{[]string{"--queue-channel-max-bytes", "1000", "--max-body", "2000"}, "below --max-body"},
		{[]string{"--queue-max-age", "-1s"}, "may not be negative"},
	} {
		args := append([]string{"relay", "serve", "--addr", "127.0.0.1:0", "--data", t.TempDir()}, tc.args...)
		_, _, err := devhookCmd(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("devhook %s: %v, want an error saying %q", strings.Join(args, " "), err, tc.want)
		}
	}
}
