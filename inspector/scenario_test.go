package inspector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/scenario"
)

// savedByCLI is what `devhook scenario save FILE` writes for sel and the
// redaction paths, computed as cmd/devhook/scenario.go does: scenario.Select
// over the history's List, then scenario.Export with its Delivery. hist is
// the store (no listen running) or an inspector.Client (a listen running).
func savedByCLI(tb testing.TB, hist interface {
	List(context.Context, devhook.Filter) ([]devhook.Summary, error)
	Delivery(context.Context, string) (*devhook.Delivery, error)
}, sel scenario.Selection, redact ...string) []byte {
	tb.Helper()
	ctx := context.Background()
	ids, err := scenario.Select(ctx, hist.List, sel)
	if err != nil {
		tb.Fatalf("scenario.Select(%+v): %v", sel, err)
	}
	load := func(id string) (*devhook.Delivery, error) { return hist.Delivery(ctx, id) }
	b, _, err := scenario.Export(ids, load, scenario.Options{Redact: redact})
	if err != nil {
		tb.Fatalf("scenario.Export: %v", err)
	}
	return b
}

// storeHistory is the data directory as the command reads it when no
// listen runs.
type storeHistory struct{ f *fixture }

func (h storeHistory) List(_ context.Context, f devhook.Filter) ([]devhook.Summary, error) {
	return h.f.DB.List(f)
}

func (h storeHistory) Delivery(_ context.Context, id string) (*devhook.Delivery, error) {
	return h.f.DB.Delivery(id)
}

// scenarioFixture stores a run of three deliveries (the second with a
// replay, which a scenario leaves out, and a binary one), another run and a
// delivery without one.
func scenarioFixture(t *testing.T) (f *fixture, run []*devhook.Delivery, other *devhook.Delivery) {
	f = newFixture(t, fixtureOptions{})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i, step := range []string{"queued", "running", "succeeded"} {
		at := base.Add(time.Duration(i) * 1250 * time.Millisecond)
		d := newDelivery(at, 10+i, runStatusBody(t, "run-save", step, at), true)
		d.RawQuery = "src=svc&run=run-save"
		d.Header.Add("X-Trace", "b")
		d.Header.Add("X-Trace", "a")
		put(t, f.DB, d, 200)
		run = append(run, d)
	}
	if _, err := f.DB.AddAttempt(run[1].ID, devhook.Attempt{Kind: devhook.AttemptReplay, StartedAt: base.Add(time.Minute), Status: 401,
		Body: []byte("Unauthorized: Invalid Time Value")}); err != nil {
		t.Fatal(err)
	}
	other = newDelivery(base.Add(2*time.Second), 20, runStatusBody(t, "run-other", "queued", base), true)
	put(t, f.DB, other, 202)
	bin := newDelivery(base.Add(3*time.Second), 21, []byte{0xff, 0, 'x'}, true)
	bin.Header.Set("Content-Type", "application/octet-stream")
	put(t, f.DB, bin, 0)
	return f, run, other
}

// The download is byte for byte what devhook scenario save writes for the
// same deliveries, whether it reads the store or a running listen's
// inspector, however the ids are given.
func TestScenarioDownload(t *testing.T) {
	f, run, other := scenarioFixture(t)
	client := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: f.HTTP.Client()}
	ids := func(ds ...*devhook.Delivery) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.ID)
		}
		return out
	}
	tests := []struct {
		name   string
		query  string
		sel    scenario.Selection
		redact []string
		file   string
		n      int
	}{
		{"run", "run_id=run-save", scenario.Selection{RunID: "run-save"}, nil, "scenario-run-save.json", 3},
		{"run redacted", "run_id=run-save&redact=$.data.run_id&redact=$.data.application_id",
			scenario.Selection{RunID: "run-save"}, []string{"$.data.run_id", "$.data.application_id"}, "scenario-run-save.json", 3},
		{"ids repeated", "id=" + run[0].ID + "&id=" + other.ID, scenario.Selection{IDs: ids(run[0], other)}, nil, "scenario-2-deliveries.json", 2},
		{"ids comma-separated, newest first, twice", "id=" + other.ID + "," + run[2].ID + "&id=" + run[0].ID + "&id=" + other.ID,
			scenario.Selection{IDs: ids(run[0], run[2], other)}, nil, "scenario-3-deliveries.json", 3},
		{"a binary body", "id=" + testID(run[0].ReceivedAt.Add(3*time.Second), 21), scenario.Selection{IDs: []string{testID(run[0].ReceivedAt.Add(3*time.Second), 21)}},
			nil, "scenario-1-deliveries.json", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := f.HTTP.Client().Get(f.HTTP.URL + "/api/scenario?" + tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, got)
			}
			for k, want := range map[string]string{
				"Content-Type":           "application/json",
				"Content-Disposition":    `attachment; filename=` + tt.file,
				"Cache-Control":          "no-store",
				"X-Content-Type-Options": "nosniff",
			} {
				if v := res.Header.Get(k); v != want {
					t.Errorf("%s: %q, want %q", k, v, want)
				}
			}
			if want := savedByCLI(t, storeHistory{f}, tt.sel, tt.redact...); !bytes.Equal(got, want) {
				t.Errorf("the download differs from devhook scenario save reading the data directory:\n%s\nwant:\n%s", got, want)
			}
			if want := savedByCLI(t, client, tt.sel, tt.redact...); !bytes.Equal(got, want) {
				t.Errorf("the download differs from devhook scenario save reading through the inspector:\n%s\nwant:\n%s", got, want)
			}
			s, err := scenario.Parse("download", got)
			if err != nil {
				t.Fatalf("the download does not parse: %v", err)
			}
			if len(s.Deliveries) != tt.n || strings.Join(s.Redacted, ",") != strings.Join(tt.redact, ",") {
				t.Errorf("the download has %d deliveries, redacted %q; want %d, %q", len(s.Deliveries), s.Redacted, tt.n, tt.redact)
			}
			if len(tt.redact) > 0 && bytes.Contains(got, []byte("run-save")) {
				t.Errorf("the redacted download still names run-save:\n%s", got)
			}
		})
	}

	t.Run("a redaction path that matches nothing is a warning", func(t *testing.T) {
		res, err := f.HTTP.Client().Get(f.HTTP.URL + "/api/scenario?run_id=run-save&redact=" + url.QueryEscape("$.data.nothing"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if w := res.Header.Values("Devhook-Warning"); res.StatusCode != http.StatusOK || len(w) != 1 || !strings.Contains(w[0], "$.data.nothing matched nothing") {
			t.Errorf("status %d, warnings %q", res.StatusCode, w)
		}
	})
}

func TestScenarioDownloadErrors(t *testing.T) {
	f, run, _ := scenarioFixture(t)
	tests := []struct {
		query  string
		status int
		want   string
	}{
		{"", http.StatusBadRequest, "name the deliveries to save with run_id=RUN_ID or id=ID"},
		{"id=", http.StatusBadRequest, "name the deliveries to save"},
		{"run_id=run-save&id=" + run[0].ID, http.StatusBadRequest, "one of the two"},
		{"run_id=run-nope", http.StatusNotFound, "no delivery of run run-nope is stored"},
		{"id=" + run[0].ID + "&id=0190aaaa-0000-7000-8000-000000000000", http.StatusNotFound, `no delivery with id or prefix "0190aaaa-0000-7000-8000-000000000000"`},
		{"id=nope", http.StatusNotFound, `no delivery with id or prefix "nope"`},
		{"run_id=run-save&redact=data.run_id", http.StatusBadRequest, `redaction path "data.run_id": a JSON path starts with $`},
		{"run_id=run-save&redact=" + url.QueryEscape("$.a["), http.StatusBadRequest, "a [ without its ]"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			var e struct {
				Error string `json:"error"`
			}
			res, err := f.HTTP.Client().Get(f.HTTP.URL + "/api/scenario?" + tt.query)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if err := json.NewDecoder(res.Body).Decode(&e); err != nil {
				t.Fatalf("status %d, not a JSON error: %v", res.StatusCode, err)
			}
			if res.StatusCode != tt.status || !strings.Contains(e.Error, tt.want) || res.Header.Get("Content-Disposition") != "" {
				t.Errorf("status %d %q (Content-Disposition %q), want %d with %q", res.StatusCode, e.Error, res.Header.Get("Content-Disposition"), tt.status, tt.want)
			}
		})
	}

	// The guard holds: another host's page cannot read recorded deliveries.
	r, _ := http.NewRequest(http.MethodGet, f.HTTP.URL+"/api/scenario?run_id=run-save", nil)
	r.Host = "evil.example"
	res, err := f.HTTP.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("a request for host evil.example: status %d, want 403", res.StatusCode)
	}
}
