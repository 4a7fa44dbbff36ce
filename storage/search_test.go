package storage_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	bolt "go.etcd.io/bbolt"
)

// TestList_SearchOfAnUnreadableBody: a body search (Filter.Text) that
// meets a delivery whose body cannot be read (its body file missing or cut
// short, its value in bbolt failing its checksum) lists it all the same,
// on what can be read (its list row is whole), its BodyError saying that
// the body could not be read and what to do, as Delivery says it; it is
// neither left out silently nor counted as a damaged record of the file,
// whose advice (move the file away) would be wrong for it. The readable
// bodies are searched as before.
func TestList_SearchOfAnUnreadableBody(t *testing.T) {
	const n = 6 // even: a body in a body file; odd: in bbolt
	const flipped = 1
	for _, c := range []struct {
		name string
		edit func(t *testing.T, path string)
		say  string // what each unreadable body's error says to do
	}{
		{name: "body file missing", edit: func(t *testing.T, path string) {
			if err := os.RemoveAll(path + ".bodies"); err != nil {
				t.Fatal(err)
			}
		}, say: ".bodies beside it: a copy of the store needs that directory copied too"},
		{name: "body file cut short", edit: func(t *testing.T, path string) {
			file := filepath.Join(path+".bodies", "00000001")
			if err := os.Truncate(file, bodyFixtureLen*3/2); err != nil {
				t.Fatal(err)
			}
		}, say: "devhook deliveries delete "},
		{name: "body value damaged", edit: func(t *testing.T, path string) {
			editBolt(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("bodies"))
				v := append([]byte{}, b.Get([]byte(id(flipped)))...)
				v[10] ^= 0x10 // in "event_type"
				return b.Put([]byte(id(flipped)), v)
			})
		}, say: "devhook deliveries delete "},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "devhook.db")
			db := MustOpenPath(t, path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
			for i := range n {
				d := newDelivery(i)
				if i%2 == 0 {
					d = bigDelivery(i)
				}
				mustPut(t, db, d)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			c.edit(t, path)
			// What Delivery says of each body, the list says the same.
			unreadable := map[string]string{}
			ro := MustOpenPath(t, path, storage.Config{ReadOnly: true, Logf: t.Logf})
			for i := range n {
				d, err := ro.Delivery(id(i))
				if d == nil {
					t.Fatalf("delivery %d: %v", i, err)
				}
				if d.BodyError != "" {
					unreadable[d.ID] = d.BodyError
					if !strings.Contains(d.BodyError, c.say) || strings.Contains(d.BodyError, "move it away") {
						t.Errorf("delivery %d: %q, want it to say %q, not to move the file away", i, d.BodyError, c.say)
					}
				}
			}
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
			if len(unreadable) == 0 || len(unreadable) == n {
				t.Fatalf("%d unreadable bodies of %d: the edit did not do what the test needs", len(unreadable), n)
			}
			for _, readOnly := range []bool{true, false} {
				db := MustOpenPath(t, path, storage.Config{ReadOnly: readOnly, MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
				for _, text := range []string{"EVENT_type", "in no body"} {
					list, err := db.List(devhook.Filter{Text: text, Limit: 100})
					if err != nil {
						t.Fatalf("List(%q): %v", text, err)
					}
					got := map[string]string{}
					for _, s := range list {
						got[s.ID] = s.BodyError
					}
					for i := range n {
						why, listed := got[id(i)]
						want, unread := unreadable[id(i)]
						switch {
						case unread && !listed:
							t.Errorf("List(%q): delivery %d, whose body cannot be read, is left out", text, i)
						case unread && why != want:
							t.Errorf("List(%q): delivery %d listed with %q, want %q", text, i, why, want)
						case !unread && listed != (text == "EVENT_type"):
							t.Errorf("List(%q): delivery %d listed %v", text, i, listed)
						case !unread && why != "":
							t.Errorf("List(%q): delivery %d, whose body reads, has BodyError %q", text, i, why)
						}
					}
				}
				// Without a search, no body is read: every row, none marked.
				if list, err := db.List(devhook.Filter{Limit: 100}); err != nil || len(list) != n {
					t.Errorf("List: %d rows, %v; want %d", len(list), err, n)
				} else {
					for _, s := range list {
						if s.BodyError != "" {
							t.Errorf("List without a search: %s has BodyError %q", s.ID, s.BodyError)
						}
					}
				}
				if dmg := db.Damage(); dmg.Any() {
					t.Errorf("Damage: %+v (%s), want nothing: no record of the file is damaged", dmg, dmg.Summary())
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
