package inspector_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/inspector/inspectortest"
	"github.com/devhook/devhook/storage"
)

// recordFixtureN is how many deliveries storage's record fixtures hold;
// each has one record damaged, or written by a newer devhook.
const recordFixtureN = 30

// openRecordFixture opens a copy of storage/testdata/name as listen does,
// and serves an inspector over it.
func openRecordFixture(t *testing.T, name string) (*storage.DB, *httptest.Server) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "storage", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "deliveries.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s, err := inspector.New(inspector.Config{Store: db, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return db, srv
}

// A store with a damaged record (or one a newer devhook wrote): the list
// answers 200 with every other delivery, page by page, and says what it
// skipped and where, in a field and in a sentence with what to do.
func TestList_SkipsDamagedRecords(t *testing.T) {
	for _, c := range []struct{ fixture, says string }{
		{"db-record-damaged.db", "move it away"},
		{"db-record-truncated.db", "move it away"},
		{"db-record-newer.db", "upgrade devhook"},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			db, srv := openRecordFixture(t, c.fixture)
			res, err := http.Get(srv.URL + "/api/deliveries?limit=10")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET /api/deliveries: %s, want 200 with the intact deliveries", res.Status)
			}
			cl := &inspector.Client{BaseURL: srv.URL, HTTP: &http.Client{Timeout: 30 * time.Second}}
			var items []devhook.Summary
			var page inspector.ListPage
			for f := (devhook.Filter{Limit: 10}); ; f.Before = page.Next {
				page, err = cl.ListPage(context.Background(), f)
				if err != nil {
					t.Fatalf("list: %v", err)
				}
				items = append(items, page.Items...)
				if page.Next == "" {
					break
				}
			}
			if len(items) != recordFixtureN-1 {
				t.Errorf("listed %d deliveries, want the %d intact ones", len(items), recordFixtureN-1)
			}
			d := page.Damage
			if d == nil || d.File != db.Path() || d.Damaged+d.Newer < 1 || len(d.IDs) == 0 {
				t.Fatalf("damage = %+v, want the skipped record and the file", d)
			}
			if !strings.Contains(page.DamageNote, db.Path()) || !strings.Contains(page.DamageNote, c.says) {
				t.Errorf("damage_note %q, want it to name the file and say %q", page.DamageNote, c.says)
			}
		})
	}
}

// The page says that records were skipped, above the list of the others.
func TestInBrowser_DamagedRecords(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	db, srv := openRecordFixture(t, "db-record-damaged.db")
	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(srv.URL+"/#/"),
		inspectortest.WaitCount("#deliveries tbody tr", recordFixtureN-1),
		inspectortest.WaitText("#list-damage", "damaged record"),
		inspectortest.WaitText("#list-damage", db.Path()),
	)
	tab.Screenshot(t, "inspector-list-damaged")
}
