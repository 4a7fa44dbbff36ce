package inspector_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/inspector/inspectortest"
)

// BenchmarkListAPI100k measures GET /api/deliveries through the handler
// over a real store holding 100,000 deliveries.
//
//	go test -run '^$' -bench ListAPI100k -benchtime 2000x ./inspector/
func BenchmarkListAPI100k(b *testing.B) {
	const n = 100_000
	db := MustOpenDB(b)
	start := time.Now()
	seed100k(b, db, n)
	b.Logf("stored %d deliveries in %v", n, time.Since(start).Round(time.Millisecond))
	s, err := inspector.New(inspector.Config{Store: db})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	var middle string
	{
		var page inspector.ListPage
		get(b, s, "/api/deliveries?limit=500", &page)
		middle = page.Next
	}
	for _, bm := range []struct{ name, query string }{
		{"first-page", "/api/deliveries"},
		{"older-page", "/api/deliveries?before=" + middle},
		{"run-id", "/api/deliveries?run_id=run-77"},
		{"verdict", "/api/deliveries?verdict=missing_signature"},
		{"body-text-no-match", "/api/deliveries?q=no+such+text"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			var page inspector.ListPage
			for b.Loop() {
				get(b, s, bm.query, &page)
			}
			if len(page.Items) == 0 && bm.name != "body-text-no-match" {
				b.Fatalf("%s: no items", bm.query)
			}
		})
	}
}

func get(b testing.TB, h http.Handler, path string, v any) {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Host = "127.0.0.1:4040"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		b.Fatal(err)
	}
}

// seed100k stores n run.status deliveries, one a second up to now, each
// with a forward attempt, from a few writers so that the store batches.
func seed100k(b testing.TB, db interface {
	PutDelivery(*devhook.Delivery) (bool, error)
	AddAttempt(string, devhook.Attempt) (devhook.Attempt, error)
}, n int) {
	base := time.Now().Add(-time.Duration(n) * time.Second)
	steps := inspector.RunSteps()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				at := base.Add(time.Duration(i) * time.Second)
				body, _ := json.Marshal(devhook.NewRunStatus(fmt.Sprintf("run-%d", i/3), "app-1", steps[i%3], at))
				d := newDelivery(at, i, body, i%50 != 0)
				if _, err := db.PutDelivery(d); err != nil {
					errs <- err
					return
				}
				a := devhook.Attempt{Kind: devhook.AttemptForward, Target: "http://127.0.0.1:3000/hooks/service", StartedAt: at,
					Duration: devhook.Duration(time.Millisecond), Status: 200, Body: []byte("ok")}
				if _, err := db.AddAttempt(d.ID, a); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("seeding: %v", err)
	}
}

// TestFirstPage100kInBrowser times the list page over a store of 100,000
// deliveries, from navigation to 50 drawn rows. Seeding takes a while, so
// it runs only with DEVHOOK_SLOW_TESTS=1.
//
//	DEVHOOK_SLOW_TESTS=1 go test -run FirstPage100k -v ./inspector/
func TestFirstPage100kInBrowser(t *testing.T) {
	if os.Getenv("DEVHOOK_SLOW_TESTS") == "" {
		t.Skip("seeds 100,000 deliveries: set DEVHOOK_SLOW_TESTS=1")
	}
	br := inspectortest.NewBrowser(t)
	f := newFixture(t, fixtureOptions{})
	seed100k(t, f.DB, 100_000)
	tab := br.NewTab(t)
	tab.Run(t, chromedp.Navigate(f.HTTP.URL+"/#/settings"), inspectortest.WaitSelector("#public-url"))
	start := time.Now()
	tab.Run(t,
		chromedp.Navigate(f.HTTP.URL+"/#/"),
		inspectortest.WaitCount("#deliveries tbody tr", 50),
		inspectortest.WaitSelector("#load-more"),
	)
	took := time.Since(start)
	t.Logf("first page of 100,000 deliveries drawn in %v", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the first page took %v to draw, want under 2 s", took)
	}
	tab.Screenshot(t, "inspector-list-100k")
}
