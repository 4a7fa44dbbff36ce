package inspector_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/signature"
)

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
