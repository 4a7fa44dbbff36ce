package inspector_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/export"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/signature"
)

func TestHostCheck(t *testing.T) {
	f := newFixture(t, fixtureOptions{config: func(c *inspector.Config) { c.AllowedHosts = []string{"devbox.lan"} }})
	tests := []struct {
		host string
		want int
	}{
		{"127.0.0.1:4040", http.StatusOK},
		{"127.0.0.1", http.StatusOK},
		{"127.9.8.7:1234", http.StatusOK},
		{"localhost:4040", http.StatusOK},
		{"LOCALHOST", http.StatusOK},
		{"localhost.:4040", http.StatusOK},
		{"app.localhost:4040", http.StatusOK},
		{"[::1]:4040", http.StatusOK},
		{"[::1]", http.StatusOK},
		{"devbox.lan:4040", http.StatusOK}, // Config.AllowedHosts
		{"", http.StatusForbidden},
		{"evil.example", http.StatusForbidden},
		{"evil.example:4040", http.StatusForbidden},
		{"127.0.0.1.evil.example", http.StatusForbidden},
		{"localhost.evil.example", http.StatusForbidden},
		{"0.0.0.0:4040", http.StatusForbidden},
		{"192.168.1.20:4040", http.StatusForbidden},
		{"[::ffff:10.0.0.1]:4040", http.StatusForbidden},
		{"devbox.lan.evil.example", http.StatusForbidden},
	}
	for _, path := range []string{"/", "/api/settings", "/api/deliveries"} {
		for _, tt := range tests {
			r := httptest.NewRequest(http.MethodGet, path, nil)
			r.Host = tt.host
			w := httptest.NewRecorder()
			f.Server.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Errorf("GET %s with Host %q: status %d, want %d (%s)", path, tt.host, w.Code, tt.want, w.Body)
			}
			if tt.want == http.StatusForbidden && !strings.Contains(w.Body.String(), `"error"`) {
				t.Errorf("GET %s with Host %q: body %q is not a JSON error", path, tt.host, w.Body)
			}
		}
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "a.b.localhost": true, "127.0.0.1": true, "127.255.0.1": true, "::1": true, "::1%lo": true,
		"localhostx": false, "0.0.0.0": false, "10.0.0.1": false, "::": false, "example.com": false, "": false,
	} {
		if got := inspector.IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestCrossOriginRefusal(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	d := newDelivery(time.Now().Add(-time.Minute), 1, runStatusBody(t, "run-x", "queued", time.Now()), true)
	put(t, f.DB, d, 200)

	tests := []struct {
		name   string
		method string
		header map[string]string
		want   int
	}{
		{"cross-site fetch", http.MethodPost, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"same-site other port", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:9999"}, http.StatusForbidden},
		{"old browser with a foreign Origin", http.MethodPost, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"form post from a rebinding page", http.MethodPost, map[string]string{"Origin": "http://attacker.example:4040", "Content-Type": "text/plain"}, http.StatusForbidden},
		{"the page itself", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "SELF"}, http.StatusOK},
		{"curl: no browser headers", http.MethodPost, nil, http.StatusOK},
		{"cross-site GET is a read", http.MethodGet, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.Replayer.callCount()
			path := "/api/deliveries/" + d.ID + "/replay"
			var body io.Reader
			if tt.method == http.MethodGet {
				path = "/api/deliveries/" + d.ID
			} else {
				body = strings.NewReader(`{}`)
			}
			req, err := http.NewRequest(tt.method, f.HTTP.URL+path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tt.header {
				if v == "SELF" {
					v = f.HTTP.URL
				}
				req.Header.Set(k, v)
			}
			res, err := f.HTTP.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.want, b)
			}
			calls := f.Replayer.callCount() - before
			switch {
			case tt.method == http.MethodPost && tt.want == http.StatusForbidden && calls != 0:
				t.Errorf("a refused request reached the replayer")
			case tt.method == http.MethodPost && tt.want == http.StatusOK && calls != 1:
				t.Errorf("replayer called %d times, want 1", calls)
			}
		})
	}
}

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

func TestReplay(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	d := newDelivery(time.Now().Add(-10*time.Minute), 1, runStatusBody(t, "run-r", "running", time.Now()), true)
	put(t, f.DB, d, 200)

	post := func(path, body string) (int, []byte) {
		t.Helper()
		res, err := f.HTTP.Client().Post(f.HTTP.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}

	// Default: re-signed (the secret is known), to the first forward
	// target: a header that verifies with the secret, with a fresh t.
	before := time.Now()
	code, b := post("/api/deliveries/"+d.ID+"/replay", `{}`)
	var a devhook.Attempt
	if err := json.Unmarshal(b, &a); code != http.StatusOK || err != nil {
		t.Fatalf("replay: %d %s", code, b)
	}
	if a.Seq != 2 || a.Kind != devhook.AttemptReplay || a.Status != 200 || a.Request == nil || !a.Request.Resigned ||
		a.Target != f.Receiver.URL+d.Path {
		t.Errorf("attempt = %+v", a)
	}
	if c := f.Replayer.lastCall(); c.ID != d.ID || c.Opt.Resign != nil || c.Opt.HasBody || c.Opt.Header != nil || c.Opt.To != "" {
		t.Errorf("replayer got %+v", c)
	}
	got := f.Receiver.requests()
	if len(got) != 1 || string(got[0].Body) != string(d.Body) {
		t.Fatalf("receiver saw %+v; want the stored body", got)
	}
	sent := got[0].Header.Get(devhook.SignatureHeader)
	assertFreshSignature(t, sent, got[0].Body, before)
	if sent == d.Header.Get(devhook.SignatureHeader) {
		t.Errorf("a re-signed replay sent the original signature %q", sent)
	}

	// As is: the original header, byte for byte, though it is 10
	// minutes old.
	code, b = post("/api/deliveries/"+d.ID+"/replay", `{"resign":false}`)
	if code != http.StatusOK {
		t.Fatalf("as-is replay: %d %s", code, b)
	}
	got = f.Receiver.requests()
	last := got[len(got)-1]
	if want := d.Header.Values(devhook.SignatureHeader); !slices.Equal(last.Header.Values(devhook.SignatureHeader), want) {
		t.Errorf("as-is replay sent signature %q, want the original %q", last.Header.Values(devhook.SignatureHeader), want)
	}
	for _, k := range []string{"Content-Type", "User-Agent"} {
		if !slices.Equal(last.Header.Values(k), d.Header.Values(k)) {
			t.Errorf("as-is replay sent %s %q, want %q", k, last.Header.Values(k), d.Header.Values(k))
		}
	}
	if string(last.Body) != string(d.Body) {
		t.Errorf("as-is replay changed the body")
	}

	// An edited body, re-signed: the signature covers the edited bytes.
	before = time.Now()
	code, b = post("/api/deliveries/"+d.ID+"/replay", `{"body_text":"{\"edited\":1}"}`)
	if code != http.StatusOK {
		t.Fatalf("edited re-signed replay: %d %s", code, b)
	}
	got = f.Receiver.requests()
	last = got[len(got)-1]
	if string(last.Body) != `{"edited":1}` {
		t.Errorf("edited replay sent %q", last.Body)
	}
	assertFreshSignature(t, last.Header.Get(devhook.SignatureHeader), last.Body, before)

	// Edited: body, headers, target, as-is.
	code, b = post("/api/deliveries/"+d.ID+"/replay",
		`{"resign":false,"to":"`+f.Receiver.URL+`","header":{"X-One":"1","X-Many":["a","b"]},"body_text":"{\"edited\":true}"}`)
	if code != http.StatusOK {
		t.Fatalf("edited replay: %d %s", code, b)
	}
	c := f.Replayer.lastCall()
	if c.Opt.Resign == nil || *c.Opt.Resign || !c.Opt.HasBody || string(c.Opt.Body) != `{"edited":true}` ||
		c.Opt.To != f.Receiver.URL || c.Opt.Header.Get("X-One") != "1" || len(c.Opt.Header.Values("X-Many")) != 2 {
		t.Errorf("replayer got %+v", c.Opt)
	}
	got = f.Receiver.requests()
	if last := got[len(got)-1]; string(last.Body) != `{"edited":true}` || last.Header.Get("X-One") != "1" ||
		!slices.Equal(last.Header.Values("X-Many"), []string{"a", "b"}) || last.Path != d.Path {
		t.Errorf("receiver saw %+v", last)
	}

	code, b = post("/api/deliveries/"+d.ID+"/replay", `{"body_base64":"AP8="}`)
	if code != http.StatusOK || string(f.Replayer.lastCall().Opt.Body) != "\x00\xff" {
		t.Errorf("base64 body replay: %d %s", code, b)
	}
	if got := f.Receiver.requests(); string(got[len(got)-1].Body) != "\x00\xff" {
		t.Errorf("base64 body replay sent %q", got[len(got)-1].Body)
	}

	var stored devhook.Delivery
	f.get(t, "/api/deliveries/"+d.ID, &stored)
	if len(stored.Attempts) != 6 {
		t.Errorf("stored attempts = %d, want 6 (forward and five replays)", len(stored.Attempts))
	}

	for _, tt := range []struct {
		path, body string
		want       int
	}{
		{"/api/deliveries/" + d.ID + "/replay", `{"body_text":"a","body_base64":"YQ=="}`, 400},
		{"/api/deliveries/" + d.ID + "/replay", `{"to":"ftp://x"}`, 400},
		{"/api/deliveries/" + d.ID + "/replay", `{"header":{"Bad Name":"x"}}`, 400},
		{"/api/deliveries/" + d.ID + "/replay", `{"header":{"X":"a\r\nInjected: 1"}}`, 400},
		{"/api/deliveries/" + d.ID + "/replay", `{"body_base64":"%%%"}`, 400},
		{"/api/deliveries/" + d.ID + "/replay", `{"unknown":1}`, 400},
		{"/api/deliveries/" + d.ID + "/replay", `not json`, 400},
		{"/api/deliveries/0190aaaa-0000-7000-8000-000000000000/replay", `{}`, 404},
	} {
		n := f.Replayer.callCount()
		code, b := post(tt.path, tt.body)
		if code != tt.want || !strings.Contains(string(b), `"error"`) {
			t.Errorf("POST %s %s: %d %s, want %d", tt.path, tt.body, code, b, tt.want)
		}
		if f.Replayer.callCount() != n {
			t.Errorf("POST %s %s reached the replayer", tt.path, tt.body)
		}
	}

	// No replayer: 503 with a JSON error.
	g := newFixture(t, fixtureOptions{noReplayer: true})
	put(t, g.DB, d, 200)
	res, err := g.HTTP.Client().Post(g.HTTP.URL+"/api/deliveries/"+d.ID+"/replay", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"error"`) {
		t.Errorf("replay without a replayer: %d %s", res.StatusCode, b)
	}
}

// assertFreshSignature checks that header verifies over body with the
// secret, with a t no older than since.
func assertFreshSignature(t *testing.T, header string, body []byte, since time.Time) {
	t.Helper()
	if v := signature.Verify(testSecret, header, body, time.Now()); !v.OK() {
		t.Errorf("signature %q does not verify over %q: %s", header, body, v.Reason)
	}
	p, err := signature.Parse(header)
	if err != nil {
		t.Fatalf("signature %q: %v", header, err)
	}
	if at := time.UnixMilli(p.T); at.Before(since.Truncate(time.Millisecond)) || at.After(time.Now()) {
		t.Errorf("signature t %v is not fresh (replay started at %v)", at, since)
	}
}

// failingReplayer answers every replay with err.
type failingReplayer struct{ err error }

func (r failingReplayer) Replay(context.Context, string, devhook.ReplayOptions) (devhook.Attempt, error) {
	return devhook.Attempt{}, r.err
}

func TestReplayErrorCodes(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{devhook.Errorf(devhook.EINVALID, "cannot re-sign: no signing secret is known"), 400},
		{devhook.Errorf(devhook.ENOTFOUND, "gone"), 404},
		{errors.New("disk on fire"), 500},
	} {
		f := newFixture(t, fixtureOptions{config: func(c *inspector.Config) { c.Replayer = failingReplayer{tt.err} }})
		d := newDelivery(time.Now(), 1, []byte(`{}`), true)
		put(t, f.DB, d, 0)
		res, err := f.HTTP.Client().Post(f.HTTP.URL+"/api/deliveries/"+d.ID+"/replay", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error string }
		json.NewDecoder(res.Body).Decode(&e)
		res.Body.Close()
		if res.StatusCode != tt.want || !strings.Contains(e.Error, tt.err.Error()) {
			t.Errorf("replay failing with %v: %d %q, want %d", tt.err, res.StatusCode, e.Error, tt.want)
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

func TestPageAndHeaders(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for path, ctype := range map[string]string{"/": "text/html", "/js/main.js": "javascript", "/js/pages/delivery.js": "javascript", "/style.css": "text/css"} {
		res, err := f.HTTP.Client().Get(f.HTTP.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), ctype) || len(b) == 0 {
			t.Errorf("GET %s: %d %q", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
		// Asked again with its ETag, a file the browser has is a 304.
		etag := res.Header.Get("ETag")
		if len(etag) < 10 || res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: ETag %q, Cache-Control %q", path, etag, res.Header.Get("Cache-Control"))
			continue
		}
		req, _ := http.NewRequest("GET", f.HTTP.URL+path, nil)
		req.Header.Set("If-None-Match", etag)
		again, err := f.HTTP.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		again.Body.Close()
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %s: %d, want 304", path, etag, again.StatusCode)
		}
	}
	if _, err := inspector.New(inspector.Config{}); err == nil {
		t.Error("New without a store succeeded")
	}
}

// sseClient reads events from /api/events.
type sseClient struct {
	res *http.Response
	r   *bufio.Reader
}

func openEvents(t *testing.T, base string) *sseClient {
	t.Helper()
	res, err := http.Get(base + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	c := &sseClient{res: res, r: bufio.NewReader(res.Body)}
	if ev, _ := c.next(t); ev != "ready" {
		t.Fatalf("first event %q, want ready", ev)
	}
	return c
}

// next returns the next event's name and data, skipping comments.
func (c *sseClient) next(t *testing.T) (event, data string) {
	t.Helper()
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the event stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && event != "":
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
}

func TestEventStream(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	c1 := openEvents(t, f.HTTP.URL)
	c2 := openEvents(t, f.HTTP.URL)
	if n := f.Server.Subscribers(); n != 2 {
		t.Fatalf("subscribers = %d, want 2", n)
	}
	d := newDelivery(time.Now(), 1, runStatusBody(t, "run-e", "queued", time.Now()), true)
	s := put(t, f.DB, d, 0)
	f.Server.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: s})
	for _, c := range []*sseClient{c1, c2} {
		ev, data := c.next(t)
		var got devhook.Change
		if err := json.Unmarshal([]byte(data), &got); err != nil || ev != "delivery" || got.Kind != devhook.ChangeDelivery || got.Summary.ID != d.ID || got.Summary.Event.RunID != "run-e" {
			t.Errorf("event %q %s (%v)", ev, data, err)
		}
	}
	a := devhook.Attempt{Seq: 1, Kind: devhook.AttemptForward, Status: 204}
	f.Server.Publish(devhook.Change{Kind: devhook.ChangeAttempt, Summary: s, Attempt: &a})
	if ev, data := c1.next(t); ev != "attempt" || !strings.Contains(data, `"status":204`) {
		t.Errorf("event %q %s", ev, data)
	}

	// A page that goes away leaves no stream behind.
	c1.res.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Server.WaitSubscribers(ctx, 1); err != nil {
		t.Fatalf("after a client left: %v", err)
	}
}

func TestSlowSubscriberDoesNotBlockPublish(t *testing.T) {
	f := newFixture(t, fixtureOptions{config: func(c *inspector.Config) { c.StreamBuffer = 4 }})
	// A client that connects and never reads.
	conn, err := net.Dial("tcp", f.HTTP.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Server.WaitSubscribers(ctx, 1); err != nil {
		t.Fatalf("the stream did not open: %v", err)
	}
	big := devhook.Summary{ID: "x", Path: "/" + strings.Repeat("p", 64<<10)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 { // 128 MiB: far more than any socket buffer
			f.Server.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: big})
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	if err := f.Server.WaitSubscribers(ctx, 0); err != nil {
		t.Fatalf("the slow subscriber was not disconnected: %v", err)
	}
}

func TestCloseEndsStreams(t *testing.T) {
	db := MustOpenDB(t)
	s, err := inspector.New(inspector.Config{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	c := openEvents(t, base)

	s.Close()
	if _, err := c.r.ReadString(0); err == nil || !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
		t.Errorf("the stream did not end on Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after Close: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	res, err := http.Get(base + "/api/events")
	if err == nil {
		res.Body.Close()
		t.Errorf("events after Shutdown: %d", res.StatusCode)
	}
}

// A page that stops reading its live stream (a real client whose socket
// buffers fill) is disconnected once a write has waited StreamWriteTimeout:
// the stream's goroutine ends and its connection closes, instead of both
// waiting for ever on a write.
func TestStreamThatStopsReadingIsCut(t *testing.T) {
	db := MustOpenDB(t)
	var logs sync.Map
	s, err := inspector.New(inspector.Config{Store: db, StreamBuffer: 1 << 16,
		// The client never reads again: a short bound bets on nothing.
		StreamWriteTimeout: 200 * time.Millisecond,
		Logf:               func(format string, args ...any) { logs.Store(fmt.Sprintf(format, args...), true) }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	var once sync.Once
	hs := &http.Server{Handler: s, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			once.Do(func() { close(closed) })
		}
	}}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The smallest receive buffer, so that the server's writes block soon.
	if err := conn.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitSubscribers(ctx, 1); err != nil {
		t.Fatalf("the stream did not open: %v", err)
	}
	// Far more than the socket buffers hold, far less than the stream's
	// own buffer: the hub keeps the subscriber, so only the write deadline
	// can end the stream.
	big := devhook.Summary{ID: "x", Path: "/" + strings.Repeat("p", 64<<10)}
	for range 512 { // 32 MiB
		s.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: big})
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the stream of a client that stopped reading still holds its connection")
	}
	if err := s.WaitSubscribers(ctx, 0); err != nil {
		t.Fatalf("the stream of a client that stopped reading is still live: %v", err)
	}
	found := false
	logs.Range(func(k, _ any) bool {
		found = found || strings.Contains(k.(string), "stopped reading the live stream")
		return true
	})
	if !found {
		t.Error("the cut is not logged")
	}
}
