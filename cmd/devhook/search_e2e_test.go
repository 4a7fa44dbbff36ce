package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// A search of the bodies (deliveries list --q) that meets a delivery whose
// body cannot be read lists it all the same, as it may hold the text, and
// says on stderr that its body could not be searched, why and what to do
// (--json: body_error); it never calls it a damaged record of the store,
// nor says to move the store away. The readable bodies are searched as
// before.
func TestList_SearchOfAnUnreadableBody(t *testing.T) {
	for _, c := range []struct {
		name, bodies string
		unread       []int
		say          string
	}{
		{name: "damaged body", bodies: "bodies-damaged-middle.body", unread: []int{bodyFixtureDamaged}, say: "deliveries delete " + bodyFixtureID(bodyFixtureDamaged)},
		{name: "missing body file", bodies: "", unread: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, say: "copied too"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, bodyFile := bodyFileData(t, "bodies-intact.body")
			if c.bodies == "" {
				if err := os.RemoveAll(filepath.Dir(bodyFile)); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := os.ReadFile(filepath.Join("..", "..", "storage", "testdata", c.bodies))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(bodyFile, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			inspect := closedAddr(t)
			for _, q := range []string{"EVENT_TYPE", "in no body"} {
				stdout, stderr, err := runDevhook(t, "deliveries", "list", "--q", q, "--data", data, "--inspect", inspect)
				if err != nil {
					t.Fatalf("list --q %q: %v\n%s", q, err, stderr)
				}
				for i := range bodyFixtureN {
					unread := slices.Contains(c.unread, i)
					if listed := strings.Contains(stdout, bodyFixtureID(i)); listed != (unread || q == "EVENT_TYPE") {
						t.Errorf("list --q %q: delivery %d listed %v (its body unreadable: %v):\n%s", q, i, listed, unread, stdout)
					}
				}
				if !containsAllText(stderr, "cannot be read", "could not search", "listed", c.say, bodyFixtureID(c.unread[len(c.unread)-1])) ||
					strings.Contains(stderr, "damaged record") || strings.Contains(stderr, "move it away") {
					t.Errorf("list --q %q: stderr %q; want it to say which bodies could not be searched and %q, not that a record is damaged", q, stderr, c.say)
				}
			}
			stdout, _, err := runDevhook(t, "deliveries", "list", "--q", "in no body", "--json", "--data", data, "--inspect", inspect)
			var rows []struct {
				ID        string `json:"id"`
				BodyError string `json:"body_error"`
			}
			if jerr := json.Unmarshal([]byte(stdout), &rows); jerr != nil || err != nil || len(rows) != len(c.unread) {
				t.Fatalf("list --json: %v, %v, %d rows; want %d:\n%s", jerr, err, len(rows), len(c.unread), stdout)
			}
			for _, r := range rows {
				if !strings.Contains(r.BodyError, c.say) {
					t.Errorf("list --json: %s has body_error %q, want it to say %q", r.ID, r.BodyError, c.say)
				}
			}
		})
	}
}

func containsAllText(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Through a running listen's inspector (a store open for long): a search
// lists a delivery whose body cannot be read (its body file cut short),
// saying so, and showing it does not make the lists after it say that a
// record of the store was skipped, nor to move the store away: the
// delivery is listed, and only its body cannot be read.
func TestList_UnreadableBodyThroughListen(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	db, err := storage.Open(filepath.Join(data, "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		body := []byte(`{"big":"` + strings.Repeat(strconv.Itoa(i), 4000) + `"}`)
		d := &devhook.Delivery{ID: uuid.Must(uuid.NewV7()).String(), ReceivedAt: time.Now(), Method: http.MethodPost, Path: "/hook",
			Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Verdict: devhook.Verdict{Result: devhook.VerdictUnchecked}}
		if _, err := db.PutDelivery(d); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The last body is past the cut; the first two read.
	if err := os.Truncate(filepath.Join(data, "deliveries.db.bodies", "00000001"), 8500); err != nil {
		t.Fatal(err)
	}
	broken := ids[2]

	p := startProc(t, "listen", "--json", "--forward", "http://127.0.0.1:1", "--secret", "whsec_x",
		"--inspect", "127.0.0.1:0", "--relay-addr", "127.0.0.1:0", "--data", data)
	for ready := false; !ready; {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("listen ended before it was ready; stderr: %s", p.stderr)
			}
			var m map[string]any
			ready = json.Unmarshal([]byte(line), &m) == nil && m["event"] == "ready"
		case <-time.After(60 * time.Second):
			t.Fatalf("listen not ready within 60s; stderr: %s", p.stderr)
		}
	}
	defer p.stop(t, 10*time.Second)

	stdout, stderr, err := runDevhook(t, "deliveries", "list", "--q", "1111", "--data", data)
	if err != nil || !strings.Contains(stdout, broken) || !strings.Contains(stdout, ids[1]) || strings.Contains(stdout, ids[0]) ||
		!containsAllText(stderr, "could not search", broken, "deliveries delete "+broken) {
		t.Errorf("list --q through listen: %v; stdout %q, stderr %q; want deliveries 1 and 2 listed, saying the body of 2 could not be searched and what to do", err, stdout, stderr)
	}
	if _, _, err := runDevhook(t, "deliveries", "show", broken, "--data", data); exitCodeOf(err) != 1 {
		t.Errorf("show %s through listen: %v, want exit status 1 (partial)", broken, err)
	}
	stdout, stderr, err = runDevhook(t, "deliveries", "list", "--data", data)
	if err != nil || !containsAllText(stdout, ids...) || strings.Contains(stderr, "skipped") || strings.Contains(stderr, "move it away") {
		t.Errorf("list through listen after the show: %v; stdout %q, stderr %q; want every delivery, and no record said skipped", err, stdout, stderr)
	}
}
