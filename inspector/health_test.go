package inspector_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/inspector/inspectortest"
)

// healthSource is a settable Config.Health.
type healthSource struct {
	mu sync.Mutex
	h  devhook.Health
}

func (s *healthSource) get() devhook.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

func (s *healthSource) set(h devhook.Health) {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
}

func TestStatus(t *testing.T) {
	var got devhook.Health
	f := newFixture(t, fixtureOptions{})
	if code := f.get(t, "/api/status", &got); code != 200 || got != (devhook.Health{}) {
		t.Fatalf("without an agent: %d %+v", code, got)
	}
	since := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	want := devhook.Health{StorageError: "write journal: no space left on device", Since: since, Held: 64, Owed: 3, Failed: 1}
	g := newFixture(t, fixtureOptions{config: func(c *inspector.Config) { c.Health = func() devhook.Health { return want } }})
	if code := g.get(t, "/api/status", &got); code != 200 || got != want {
		t.Fatalf("got %d %+v, want %+v", code, got, want)
	}
}

// List rows and the detail carry the retry state of a delivery.
func TestRetryStateInListAndDetail(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	now := time.Now()
	owed := newDelivery(now, 1, runStatusBody(t, "run-r", "queued", now), true)
	failed := newDelivery(now, 2, runStatusBody(t, "run-r", "running", now), true)
	fine := newDelivery(now, 3, runStatusBody(t, "run-r", "succeeded", now), true)
	put(t, f.DB, owed, 503)
	put(t, f.DB, failed, 503)
	put(t, f.DB, fine, 200)
	stOwed := devhook.RetryState{State: devhook.RetryOwed, Since: now.UTC().Truncate(time.Second)}
	stFailed := devhook.RetryState{State: devhook.RetryFailed, Since: now.UTC().Truncate(time.Second), Reason: "gave up after 9 attempts over 1h: the receiver answered 503"}
	if err := f.DB.PutRetry(owed.ID, stOwed); err != nil {
		t.Fatal(err)
	}
	if err := f.DB.PutRetry(failed.ID, stFailed); err != nil {
		t.Fatal(err)
	}
	var page inspector.ListPage
	f.get(t, "/api/deliveries", &page)
	byID := map[string]devhook.Summary{}
	for _, s := range page.Items {
		byID[s.ID] = s
	}
	if r := byID[owed.ID].Retry; r == nil || *r != stOwed {
		t.Errorf("owed row: %+v", r)
	}
	if r := byID[failed.ID].Retry; r == nil || *r != stFailed {
		t.Errorf("failed row: %+v", r)
	}
	if r := byID[fine.ID].Retry; r != nil {
		t.Errorf("delivered row: %+v", r)
	}
	var v struct {
		Retry *devhook.RetryState `json:"retry"`
	}
	f.get(t, "/api/deliveries/"+failed.ID, &v)
	if v.Retry == nil || *v.Retry != stFailed {
		t.Errorf("detail: %+v", v.Retry)
	}
	v.Retry = nil
	f.get(t, "/api/deliveries/"+fine.ID, &v)
	if v.Retry != nil {
		t.Errorf("detail of a delivered one: %+v", v.Retry)
	}
}

func TestEventStreamRetryAndHealth(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	c := openEvents(t, f.HTTP.URL)
	st := devhook.RetryState{State: devhook.RetryFailed, Reason: "gave up after 2 attempts over 1s: x"}
	f.Server.Publish(devhook.Change{Kind: devhook.ChangeRetry, Summary: devhook.Summary{ID: "d1", Retry: &st}})
	if ev, data := c.next(t); ev != "retry" || !strings.Contains(data, `"retry":{"state":"failed"`) {
		t.Errorf("event %q %s", ev, data)
	}
	h := devhook.Health{StorageError: "disk full", Held: 2}
	f.Server.Publish(devhook.Change{Kind: devhook.ChangeHealth, Health: &h})
	ev, data := c.next(t)
	var got devhook.Change
	if err := json.Unmarshal([]byte(data), &got); err != nil || ev != "health" || got.Health == nil || *got.Health != h {
		t.Errorf("event %q %s (%v)", ev, data, err)
	}
}

// The page shows the agent's health as a banner, live, and the retry
// state of deliveries in the list and the detail.
func TestHealthInBrowser(t *testing.T) {
	b := inspectortest.NewBrowser(t)
	hs := &healthSource{}
	f := newFixture(t, fixtureOptions{config: func(c *inspector.Config) { c.Health = hs.get }})
	now := time.Now()
	owed := newDelivery(now, 1, runStatusBody(t, "run-h", "queued", now), true)
	failed := newDelivery(now, 2, runStatusBody(t, "run-h", "running", now), true)
	put(t, f.DB, owed, 503)
	put(t, f.DB, failed, 0)
	reason := "gave up after 12 attempts over 1h: connection refused: is your receiver running at http://127.0.0.1:9/?"
	if err := f.DB.PutRetry(owed.ID, devhook.RetryState{State: devhook.RetryOwed, Since: now}); err != nil {
		t.Fatal(err)
	}
	if err := f.DB.PutRetry(failed.ID, devhook.RetryState{State: devhook.RetryFailed, Since: now, Reason: reason}); err != nil {
		t.Fatal(err)
	}
	hs.set(devhook.Health{Owed: 1, Failed: 1})

	tab := b.NewTab(t)
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/"),
		inspectortest.WaitJS(`document.body.dataset.live === "1"`, "the live stream to connect"),
		inspectortest.WaitCount("#deliveries tbody tr", 2),
		inspectortest.WaitText(`#deliveries tr[data-id="`+owed.ID+`"] [data-retry="owed"]`, "retrying"),
		inspectortest.WaitText(`#deliveries tr[data-id="`+failed.ID+`"] [data-retry="failed"]`, "failed: gave up after 12 attempts over 1h"),
		inspectortest.WaitText("#health-failed", "1 delivery failed"),
		inspectortest.WaitText("#health-owed", "1 delivery owed to the receiver"),
	)

	// Recording starts failing: the banner says so without a reload.
	inspectortest.Eval[bool](t, tab, `(window.__sameDocument = "yes", true)`)
	h := devhook.Health{StorageError: "write journal: no space left on device", Since: now, Held: 64, Owed: 1, Failed: 1}
	hs.set(h)
	f.Server.Publish(devhook.Change{Kind: devhook.ChangeHealth, Health: &h})
	tab.Run(t,
		inspectortest.WaitText("#health-storage", "Recording fails"),
		inspectortest.WaitText("#health-storage", "no space left on device"),
		inspectortest.WaitText("#health-storage", "64 queued deliveries are held"),
		inspectortest.WaitJS(`document.querySelector("#health").dataset.level === "bad"`, "the banner to be red"),
	)
	tab.Screenshot(t, "inspector-health")
	// Recording works again: the storage line goes.
	h = devhook.Health{}
	hs.set(h)
	f.Server.Publish(devhook.Change{Kind: devhook.ChangeHealth, Health: &h})
	tab.Run(t, inspectortest.WaitJS(`document.querySelector("#health").hidden`, "the banner to go"))
	if same := inspectortest.Eval[string](t, tab, `window.__sameDocument || "reloaded"`); same != "yes" {
		t.Fatalf("the page reloaded: %s", same)
	}

	// The detail of the failed delivery says it failed, and why.
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/d/"+failed.ID),
		inspectortest.WaitText("#retry-note", "failed: devhook "+reason),
	)
	// A retry attempt shows with its kind.
	a, err := f.DB.AddAttempt(owed.ID, devhook.Attempt{Kind: devhook.AttemptRetry, Target: f.Receiver.URL, StartedAt: now, Status: 200})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.DB.DeleteRetry(owed.ID); err != nil {
		t.Fatal(err)
	}
	d, _ := f.DB.Delivery(owed.ID)
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/d/"+owed.ID),
		inspectortest.WaitSelector(`.attempt[data-kind="retry"][data-seq="`+jsonNumber(int64(a.Seq))+`"]`),
	)
	if n := inspectortest.Eval[int](t, tab, `document.querySelectorAll("#retry-note").length`); n != 0 || len(d.Attempts) != 2 {
		t.Errorf("a delivered retry still shows a retry note (%d) or has %d attempts", n, len(d.Attempts))
	}
	if ex := tab.Exceptions(); len(ex) != 0 {
		t.Fatalf("exceptions: %v", ex)
	}
}
