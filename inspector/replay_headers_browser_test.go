package inspector_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/devhook/devhook/inspector/inspectortest"
)

// Edit & replay with the headers edited in the page: the headers the user
// did not touch reach the receiver as recorded, byte for byte (a value
// that is not UTF-8 too, which the page can only show with U+FFFD); a
// line added is sent, a line removed is not.
func TestInBrowser_EditedHeadersKeepTheRest(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	f := newFixture(t, fixtureOptions{})
	at := time.Now().Add(-time.Minute)
	d := newDelivery(at, 1, runStatusBody(t, "run-h", "queued", at), true)
	d.Header["X-Raw"] = []string{"caf\xe9 au lait"}
	d.Header["X-Gone"] = []string{"1"}
	put(t, f.DB, d, 200)

	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/d/"+d.ID),
		inspectortest.WaitCount("#attempts .attempt", 1),
		inspectortest.Click("#replay-edit"),
		inspectortest.WaitSelector("#replay-editor:not([hidden])"),
	)
	shown := inspectortest.Eval[string](t, tab, `document.querySelector("#edit-headers").value`)
	if !strings.Contains(shown, "X-Gone: 1") || !strings.Contains(shown, "X-Raw: caf") {
		t.Fatalf("the editor shows:\n%s", shown)
	}
	var lines []string
	for _, l := range strings.Split(shown, "\n") {
		if !strings.HasPrefix(l, "X-Gone:") {
			lines = append(lines, l)
		}
	}
	edited := strings.Join(append(lines, "X-Added: yes"), "\n")
	before := len(f.Receiver.requests())
	tab.Run(t,
		chromedp.SetValue(chromedp.CSS("#edit-headers"), edited),
		inspectortest.Click("#replay-send"),
		inspectortest.WaitCount("#attempts .attempt", 2),
	)
	got := f.Receiver.requests()
	if len(got) != before+1 {
		t.Fatalf("the receiver saw %d requests, want %d", len(got), before+1)
	}
	r := got[len(got)-1]
	if v := r.Header.Values("X-Raw"); len(v) != 1 || v[0] != "caf\xe9 au lait" {
		t.Errorf("X-Raw reached the receiver as %q, want the recorded bytes", v)
	}
	if r.Header.Get("X-Added") != "yes" || r.Header.Get("X-Gone") != "" {
		t.Errorf("X-Added %q, X-Gone %q: want the line added sent and the line removed not", r.Header.Get("X-Added"), r.Header.Get("X-Gone"))
	}
	if r.Header.Get("User-Agent") != d.Header.Get("User-Agent") {
		t.Errorf("User-Agent %q, want the recorded one", r.Header.Get("User-Agent"))
	}
}
