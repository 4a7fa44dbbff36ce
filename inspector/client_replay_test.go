package inspector_test

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/signature"
)

// The client carries a replay's edits to the running agent as given: an
// empty body (not "no body given"), bytes JSON strings cannot hold, and
// headers with several values; the agent sends them with Content-Length
// as sent and records the attempt as edited.
func TestClientReplayCarriesEdits(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	body := runStatusBody(t, "run-c", "running", time.Now())
	d := newDelivery(time.Now(), 1, body, true)
	put(t, f.DB, d, 200)
	c := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: f.HTTP.Client()}

	edited := d.Header.Clone()
	edited["X-Trace"] = []string{"1", "2"}
	for _, tt := range []struct {
		name   string
		opt    devhook.ReplayOptions
		body   []byte
		header http.Header // the headers that must reach the receiver, with their values
	}{
		{"empty body", devhook.ReplayOptions{HasBody: true}, []byte{}, nil},
		{"empty body, as a non-nil slice", devhook.ReplayOptions{Body: []byte{}, HasBody: true}, []byte{}, nil},
		{"bytes that are not UTF-8", devhook.ReplayOptions{Body: []byte{0xff, 0x00, 0xfe, '\n'}, HasBody: true}, []byte{0xff, 0x00, 0xfe, '\n'}, nil},
		{"headers with several values", devhook.ReplayOptions{Header: edited}, body, http.Header{"X-Trace": {"1", "2"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := len(f.Receiver.requests())
			a, err := c.Replay(t.Context(), d.ID, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			if a.Made != devhook.MadeEdited || !a.Resigned() || a.Status != 200 {
				t.Errorf("attempt made %q, re-signed %v, status %d; want edited, re-signed, 200", a.Made, a.Resigned(), a.Status)
			}
			got := f.Receiver.requests()
			if len(got) != n+1 {
				t.Fatalf("the receiver got %d requests, want 1", len(got)-n)
			}
			r := got[n]
			if !bytes.Equal(r.Body, tt.body) {
				t.Errorf("the receiver got body %q, want %q", r.Body, tt.body)
			}
			if cl := r.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(tt.body)) {
				t.Errorf("Content-Length %s, want %d", cl, len(tt.body))
			}
			if a.Request == nil || a.Request.Header.Get("Content-Length") != strconv.Itoa(len(tt.body)) {
				t.Errorf("recorded request %+v, want Content-Length %d", a.Request, len(tt.body))
			}
			for k, vs := range tt.header {
				if got := r.Header.Values(k); !slices.Equal(got, vs) {
					t.Errorf("the receiver got %s %q, want %q", k, got, vs)
				}
			}
			if v := signature.Verify(testSecret, r.Header.Get(devhook.SignatureHeader), r.Body, time.Now()); !v.OK() {
				t.Errorf("the edit was not signed for the body sent: %s", v.Reason)
			}
		})
	}
}

// A header edit (set_header, remove_header) is made by the agent on the
// recorded headers: those it does not name reach the receiver byte for
// byte, values that are not UTF-8 too, which a whole header through JSON
// could not carry; what the agent computes or drops is refused.
func TestClientReplayEditsHeaders(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	body := runStatusBody(t, "run-h", "running", time.Now())
	d := newDelivery(time.Now(), 1, body, true)
	d.Header["X-Latin"] = []string{"caf\xe9"}
	d.Header["X-Twice"] = []string{"1", "2"}
	put(t, f.DB, d, 200)
	c := &inspector.Client{BaseURL: f.HTTP.URL, HTTP: f.HTTP.Client()}

	a, err := c.Replay(t.Context(), d.ID, devhook.ReplayOptions{SetHeader: http.Header{"x-trace": {"1", "2"}, "X-TWICE": {"3"}}, RemoveHeader: []string{"user-agent"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Made != devhook.MadeEdited || !a.Resigned() || a.Status != 200 {
		t.Errorf("attempt made %q, re-signed %v, status %d; want edited, re-signed, 200", a.Made, a.Resigned(), a.Status)
	}
	got := f.Receiver.requests()
	r := got[len(got)-1]
	for k, want := range map[string][]string{"X-Latin": {"caf\xe9"}, "X-Trace": {"1", "2"}, "X-Twice": {"3"}, "User-Agent": nil, "Content-Type": {"application/json"}} {
		if v := r.Header.Values(k); !slices.Equal(v, want) {
			t.Errorf("the receiver got %s %q, want %q", k, v, want)
		}
	}
	if !bytes.Equal(r.Body, body) {
		t.Errorf("the receiver got body %q", r.Body)
	}

	n := len(f.Receiver.requests())
	for _, opt := range []devhook.ReplayOptions{
		{SetHeader: http.Header{"Content-Length": {"1"}}},
		{RemoveHeader: []string{"connection"}},
		{SetHeader: http.Header{"X-A": {"1"}}, RemoveHeader: []string{"x-a"}},
		{RemoveHeader: []string{"bad name"}},
	} {
		if _, err := c.Replay(t.Context(), d.ID, opt); devhook.ErrorCode(err) != devhook.EINVALID {
			t.Errorf("replay with %+v: %v, want it refused as invalid", opt, err)
		}
	}
	if len(f.Receiver.requests()) != n {
		t.Error("a refused edit reached the receiver")
	}
}
