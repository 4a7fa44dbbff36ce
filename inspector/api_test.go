package inspector_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/export"
	"github.com/devhook/devhook/inspector"
)

// seedList stores n deliveries, one a second, ending now. Every third is
// badly signed; every fifth got no answer; run ids cycle over 10 runs.
func seedList(t *testing.T, f *fixture, n int) []devhook.Summary {
	t.Helper()
	base := time.Now().Add(-time.Duration(n) * time.Second)
	var out []devhook.Summary
	steps := inspector.RunSteps()
	for i := range n {
		at := base.Add(time.Duration(i) * time.Second)
		body := runStatusBody(t, "run-"+string(rune('a'+i%10)), steps[i%3], at)
		if i == 7 {
			body = []byte(`{"event_type":"run.status","data":{"run_id":"run-h","status_v2":"running","note":"Needle in the BODY"}}`)
		}
		d := newDelivery(at, i, body, i%3 != 0)
		status := 200
		if i%5 == 0 {
			status = 0
		} else if i%7 == 0 {
			status = 500
		}
		out = append(out, put(t, f.DB, d, status))
	}
	return out
}

func TestListPagingAndFilters(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	all := seedList(t, f, 130)

	// Paging: newest first, no gaps, no repeats.
	var seen []string
	before := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		var page inspector.ListPage
		q := url.Values{"limit": {"50"}}
		if before != "" {
			q.Set("before", before)
		}
		if code := f.get(t, "/api/deliveries?"+q.Encode(), &page); code != http.StatusOK {
			t.Fatalf("list: status %d", code)
		}
		for _, s := range page.Items {
			seen = append(seen, s.ID)
		}
		if page.Next == "" {
			break
		}
		if page.Next != page.Items[len(page.Items)-1].ID {
			t.Fatalf("next %q is not the last id of the page", page.Next)
		}
		before = page.Next
	}
	if len(seen) != len(all) {
		t.Fatalf("paged through %d deliveries, want %d", len(seen), len(all))
	}
	for i, id := range seen {
		if want := all[len(all)-1-i].ID; id != want {
			t.Fatalf("item %d is %s, want %s (newest first)", i, id, want)
		}
	}

	count := func(pred func(devhook.Summary) bool) int {
		n := 0
		for _, s := range all {
			if pred(s) {
				n++
			}
		}
		return n
	}
	tests := []struct {
		query string
		want  func(devhook.Summary) bool
	}{
		{"verdict=invalid_signature", nil},
		{"verdict=missing_signature", func(s devhook.Summary) bool { return s.Verdict == devhook.VerdictMissingSignature }},
		{"verdict=ok", func(s devhook.Summary) bool { return s.Verdict == devhook.VerdictOK }},
		{"status=500", func(s devhook.Summary) bool { return s.Status == 500 }},
		{"status=none", func(s devhook.Summary) bool { return s.Status == 0 }},
		{"run_id=run-c", func(s devhook.Summary) bool { return s.Event.RunID == "run-c" }},
		{"status_v2=succeeded", func(s devhook.Summary) bool { return s.Event.StatusV2 == "succeeded" }},
		{"run_id=run-c&status_v2=running", func(s devhook.Summary) bool { return s.Event.RunID == "run-c" && s.Event.StatusV2 == "running" }},
		{"q=needle+in+the+body", func(s devhook.Summary) bool {
			return s.Event.RunID == "run-h" && s.Event.Type == "run.status" && s.BodySize < 120
		}},
	}
	for _, tt := range tests {
		var page inspector.ListPage
		if code := f.get(t, "/api/deliveries?limit=500&"+tt.query, &page); code != http.StatusOK {
			t.Errorf("%s: status %d", tt.query, code)
			continue
		}
		want := 0
		if tt.want != nil {
			want = count(tt.want)
		}
		if len(page.Items) != want {
			t.Errorf("%s: %d items, want %d", tt.query, len(page.Items), want)
		}
		for _, s := range page.Items {
			if tt.want != nil && !tt.want(s) {
				t.Errorf("%s: item %s does not match: %+v", tt.query, s.ID, s)
			}
		}
	}
	if n := count(func(s devhook.Summary) bool { return s.Event.RunID == "run-c" }); n == 0 {
		t.Fatal("the seed has no run-c: the filter test proves nothing")
	}

	for _, q := range []string{"limit=0", "limit=501", "limit=x", "status=abc", "status=42"} {
		var e struct{ Error string }
		if code := f.get(t, "/api/deliveries?"+q, &e); code != http.StatusBadRequest || e.Error == "" {
			t.Errorf("%s: status %d, error %q; want 400 with a message", q, code, e.Error)
		}
	}
}

func TestDeliveryDetail(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	now := time.Now()
	d := newDelivery(now, 1, []byte(`{"event_type":"run.status","data":{"run_id":"run-1","status_v2":"queued","big":12345678901234567890}}`), true)
	d.RawQuery = "a=1"
	put(t, f.DB, d, 200)

	var v struct {
		devhook.Delivery
		View inspector.DetailView `json:"view"`
	}
	if code := f.get(t, "/api/deliveries/"+d.ID, &v); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if v.ID != d.ID || string(v.Body) != string(d.Body) || v.Verdict.Result != devhook.VerdictOK || len(v.Attempts) != 1 {
		t.Fatalf("delivery = %+v", v.Delivery)
	}
	if !v.View.Body.JSON || !strings.Contains(v.View.Body.Pretty, "\n  \"data\": {\n    \"run_id\": \"run-1\"") {
		t.Errorf("pretty body = %q", v.View.Body.Pretty)
	}
	if !strings.Contains(v.View.Body.Pretty, "12345678901234567890") {
		t.Errorf("pretty body lost the exact number: %q", v.View.Body.Pretty)
	}
	if want := f.Receiver.URL + "/hooks/service?a=1"; v.View.Target != want {
		t.Errorf("target = %q, want %q", v.View.Target, want)
	}
	if !v.View.Resign || !v.View.ReplayAvailable || len(v.View.Attempts) != 1 || v.View.Attempts[0].Response.Text != "OK" {
		t.Errorf("view = %+v", v.View)
	}

	if v.View.Attempts[0].Hint != "" {
		t.Errorf("a hint on an accepted delivery: %q", v.View.Attempts[0].Hint)
	}

	// A valid delivery the receiver refused carries the hint.
	refused := newDelivery(now.Add(2*time.Millisecond), 3, runStatusBody(t, "run-2", "queued", now), true)
	put(t, f.DB, refused, 401)
	var rv struct {
		View inspector.DetailView `json:"view"`
	}
	f.get(t, "/api/deliveries/"+refused.ID, &rv)
	if len(rv.View.Attempts) != 1 || !strings.Contains(rv.View.Attempts[0].Hint, "run `devhook check http://127.0.0.1:3000/hooks/service") {
		t.Errorf("refused valid delivery: view %+v", rv.View.Attempts)
	}

	// Binary body: hex, and a byte-exact download.
	bin := newDelivery(now.Add(time.Millisecond), 2, []byte{0x00, 0xff, 'a', 0x80, '<'}, false)
	bin.Header.Set("Content-Type", "application/octet-stream")
	put(t, f.DB, bin, 0)
	var bv struct {
		View inspector.DetailView `json:"view"`
	}
	f.get(t, "/api/deliveries/"+bin.ID, &bv)
	if bv.View.Body.UTF8 || bv.View.Body.Text != "" || !strings.HasPrefix(bv.View.Body.Hex, "00000000  00 ff 61 80 3c") || !strings.Contains(bv.View.Body.Hex, "|..a.<|") {
		t.Errorf("binary view = %+v", bv.View.Body)
	}
	res, err := f.HTTP.Client().Get(f.HTTP.URL + "/api/deliveries/" + bin.ID + "/body")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(got) != string(bin.Body) || res.Header.Get("Content-Type") != "application/octet-stream" ||
		!strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment") {
		t.Errorf("download: %q, %v", got, res.Header)
	}
	res, err = f.HTTP.Client().Get(f.HTTP.URL + "/api/deliveries/" + d.ID + "/attempts/1/body")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if string(got) != "OK" {
		t.Errorf("attempt body download = %q", got)
	}

	for _, path := range []string{
		"/api/deliveries/0190aaaa-0000-7000-8000-000000000000",
		"/api/deliveries/0190aaaa-0000-7000-8000-000000000000/body",
		"/api/deliveries/0190aaaa-0000-7000-8000-000000000000/curl",
		"/api/deliveries/" + d.ID + "/attempts/9/body",
		"/api/runs/no-such-run",
		"/api/nothing-here",
	} {
		var e struct{ Error string }
		if code := f.get(t, path, &e); code != http.StatusNotFound || e.Error == "" {
			t.Errorf("GET %s: status %d, error %q; want 404 with a message", path, code, e.Error)
		}
	}
}

func TestRunTimeline(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	base := time.Now().Add(-time.Hour)
	seq := 0
	add := func(run, step string, after time.Duration) {
		seq++
		put(t, f.DB, newDelivery(base.Add(after), seq, runStatusBody(t, run, step, base), true), 200)
	}
	add("run-good", "queued", 0)
	add("run-good", "running", 1500*time.Millisecond)
	add("run-good", "succeeded", 7*time.Second)
	add("run-odd", "queued", 10*time.Second)
	add("run-odd", "succeeded", 11*time.Second)
	add("run-odd", "running", 12*time.Second)
	add("run-gap", "queued", 20*time.Second)
	add("run-gap", "succeeded", 25*time.Second)
	add("run-gap", "succeeded", 26*time.Second)

	var good inspector.Timeline
	if code := f.get(t, "/api/runs/run-good", &good); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if len(good.Steps) != 3 || !good.Complete || len(good.Issues) != 0 || len(good.Missing) != 0 ||
		time.Duration(good.Steps[1].SincePrevious) != 1500*time.Millisecond || time.Duration(good.Total) != 7*time.Second {
		t.Errorf("run-good = %+v", good)
	}

	var odd inspector.Timeline
	f.get(t, "/api/runs/run-odd", &odd)
	if len(odd.Steps) != 3 || len(odd.Steps[2].Flags) != 1 || odd.Steps[2].Flags[0] != "out_of_order" || len(odd.Missing) != 0 || len(odd.Issues) != 1 {
		t.Errorf("run-odd = %+v", odd)
	}

	var gap inspector.Timeline
	f.get(t, "/api/runs/run-gap", &gap)
	if len(gap.Missing) != 1 || gap.Missing[0] != "running" || gap.Steps[2].Flags[0] != "duplicate" || !gap.Complete {
		t.Errorf("run-gap = %+v", gap)
	}

	var runs inspector.RunList
	f.get(t, "/api/runs", &runs)
	if len(runs.Items) != 3 || runs.Items[0].RunID != "run-gap" || runs.Items[2].RunID != "run-good" ||
		strings.Join(runs.Items[1].Statuses, ",") != "queued,succeeded,running" || runs.Scanned != 9 {
		t.Errorf("runs = %+v", runs)
	}
}

func TestSettings(t *testing.T) {
	known := false
	f := newFixture(t, fixtureOptions{config: func(c *inspector.Config) {
		c.Settings.SecretKnown = func() bool { return known }
		c.Settings.DataDir = "/home/dev/.devhook"
	}})
	var s inspector.SettingsView
	f.get(t, "/api/settings", &s)
	if s.SecretKnown || s.PublicURL != "https://relay.example.test/c/ch-test" || len(s.Forward) != 1 || s.Verify != "report" || !s.ReplayAvailable || s.Data != "/home/dev/.devhook" {
		t.Errorf("settings = %+v", s)
	}
	known = true // the secret arrived after start-up
	var raw map[string]any
	f.get(t, "/api/settings", &raw)
	if raw["secret_known"] != true {
		t.Errorf("settings after the secret arrived = %v", raw)
	}
	res, err := f.HTTP.Client().Get(f.HTTP.URL + "/api/settings")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Contains(string(b), testSecret) {
		t.Errorf("settings show the secret: %s", b)
	}
}

// The inspector's "Copy as curl" is export.CurlCommand, the command
// devhook deliveries export writes, to the first forward target (export's
// tests send it with the real curl).
func TestCurl(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	d := newDelivery(time.Now(), 1, []byte(`{"it's":"quoted"}`), true)
	d.Header.Add("X-Repeat", "one")
	d.Header.Add("X-Repeat", "two")
	put(t, f.DB, d, 0)
	res, err := f.HTTP.Client().Get(f.HTTP.URL + "/api/deliveries/" + d.ID + "/curl")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	cmd := string(b)
	target := f.Receiver.URL + "/hooks/service"
	if want := export.CurlCommand(d, target); cmd != want {
		t.Errorf("curl command:\n%s\nwant export's:\n%s", cmd, want)
	}
	for _, want := range []string{
		"curl -q -sS -i --http1.1 --path-as-is -g -X 'POST' '" + target + "'",
		"-H 'Service-Signature: " + d.Header.Get(devhook.SignatureHeader) + "'",
		"-H 'X-Repeat: one'", "-H 'X-Repeat: two'",
		`--data-binary '{"it'\''s":"quoted"}'`,
	} {
		if !strings.Contains(cmd, want) {
			t.Errorf("curl command lacks %q:\n%s", want, cmd)
		}
	}
	// ?to= sends it elsewhere, path and query appended.
	res, err = f.HTTP.Client().Get(f.HTTP.URL + "/api/deliveries/" + d.ID + "/curl?to=" + url.QueryEscape("http://127.0.0.1:9/other"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), "'http://127.0.0.1:9/other/hooks/service'") {
		t.Errorf("with ?to=: %s", b)
	}
}
