package cloud_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/emulator"
)

// callCounter counts the calls of each path's last segment ("runs",
// "metadata", …) an emulator gets.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[r.Method+" "+r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (c *callCounter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func (c *callCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = nil
}

// countedService is an emulator whose runs stay queued, and a client of
// it through a callCounter.
func countedService(t *testing.T) (*cloud.Client, *callCounter) {
	t.Helper()
	e, err := emulator.New(emulator.Config{APIKeys: []string{key}, QueueTime: time.Hour, RetryDelays: []time.Duration{}})
	if err != nil {
		t.Fatal(err)
	}
	calls := &callCounter{}
	srv := httptest.NewServer(calls.wrap(e))
	t.Cleanup(func() { srv.Close(); e.Close() })
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateApplication(t.Context(), cloud.ApplicationInput{ID: "app", Name: "App"}); err != nil {
		t.Fatal(err)
	}
	return c, calls
}

func runIDs(runs []cloud.Run) []string {
	ids := []string{}
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	return ids
}

// TestListRuns pages through the emulator's list: 230 runs come in three
// calls of at most 100, newest first, each with its record as sent; the
// status filter and the limit select.
func TestListRuns(t *testing.T) {
	c, calls := countedService(t)
	ctx := t.Context()
	var newest []string
	for range 230 {
		r, err := c.StartRun(ctx, "app", "", cloud.RunInput{Input: json.RawMessage(`1`)})
		if err != nil {
			t.Fatal(err)
		}
		newest = append([]string{r.ID}, newest...)
	}
	for _, i := range []int{3, 150, 229} {
		if _, err := c.CancelRun(ctx, "app", newest[i]); err != nil {
			t.Fatal(err)
		}
	}

	runs, err := c.ListRuns(ctx, "app", cloud.RunFilter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if got := runIDs(runs); !slices.Equal(got, newest) {
		t.Fatalf("listed %d runs, want the 230 newest first:\n%v", len(got), got)
	}
	if n := calls.get("GET runs"); n != 3 {
		t.Errorf("%d list calls for 230 runs, want 3", n)
	}
	var rec map[string]any
	if err := json.Unmarshal(runs[0].Raw, &rec); err != nil || rec["id"] != newest[0] || rec["metadata"] == nil {
		t.Errorf("the first run's Raw is %s (%v)", runs[0].Raw, err)
	}
	if _, ok := rec["output"]; ok {
		t.Errorf("a listed run has an output: %s", runs[0].Raw)
	}

	for _, c2 := range []struct {
		f    cloud.RunFilter
		want []string
	}{
		{cloud.RunFilter{}, newest[:cloud.DefaultRunLimit]},
		{cloud.RunFilter{Limit: 7}, newest[:7]},
		{cloud.RunFilter{Status: []string{"canceled"}}, []string{newest[3], newest[150], newest[229]}},
		{cloud.RunFilter{Status: []string{"canceled"}, Limit: 2}, []string{newest[3], newest[150]}},
		{cloud.RunFilter{Status: []string{"canceled"}, Before: newest[3]}, []string{newest[150], newest[229]}},
		{cloud.RunFilter{Status: []string{"succeeded", "failed"}}, []string{}},
	} {
		runs, err := c.ListRuns(ctx, "app", c2.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := runIDs(runs); !slices.Equal(got, c2.want) {
			t.Errorf("ListRuns(%+v) = %v, want %v", c2.f, got, c2.want)
		}
	}
	if _, err := c.ListRuns(ctx, "nope", cloud.RunFilter{}); !cloud.IsNotFound(err) {
		t.Errorf("the runs of an unknown application: %v, want a 404", err)
	}
}

// fakeRuns serves a list of runs as a service that ignores the list's
// query might: every call answers all of them, in the shape given.
func fakeRuns(t *testing.T, shape string, runs map[string]string) *cloud.Client {
	t.Helper()
	ids := make([]string, 0, len(runs))
	for id := range runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var items []string
	for _, id := range ids {
		items = append(items, fmt.Sprintf(`{"id":%q,"metadata":{"status_v2":%q,"created_at":"2026-11-22T10:00:00Z"}}`, id, runs[id]))
	}
	list := "[" + strings.Join(items, ",") + "]"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/v1/applications/app/runs":
			http.Error(w, `{"error":"no such run"}`, 404)
		case shape == "items":
			fmt.Fprintf(w, `{"items":%s}`, list)
		case shape == "runs":
			fmt.Fprintf(w, `{"runs":%s}`, list)
		default:
			fmt.Fprint(w, list)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A service that answers every list call with all its runs, whatever
// the status, limit and before asked: the client filters, cuts and stops
// paging itself, and takes the list as {"items"}, {"runs"} or an array.
func TestListRuns_ServiceIgnoresTheQuery(t *testing.T) {
	runs := map[string]string{"r1": "failed", "r2": "succeeded", "r3": "failed", "r4": "running", "r5": "failed"}
	for _, shape := range []string{"items", "runs", "array"} {
		c := fakeRuns(t, shape, runs)
		got, err := c.ListRuns(t.Context(), "app", cloud.RunFilter{Status: []string{"failed"}, Limit: 2})
		if err != nil || !slices.Equal(runIDs(got), []string{"r1", "r3"}) {
			t.Errorf("%s: failed runs, limit 2: %v %v", shape, runIDs(got), err)
		}
		got, err = c.ListRuns(t.Context(), "app", cloud.RunFilter{Limit: 50})
		if err != nil || len(got) != 5 {
			t.Errorf("%s: all runs: %v %v", shape, runIDs(got), err)
		}
		// A full page of 5 with 3 failed: the next page, asked for with
		// before, is the same again, and the client stops there.
		got, err = c.ListRuns(t.Context(), "app", cloud.RunFilter{Status: []string{"failed"}, Limit: 5})
		if err != nil || !slices.Equal(runIDs(got), []string{"r1", "r3", "r5"}) {
			t.Errorf("%s: failed runs, limit 5: %v %v", shape, runIDs(got), err)
		}
	}
}

// ResolveRunID takes a whole id, the unique start of one, or the short id
// devhook listen shows (the last 8 digits of a time-ordered UUID); a
// start that several runs share names them, and one none has is
// ErrRunNotFound.
func TestResolveRunID(t *testing.T) {
	const v7 = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	c := fakeRuns(t, "items", map[string]string{v7: "running", "abcd1234-0000-4000-8000-000000000001": "failed",
		"abcd9999-0000-4000-8000-000000000002": "queued", "ffff0000-0000-4000-8000-000000000003": "succeeded"})
	ctx := t.Context()
	for ref, want := range map[string]string{
		"ffff":                                 "ffff0000-0000-4000-8000-000000000003",
		"abcd1":                                "abcd1234-0000-4000-8000-000000000001",
		"2e3f4a5b":                             v7, // its short id
		"0193a1":                               v7,
		"abcd9999-0000-4000-8000-000000000002": "abcd9999-0000-4000-8000-000000000002",
	} {
		if got, err := c.ResolveRunID(ctx, "app", ref); err != nil || got != want {
			t.Errorf("ResolveRunID(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
	_, err := c.ResolveRunID(ctx, "app", "abcd")
	var amb *cloud.AmbiguousRunError
	if !errors.As(err, &amb) || len(amb.Runs) != 2 || !strings.Contains(err.Error(), "abcd1234-0000-4000-8000-000000000001  failed") ||
		!strings.Contains(err.Error(), "abcd9999-0000-4000-8000-000000000002  queued") {
		t.Errorf("ResolveRunID(abcd): %v", err)
	}
	if _, err := c.ResolveRunID(ctx, "app", "0bad"); !errors.Is(err, cloud.ErrRunNotFound) {
		t.Errorf("ResolveRunID(0bad): %v, want ErrRunNotFound", err)
	}
}

// WithRunID calls with a whole id at once, no list asked for; with the
// start of one, after the service's 404, with the whole id the list
// gives; with an id no run has, it returns the service's 404.
func TestWithRunID(t *testing.T) {
	c, calls := countedService(t)
	ctx := t.Context()
	r, err := c.StartRun(ctx, "app", "", cloud.RunInput{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	calls.reset()
	var got []string
	get := func(id string) error {
		got = append(got, id)
		_, err := c.RunMetadata(ctx, "app", id)
		return err
	}
	if err := c.WithRunID(ctx, "app", r.ID, get); err != nil || !slices.Equal(got, []string{r.ID}) || calls.get("GET runs") != 0 {
		t.Errorf("a whole id: %v, called with %v, %d list calls", err, got, calls.get("GET runs"))
	}
	got = nil
	if err := c.WithRunID(ctx, "app", r.ID[:6], get); err != nil || !slices.Equal(got, []string{r.ID[:6], r.ID}) || calls.get("GET runs") != 1 {
		t.Errorf("the start of an id: %v, called with %v, %d list calls", err, got, calls.get("GET runs"))
	}
	got = nil
	err = c.WithRunID(ctx, "app", "nope", get)
	if !cloud.IsNotFound(err) || !strings.Contains(err.Error(), `no run with id "nope"`) || !strings.Contains(err.Error(), "devhook runs list") || len(got) != 1 {
		t.Errorf("an id no run has: %v, called with %v", err, got)
	}
}
