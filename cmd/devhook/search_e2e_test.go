package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
