package inspector_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/inspector/inspectortest"
)

// Issue 38: with listen's routes, the inspector shows which route took a
// delivery, the route of each attempt, a drop, where a replay goes (the
// route's target) and the routes themselves; the page's replay goes to
// the route's receiver. In headless chromium, over a real store and agent.
func TestRoutesInBrowser(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	db := MustOpenDB(t)
	fwd, routed := newReceiver(t), newReceiver(t)
	var routes []agent.Route
	for _, s := range []string{"path:/b/** -> " + routed.URL + "/in", "header:X-Drop=yes -> drop"} {
		r, err := agent.ParseRoute(s)
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, r)
	}
	var srv *inspector.Server
	ag, err := agent.New(agent.Config{Store: db, Forward: []string{fwd.URL}, Routes: routes, Secret: testSecret, ForwardTimeout: 10 * time.Second,
		OnChange: func(c devhook.Change) {
			if srv != nil {
				srv.Publish(c)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err = inspector.New(inspector.Config{Store: db, Replayer: ag, Logf: t.Logf, Settings: inspector.Settings{
		Forward: ag.Targets(), Routes: ag.Routes(), SecretKnown: func() bool { return true }, Verify: "report",
	}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Close(); hs.Close() })
	refs := ag.Routes()

	// As listen records them: a delivery of route 1, one route 2 dropped,
	// one no route matched.
	at := time.Now().Add(-time.Minute)
	record := func(seq int, path string, h http.Header, a devhook.Attempt) *devhook.Delivery {
		d := newDelivery(at.Add(time.Duration(seq)*time.Second), seq, runStatusBody(t, "run-r", "queued", at), true)
		d.Path = path
		for k, v := range h {
			d.Header[k] = v
		}
		put(t, db, d, 0)
		a.StartedAt = d.ReceivedAt
		if _, err := db.AddAttempt(d.ID, a); err != nil {
			t.Fatal(err)
		}
		return d
	}
	viaRoute := record(1, "/b/push", nil, devhook.Attempt{Kind: devhook.AttemptForward, Target: routed.URL + "/in/b/push", Status: 200, Route: &refs[0]})
	dropped := record(2, "/hooks/service", http.Header{"X-Drop": {"yes"}}, devhook.Attempt{Kind: devhook.AttemptDrop, Target: devhook.RouteDrop, Route: &refs[1]})
	record(3, "/hooks/service", nil, devhook.Attempt{Kind: devhook.AttemptForward, Target: fwd.URL + "/hooks/service", Status: 200,
		Route: &devhook.Route{Index: 0, Text: devhook.RouteDefault}})

	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(hs.URL+"/#/"),
		inspectortest.WaitCount("#deliveries tbody tr", 3),
		inspectortest.WaitText("#routes-count", "2 routes"),
		inspectortest.WaitText(`#deliveries tr[data-id="`+viaRoute.ID+`"] .chip.route[data-route="1"]`, "route 1"),
		inspectortest.WaitText(`#deliveries tr[data-id="`+dropped.ID+`"] .chip.route[data-route="2"]`, "dropped by route 2"),
	)
	if n := inspectortest.Eval[int](t, tab, `document.querySelectorAll("#deliveries .chip.route").length`); n != 2 {
		t.Errorf("%d route chips in the list, want 2: none for the delivery no route took", n)
	}
	tab.Screenshot(t, "inspector-route-list")

	t.Run("a delivery a route took, and its replay", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(hs.URL+"/#/d/"+viaRoute.ID),
			inspectortest.WaitText("#delivery-route", "route 1"),
			inspectortest.WaitText("#route-text", "path:/b/** -> "+routed.URL+"/in"),
			inspectortest.WaitSelector(`#attempts details[data-seq="1"] .chip.route[data-route="1"]`),
			inspectortest.WaitText("#replay-hint", "A replay goes to route 1's target, "+routed.URL+"/in/b/push"),
			inspectortest.Click("#replay"),
			inspectortest.WaitCount("#attempts details.attempt", 2),
			inspectortest.WaitSelector(`#attempts details[data-seq="2"] .chip.route[data-route="1"]`),
		)
		tab.Screenshot(t, "inspector-route")
		if got := routed.requests(); len(got) != 1 || got[0].Path != "/in/b/push" {
			t.Fatalf("route 1's receiver got %+v", got)
		}
		if n := len(fwd.requests()); n != 0 {
			t.Fatalf("the --forward receiver got %d requests", n)
		}
	})

	t.Run("a dropped delivery", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(hs.URL+"/#/d/"+dropped.ID),
			inspectortest.WaitText("#delivery-route", "dropped by route 2"),
			inspectortest.WaitText(`#attempts details[data-kind="drop"]`, "Dropped by route 2 (header:X-Drop=yes -> drop): recorded, not forwarded"),
			inspectortest.WaitText("#replay-hint", "drops this delivery: give a target in Edit & replay"),
			inspectortest.WaitJS(`document.querySelector("#replay").disabled && !document.querySelector("#replay-edit").disabled`, "replay off, edit on"),
			inspectortest.Click("#replay-edit"),
			inspectortest.WaitJS(`document.querySelector("#edit-to").value === ""`, "no target offered"),
		)
		tab.Screenshot(t, "inspector-route-drop")
	})

	t.Run("settings list the routes", func(t *testing.T) {
		tab.Run(t,
			chromedp.Navigate(hs.URL+"/#/settings"),
			inspectortest.WaitText("#routes", "route 1  path:/b/** -> "+routed.URL+"/in"),
			inspectortest.WaitText("#routes", "route 2  header:X-Drop=yes -> drop"),
			inspectortest.WaitText("#view", "What no route matches"),
		)
	})
	if ex := tab.Exceptions(); len(ex) != 0 {
		t.Errorf("the page threw: %q", ex)
	}
	if strings.Contains(inspectortest.Eval[string](t, tab, `document.body.textContent`), testSecret) {
		t.Error("the page shows the secret")
	}
}
