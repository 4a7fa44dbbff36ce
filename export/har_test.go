package export_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/export"
)

// harSpec is HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/) as
// a checker: every object the spec names, its fields, their types and
// whether the spec requires them. A field the spec does not name must
// start with "_" (the spec's rule for custom fields).
type harSpec map[string]harField

type harField struct {
	kind     string  // string, number, boolean, object, array
	required bool    // the spec does not mark it optional
	of       harSpec // object's fields, or an array's elements'
}

func req(kind string, of harSpec) harField { return harField{kind, true, of} }
func opt(kind string, of harSpec) harField { return harField{kind, false, of} }

var (
	harPair   = harSpec{"name": req("string", nil), "value": req("string", nil), "comment": opt("string", nil)}
	harCookie = harSpec{"name": req("string", nil), "value": req("string", nil), "path": opt("string", nil),
		"domain": opt("string", nil), "expires": opt("string", nil), "httpOnly": opt("boolean", nil),
		"secure": opt("boolean", nil), "comment": opt("string", nil)}
	harParam = harSpec{"name": req("string", nil), "value": opt("string", nil), "fileName": opt("string", nil),
		"contentType": opt("string", nil), "comment": opt("string", nil)}
	// params and text are both in the spec's list, and "mutually
	// exclusive": each is checked when present, and one must be (below).
	// encoding is not HAR 1.2's: it is the 1.3 proposal's, and what HAR
	// tools write for a binary body, as devhook does.
	harPostData = harSpec{"mimeType": req("string", nil), "params": opt("array", harParam), "text": opt("string", nil),
		"encoding": opt("string", nil), "comment": opt("string", nil)}
	harRequest = harSpec{"method": req("string", nil), "url": req("string", nil), "httpVersion": req("string", nil),
		"cookies": req("array", harCookie), "headers": req("array", harPair), "queryString": req("array", harPair),
		"postData": opt("object", harPostData), "headersSize": req("number", nil), "bodySize": req("number", nil),
		"comment": opt("string", nil)}
	harContent = harSpec{"size": req("number", nil), "compression": opt("number", nil), "mimeType": req("string", nil),
		"text": opt("string", nil), "encoding": opt("string", nil), "comment": opt("string", nil)}
	harResponse = harSpec{"status": req("number", nil), "statusText": req("string", nil), "httpVersion": req("string", nil),
		"cookies": req("array", harCookie), "headers": req("array", harPair), "content": req("object", harContent),
		"redirectURL": req("string", nil), "headersSize": req("number", nil), "bodySize": req("number", nil),
		"comment": opt("string", nil)}
	harCacheEntry = harSpec{"expires": opt("string", nil), "lastAccess": req("string", nil), "eTag": req("string", nil),
		"hitCount": req("number", nil), "comment": opt("string", nil)}
	harTimings = harSpec{"blocked": opt("number", nil), "dns": opt("number", nil), "connect": opt("number", nil),
		"send": req("number", nil), "wait": req("number", nil), "receive": req("number", nil), "ssl": opt("number", nil),
		"comment": opt("string", nil)}
	harEntry = harSpec{"pageref": opt("string", nil), "startedDateTime": req("string", nil), "time": req("number", nil),
		"request": req("object", harRequest), "response": req("object", harResponse),
		"cache":   req("object", harSpec{"beforeRequest": opt("object", harCacheEntry), "afterRequest": opt("object", harCacheEntry), "comment": opt("string", nil)}),
		"timings": req("object", harTimings), "serverIPAddress": opt("string", nil), "connection": opt("string", nil),
		"comment": opt("string", nil)}
	harCreator = harSpec{"name": req("string", nil), "version": req("string", nil), "comment": opt("string", nil)}
	harPage    = harSpec{"startedDateTime": req("string", nil), "id": req("string", nil), "title": req("string", nil),
		"pageTimings": req("object", harSpec{"onContentLoad": opt("number", nil), "onLoad": opt("number", nil), "comment": opt("string", nil)}),
		"comment":     opt("string", nil)}
	harRoot = harSpec{"log": req("object", harSpec{"version": req("string", nil), "creator": req("object", harCreator),
		"browser": opt("object", harCreator), "pages": opt("array", harPage), "entries": req("array", harEntry),
		"comment": opt("string", nil)})}
)

// checkHAR checks b against HAR 1.2: every required field present with
// its type, no field of another name that does not start with "_", and
// the rules the spec states in words.
func checkHAR(t *testing.T, b []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	var errs []string
	checkObject("", v, harRoot, &errs)
	for _, e := range errs {
		t.Error(e)
	}
	if len(errs) > 0 {
		return
	}
	log := v.(map[string]any)["log"].(map[string]any)
	if log["version"] != "1.2" {
		t.Errorf("log.version %v, want 1.2", log["version"])
	}
	for i, e := range log["entries"].([]any) {
		e := e.(map[string]any)
		at := fmt.Sprintf("entries[%d]", i)
		if _, err := time.Parse(time.RFC3339Nano, e["startedDateTime"].(string)); err != nil {
			t.Errorf("%s.startedDateTime is not ISO 8601: %v", at, err)
		}
		// time is the sum of the timings that are not -1 (ssl is within connect).
		sum := 0.0
		for k, x := range e["timings"].(map[string]any) {
			n, ok := x.(float64)
			switch {
			case !ok || k == "ssl" || k == "comment" || n == -1:
			case n < 0:
				t.Errorf("%s.timings.%s = %v: negative", at, k, n)
			default:
				sum += n
			}
		}
		if math.Abs(sum-e["time"].(float64)) > 0.001 {
			t.Errorf("%s.time %v is not the sum of its timings, %v", at, e["time"], sum)
		}
		r := e["request"].(map[string]any)
		if u, err := url.Parse(r["url"].(string)); err != nil || !u.IsAbs() || u.Fragment != "" {
			t.Errorf("%s.request.url %q is not an absolute URL without fragment", at, r["url"])
		}
		if p, ok := r["postData"].(map[string]any); ok {
			if _, text := p["text"]; !text {
				if _, params := p["params"]; !params {
					t.Errorf("%s.request.postData has neither text nor params", at)
				}
			}
		}
		for _, side := range []string{"request", "response"} {
			for _, k := range []string{"headersSize", "bodySize"} {
				if n := e[side].(map[string]any)[k].(float64); n < -1 || n != math.Trunc(n) {
					t.Errorf("%s.%s.%s = %v", at, side, k, n)
				}
			}
		}
	}
}

func checkObject(path string, v any, spec harSpec, errs *[]string) {
	m, ok := v.(map[string]any)
	if !ok {
		*errs = append(*errs, fmt.Sprintf("%s: %T, want an object", path, v))
		return
	}
	for _, k := range slices.Sorted(maps.Keys(spec)) {
		f := spec[k]
		x, ok := m[k]
		if !ok {
			if f.required {
				*errs = append(*errs, fmt.Sprintf("%s.%s: missing", path, k))
			}
			continue
		}
		checkValue(path+"."+k, x, f, errs)
	}
	for k := range m {
		if _, ok := spec[k]; !ok && !strings.HasPrefix(k, "_") {
			*errs = append(*errs, fmt.Sprintf("%s.%s: not a HAR 1.2 field, and not a custom one (\"_…\")", path, k))
		}
	}
}

func checkValue(path string, x any, f harField, errs *[]string) {
	ok := false
	switch f.kind {
	case "string":
		_, ok = x.(string)
	case "number":
		_, ok = x.(float64)
	case "boolean":
		_, ok = x.(bool)
	case "object":
		checkObject(path, x, f.of, errs)
		return
	case "array":
		var a []any
		if a, ok = x.([]any); ok && f.of != nil {
			for i, e := range a {
				checkObject(fmt.Sprintf("%s[%d]", path, i), e, f.of, errs)
			}
		}
	}
	if !ok {
		*errs = append(*errs, fmt.Sprintf("%s: %T, want a %s", path, x, f.kind))
	}
}

// The checker finds what it is there for: a HAR that misses a required
// field, has one of the wrong type or an unknown one fails it.
func TestCheckHAR_Fails(t *testing.T) {
	good := `{"log":{"version":"1.2","creator":{"name":"x","version":"1"},"entries":[{"startedDateTime":"2026-01-02T03:04:05.000Z","time":1,
"request":{"method":"GET","url":"http://h/","httpVersion":"HTTP/1.1","cookies":[],"headers":[],"queryString":[],"headersSize":-1,"bodySize":0},
"response":{"status":200,"statusText":"OK","httpVersion":"HTTP/1.1","cookies":[],"headers":[],"content":{"size":0,"mimeType":""},"redirectURL":"","headersSize":-1,"bodySize":0},
"cache":{},"timings":{"send":0,"wait":1,"receive":0}}]}}`
	var errs []string
	var v any
	json.Unmarshal([]byte(good), &v)
	checkObject("", v, harRoot, &errs)
	if len(errs) > 0 {
		t.Fatalf("a valid HAR fails: %v", errs)
	}
	for _, bad := range []struct{ from, to string }{
		{`"httpVersion":"HTTP/1.1","cookies":[],"headers":[],"queryString":[]`, `"httpVersion":"HTTP/1.1","cookies":[],"headers":[]`},
		{`"status":200`, `"status":"200"`},
		{`"cache":{},`, ``},
		{`"timings":{"send":0,`, `"timings":{`},
		{`"redirectURL":""`, `"redirectURL":"","encoding":"x"`},
		{`"headers":[]`, `"headers":[{"name":"a"}]`},
	} {
		var v any
		if err := json.Unmarshal([]byte(strings.Replace(good, bad.from, bad.to, 1)), &v); err != nil {
			t.Fatal(err)
		}
		var errs []string
		checkObject("", v, harRoot, &errs)
		if len(errs) == 0 {
			t.Errorf("%s → %s: passes", bad.from, bad.to)
		}
	}
}

// harDeliveries are deliveries with what a HAR must carry: a JSON body
// answered with a cookie and a redirect, a binary body answered with a
// binary one, one with a forward that got no answer and a replay re-signed,
// one never forwarded.
func harDeliveries() []*devhook.Delivery {
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
	return []*devhook.Delivery{
		{ID: "0190-json", ReceivedAt: at(1), Method: "POST", Path: "/hook", RawQuery: "a=1&b=x%20y&a=2&flag",
			Header: http.Header{"Content-Type": {"application/json"}, "Cookie": {"s=abc; t=def"}, "X-Repeat": {"one", "two"}, "Content-Length": {"13"}},
			Body:   []byte(`{"x":"<&>é"}`), Verdict: devhook.Verdict{Result: devhook.VerdictOK}, Event: devhook.Event{RunID: "run-1"},
			Attempts: []devhook.Attempt{{Seq: 1, Kind: devhook.AttemptForward, Made: devhook.MadeAsArrived, Target: "http://127.0.0.1:8080/base/hook?a=1&b=x%20y&a=2&flag",
				StartedAt: at(1).Add(time.Millisecond), Duration: devhook.Duration(1234567 * time.Nanosecond), Status: 303,
				Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Location": {"/next"}, "Set-Cookie": {"id=7; Path=/; HttpOnly; Secure"}},
				Body:   []byte("see other")}}},
		{ID: "0190-bin", ReceivedAt: at(2), Method: "PUT", Path: "/bin",
			Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: []byte{0, 1, 0xff, 0xfe, 'x'},
			Attempts: []devhook.Attempt{{Seq: 1, Kind: devhook.AttemptForward, Target: "http://127.0.0.1:8080/bin", StartedAt: at(2),
				Duration: devhook.Duration(2 * time.Millisecond), Status: 200, Header: http.Header{"Content-Type": {"image/png"}}, Body: []byte{0x89, 'P', 'N', 'G', 0, 0xff}}}},
		{ID: "0190-retry", ReceivedAt: at(3), Method: "POST", Path: "/r", Header: http.Header{"Service-Signature": {"t=1,v1=00"}}, Body: []byte("{}"),
			Attempts: []devhook.Attempt{
				{Seq: 1, Kind: devhook.AttemptForward, Target: "http://127.0.0.1:8080/r", StartedAt: at(3), Duration: devhook.Duration(time.Second), Error: "connection refused"},
				// A replay long after: its entry comes after the later delivery's.
				{Seq: 2, Kind: devhook.AttemptReplay, Made: devhook.MadeResigned, Target: "http://127.0.0.1:9090/r", StartedAt: at(60), Status: 204,
					Request: &devhook.Request{Method: "POST", Path: "/r", Header: http.Header{"Service-Signature": {"t=2,v1=11"}, "Content-Length": {"2"}}, Body: []byte("{}"), Resigned: true}},
			}},
		{ID: "0190-never", ReceivedAt: at(4), Method: "POST", Path: "/dropped", RawQuery: "q=1", Header: http.Header{}, Body: []byte("x")},
	}
}

// The HAR export: valid HAR 1.2, one entry per attempt in the order they
// started, and what it says decodes to what was recorded: each request as
// sent, each answer, bodies byte for byte (text, or base64), timings.
func TestHAR(t *testing.T) {
	ds := harDeliveries()
	b, err := export.HAR(ds, export.HAROptions{Version: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	checkHAR(t, b)
	var h struct {
		Log struct {
			Creator struct{ Name, Version string }
			Entries []struct {
				StartedDateTime string
				Time            float64
				Request         struct {
					Method, URL, HTTPVersion string
					Headers, QueryString     []struct{ Name, Value string }
					Cookies                  []struct{ Name, Value string }
					PostData                 *struct{ MimeType, Text, Encoding string }
					BodySize                 int
				}
				Response struct {
					Status     int
					StatusText string
					Headers    []struct{ Name, Value string }
					Cookies    []struct {
						Name, Value      string
						HTTPOnly, Secure bool
					}
					Content struct {
						Size                     int
						MimeType, Text, Encoding string
					}
					RedirectURL string
					BodySize    int
					Error       string `json:"_error"`
				}
				Timings struct{ Wait float64 }
				Devhook struct {
					Delivery string
					Attempt  int
				} `json:"_devhook"`
			}
		}
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	if h.Log.Creator.Name != "devhook" || h.Log.Creator.Version != "v1.2.3" {
		t.Errorf("creator %+v", h.Log.Creator)
	}
	var order []string
	for _, e := range h.Log.Entries {
		order = append(order, fmt.Sprintf("%s/%d", e.Devhook.Delivery, e.Devhook.Attempt))
	}
	if want := []string{"0190-json/1", "0190-bin/1", "0190-retry/1", "0190-never/0", "0190-retry/2"}; !slices.Equal(order, want) {
		t.Fatalf("entries %v, want %v", order, want)
	}
	decode := func(text, enc string) []byte {
		if enc == "base64" {
			b, err := base64.StdEncoding.DecodeString(text)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		if enc != "" {
			t.Fatalf("encoding %q", enc)
		}
		return []byte(text)
	}
	pairs := func(ps []struct{ Name, Value string }) http.Header {
		h := http.Header{}
		for _, p := range ps {
			h[p.Name] = append(h[p.Name], p.Value)
		}
		return h
	}
	for i, e := range h.Log.Entries {
		d := ds[slices.IndexFunc(ds, func(d *devhook.Delivery) bool { return d.ID == e.Devhook.Delivery })]
		method, header, body, target := d.Method, d.Header, d.Body, "http://unforwarded.invalid/dropped?q=1"
		var a *devhook.Attempt
		if e.Devhook.Attempt > 0 {
			a = &d.Attempts[e.Devhook.Attempt-1]
			target = a.Target
			if a.Request != nil {
				method, header, body = a.Request.Method, a.Request.Header, a.Request.Body
			}
		}
		r := e.Request
		if r.Method != method || r.URL != target || r.HTTPVersion != "HTTP/1.1" || r.BodySize != len(body) {
			t.Errorf("entry %d: request %s %s %s %d bytes", i, r.Method, r.URL, r.HTTPVersion, r.BodySize)
		}
		if got := pairs(r.Headers); !equalHeader(got, header) {
			t.Errorf("entry %d: request headers %v, want %v", i, got, header)
		}
		if r.PostData == nil || !bytes.Equal(decode(r.PostData.Text, r.PostData.Encoding), body) || r.PostData.MimeType != header.Get("Content-Type") {
			t.Errorf("entry %d: postData %+v, want %q", i, r.PostData, body)
		}
		if a == nil || a.Status == 0 {
			if e.Response.Status != 0 || e.Response.Error == "" || e.Response.BodySize != -1 {
				t.Errorf("entry %d: no answer, response %+v", i, e.Response)
			}
			continue
		}
		if e.Response.Status != a.Status || e.Response.StatusText != http.StatusText(a.Status) || !equalHeader(pairs(e.Response.Headers), a.Header) ||
			!bytes.Equal(decode(e.Response.Content.Text, e.Response.Content.Encoding), a.Body) || e.Response.Content.Size != len(a.Body) ||
			e.Response.BodySize != len(a.Body) || e.Response.Content.MimeType != a.Header.Get("Content-Type") {
			t.Errorf("entry %d: response %+v, want %d %v %q", i, e.Response, a.Status, a.Header, a.Body)
		}
		if want := math.Round(float64(a.Duration)/1e3) / 1e3; e.Time != want || e.Timings.Wait != want {
			t.Errorf("entry %d: time %v, wait %v, want %v", i, e.Time, e.Timings.Wait, want)
		}
		if got, _ := time.Parse(time.RFC3339Nano, e.StartedDateTime); !got.Equal(a.StartedAt.Truncate(time.Millisecond)) {
			t.Errorf("entry %d: startedDateTime %s, want %s", i, e.StartedDateTime, a.StartedAt)
		}
	}
	first := h.Log.Entries[0]
	if q := first.Request.QueryString; len(q) != 4 || q[0].Name != "a" || q[1].Value != "x y" || q[2].Value != "2" || q[3].Name != "flag" {
		t.Errorf("queryString %+v", q)
	}
	if c := first.Request.Cookies; len(c) != 2 || c[1].Name != "t" || c[1].Value != "def" {
		t.Errorf("request cookies %+v", c)
	}
	if c := first.Response.Cookies; len(c) != 1 || c[0].Name != "id" || !c[0].HTTPOnly || !c[0].Secure {
		t.Errorf("response cookies %+v", c)
	}
	if first.Response.RedirectURL != "/next" {
		t.Errorf("redirectURL %q", first.Response.RedirectURL)
	}
	if e := h.Log.Entries[1]; e.Request.PostData.Encoding != "base64" || e.Response.Content.Encoding != "base64" {
		t.Errorf("binary bodies not in base64: %+v %+v", e.Request.PostData, e.Response.Content)
	}
	// With --to, a delivery never forwarded is at that URL.
	u, _ := url.Parse("http://localhost:9/base")
	b, err = export.HAR(ds[3:], export.HAROptions{To: u})
	if err != nil || !bytes.Contains(b, []byte(`"url": "http://localhost:9/base/dropped?q=1"`)) {
		t.Errorf("with --to: %v\n%s", err, b)
	}
	checkHAR(t, b)
	// None at all is a valid, empty archive.
	b, _ = export.HAR(nil, export.HAROptions{})
	checkHAR(t, b)
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// A drop by a route of listen is an entry sent nowhere, as a delivery
// never forwarded, that says which route dropped it.
func TestHAR_DroppedByARoute(t *testing.T) {
	at := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	d := &devhook.Delivery{ID: "0190-dropped", ReceivedAt: at, Method: "POST", Path: "/x", Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{}`), Attempts: []devhook.Attempt{{Seq: 1, Kind: devhook.AttemptDrop, Target: devhook.RouteDrop, StartedAt: at,
			Route: &devhook.Route{Index: 2, Text: "header:X=y -> drop", Target: devhook.RouteDrop}}}}
	b, err := export.HAR([]*devhook.Delivery{d}, export.HAROptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkHAR(t, b)
	for _, want := range []string{`"url": "http://unforwarded.invalid/x"`, `dropped by route 2 (header:X=y -> drop): not forwarded`, `"kind": "drop"`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the HAR lacks %s:\n%s", want, b)
		}
	}
}
