package inspector_test

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector/inspectortest"
)

// TestInBrowser_Delete: deliveries deleted through the API leave the open
// page at once, without a reload: the list's rows, the delivery on screen;
// the page's own Delete button deletes the selected rows; a deletion too
// large to name draws the list again.
func TestInBrowser_Delete(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	f := newFixture(t, fixtureOptions{})
	items := seedList(t, f, 7)
	ids := make([]string, len(items))
	for i, s := range items {
		ids[i] = s.ID
	}
	row := func(id string) string { return `#deliveries tbody tr[data-id="` + id + `"]` }
	rows := "#deliveries tbody tr"
	del := func(path string) {
		t.Helper()
		if st, body := f.do(t, http.MethodDelete, path, nil); st != http.StatusOK {
			t.Fatalf("DELETE %s: %d %s", path, st, body)
		}
	}
	same := func(tab *inspectortest.Tab) {
		t.Helper()
		if s := inspectortest.Eval[string](t, tab, `window.__sameDocument || "reloaded"`); s != "yes" {
			t.Fatalf("the page reloaded: %s", s)
		}
	}

	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/"),
		inspectortest.WaitJS(`document.body.dataset.live === "1"`, "the live stream to connect"),
		inspectortest.WaitCount(rows, 7),
	)
	inspectortest.Eval[bool](t, tab, `(window.__sameDocument = "yes", true)`)

	t.Run("a delete by the API removes the row live", func(t *testing.T) {
		del("/api/deliveries/" + ids[2][:30])
		tab.Run(t,
			inspectortest.WaitCount(rows, 6),
			inspectortest.WaitJS(`document.querySelector(`+jsq(row(ids[2]))+`) === null`, "the deleted row to go"),
			inspectortest.WaitText(".more", "6 shown"),
		)
		same(tab)
	})

	t.Run("the Delete button deletes the selected rows", func(t *testing.T) {
		tab.Run(t,
			inspectortest.Click(row(ids[0])+" input.pick-box"),
			inspectortest.Click(row(ids[1])+" input.pick-box"),
			inspectortest.WaitText("#selection-count", "2 deliveries selected"),
			inspectortest.Click("#delete-selection"),
			inspectortest.WaitText("#delete-selection", "Delete 2? Click again"),
		)
		if n, _ := f.DB.Count(); n != 6 {
			t.Fatalf("the first click deleted: %d left", n)
		}
		tab.Run(t,
			inspectortest.Click("#delete-selection"),
			inspectortest.WaitCount(rows, 4),
			inspectortest.WaitJS(`document.querySelector("#selection-bar").hidden`, "the selection bar to hide"),
		)
		for _, id := range ids[:2] {
			if _, err := f.DB.Delivery(id); devhook.ErrorCode(err) != devhook.ENOTFOUND {
				t.Errorf("delivery %s after the page deleted it: %v", id, err)
			}
		}
		tab.Screenshot(t, "inspector-deleted-rows")
		same(tab)
	})

	t.Run("the delivery on screen says it was deleted", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/d/"+ids[4]),
			inspectortest.WaitText("#delivery-id", ids[4]),
		)
		del("/api/deliveries?id=" + ids[4])
		tab.Run(t, inspectortest.WaitText("#deleted-note", "was deleted"))
		same(tab)
	})

	t.Run("a deletion too large to name redraws the list", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(f.HTTP.URL+"/#/"),
			inspectortest.WaitCount(rows, 3),
		)
		if _, err := f.DB.Delete([]string{ids[5]}); err != nil {
			t.Fatal(err)
		}
		f.Server.Publish(devhook.Change{Kind: devhook.ChangeDeleted, Reload: true})
		tab.Run(t, inspectortest.WaitCount(rows, 2))
	})

	t.Run("deleting all empties the list", func(t *testing.T) {
		del("/api/deliveries")
		tab.Run(t,
			inspectortest.WaitCount(rows, 0),
			inspectortest.WaitSelector("#empty"),
		)
		same(tab)
	})
}

// jsq quotes s as a JavaScript string literal.
func jsq(s string) string {
	return "'" + s + "'"
}
