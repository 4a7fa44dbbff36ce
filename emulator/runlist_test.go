package emulator_test

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

// listRuns GETs the list with query and returns the ids it lists, checking
// that each item is a run record without output.
func (v *env) listRuns(app, query string) []string {
	v.t.Helper()
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	v.do("GET", "/v1/applications/"+app+"/runs"+query, nil, 200, &l)
	ids := []string{}
	for _, it := range l.Items {
		checkRunRecord(v.t, it, shapeMetadata)
		var r runRecord
		json.Unmarshal(it, &r)
		ids = append(ids, r.ID)
	}
	return ids
}

// TestListRuns: GET …/runs lists an application's runs of the caller's
// account, newest first (runs created in the same instant in the order
// they were started), without output; status selects (repeated or
// comma-separated), limit and before page; bad parameters are 400 naming
// them, an unknown application 404.
func TestListRuns(t *testing.T) {
	clk := newClock(t0)
	cfg := testConfig()
	cfg.Now, cfg.QueueTime = clk.Now, time.Hour // every run stays queued until canceled
	v := newEnv(t, cfg)
	v.newApp("a")
	v.newApp("b")
	var ids []string // oldest first
	for range 5 {
		ids = append(ids, v.startRun("a", "latest", map[string]any{"input": map[string]any{}}).ID)
	}
	other := v.startRun("b", "latest", map[string]any{"input": 1}).ID
	if st, _, body := v.request("test-key-2", "POST", "/v1/applications", map[string]any{"id": "a", "name": "A"}); st != 201 {
		t.Fatalf("the second account's application: %d %s", st, body)
	}
	v.request("test-key-2", "POST", "/v1/applications/a/runs", map[string]any{"input": 1})
	for _, i := range []int{0, 2} {
		v.do("PATCH", "/v1/applications/a/runs/"+ids[i]+"/cancel", nil, 200, nil)
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest)

	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", newest},
		{"?status=canceled", []string{ids[2], ids[0]}},
		{"?status=queued", []string{ids[4], ids[3], ids[1]}},
		{"?status=queued&status=canceled", newest},
		{"?status=Queued,%20canceled", newest},
		{"?status=succeeded", []string{}},
		{"?limit=2", newest[:2]},
		{"?limit=2&before=" + ids[3], []string{ids[2], ids[1]}},
		{"?limit=2&before=" + ids[1], []string{ids[0]}},
		{"?before=" + ids[0], []string{}},
		{"?status=canceled&limit=1", []string{ids[2]}},
		{"?status=canceled&limit=1&before=" + ids[2], []string{ids[0]}},
	} {
		if got := v.listRuns("a", c.query); !slices.Equal(got, c.want) {
			t.Errorf("runs%s: %v, want %v", c.query, got, c.want)
		}
	}
	if got := v.listRuns("b", ""); !slices.Equal(got, []string{other}) {
		t.Errorf("application b's runs: %v, want %v", got, other)
	}
	clk.Advance(time.Second)
	later := v.startRun("a", "devint", map[string]any{"input": 2}).ID
	if got := v.listRuns("a", "?limit=1"); !slices.Equal(got, []string{later}) {
		t.Errorf("the newest run: %v, want %s", got, later)
	}

	for _, c := range []struct {
		path string
		want int
		says string
	}{
		{"/v1/applications/a/runs?limit=0", 400, "limit"},
		{"/v1/applications/a/runs?limit=101", 400, "1 to 100"},
		{"/v1/applications/a/runs?limit=x", 400, "limit"},
		{"/v1/applications/a/runs?status=done", 400, "queued, running, succeeded, failed, canceled"},
		{"/v1/applications/a/runs?before=nope", 400, "before"},
		{"/v1/applications/a/runs?before=" + other, 400, "before"},
		{"/v1/applications/nope/runs", 404, "nope"},
	} {
		st, _, body := v.request(testKey, "GET", c.path, nil)
		wantError(t, "GET "+c.path, st, body, c.want)
		if !strings.Contains(string(body), c.says) {
			t.Errorf("GET %s: %s does not say %q", c.path, body, c.says)
		}
	}
	st, h, _ := v.request(testKey, "DELETE", "/v1/applications/a/runs", nil)
	if st != 405 || h.Get("Allow") != "GET, POST" {
		t.Errorf("DELETE …/runs: %d, Allow %q", st, h.Get("Allow"))
	}
}

// TestListRuns_OrderKeptAcrossRestart: runs created in the same instant
// keep their order in the list when the emulator starts again on its
// data directory, and a run started after that comes first.
func TestListRuns_OrderKeptAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clk := newClock(t0)
	open := func() (*emulator.Emulator, *env) {
		cfg := testConfig()
		cfg.Now, cfg.QueueTime, cfg.DataDir = clk.Now, time.Hour, dir
		e, err := emulator.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e, &env{t: t, e: e, srv: httptest.NewServer(e)}
	}
	e, v := open()
	v.newApp("a")
	var ids []string
	for range 4 {
		ids = append([]string{v.startRun("a", "latest", map[string]any{"input": 1}).ID}, ids...)
	}
	before := v.listRuns("a", "")
	v.srv.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, v = open()
	defer func() { v.srv.Close(); e.Close() }()
	if after := v.listRuns("a", ""); !slices.Equal(before, ids) || !slices.Equal(after, ids) {
		t.Fatalf("before the restart %v, after %v; want %v", before, after, ids)
	}
	next := v.startRun("a", "latest", map[string]any{"input": 1}).ID
	if got := v.listRuns("a", "?limit=2"); !slices.Equal(got, []string{next, ids[0]}) {
		t.Errorf("after a run started after the restart: %v, want %v", got, []string{next, ids[0]})
	}
}
