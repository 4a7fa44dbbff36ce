package inspector_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
	ref "github.com/devhook/devhook/receiver"
)

// A replay through the API records what it sent and how it was made, and
// the detail's hint says whose the refusal is: an edited body sent with
// its original signature is refused rightly; a re-signed edit refused is
// the receiver's (or its secret's) matter, as before.
func TestReplayRecordsHowItWasMade(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	body := runStatusBody(t, "run-m", "running", time.Now())
	d := newDelivery(time.Now(), 1, body, true)
	d.Header.Set("Content-Length", strconv.Itoa(len(body))) // as the relay records it
	put(t, f.DB, d, 200)
	// Receivers that check signatures as the reference does: with the
	// webhook's secret, and with another.
	right := httptest.NewServer(ref.New(ref.Config{Secret: testSecret}))
	defer right.Close()
	wrong := httptest.NewServer(ref.New(ref.Config{Secret: "whsec-another"}))
	defer wrong.Close()

	replay := func(req string) devhook.Attempt {
		t.Helper()
		res, err := f.HTTP.Client().Post(f.HTTP.URL+"/api/deliveries/"+d.ID+"/replay", "application/json", strings.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var a devhook.Attempt
		if err := json.Unmarshal(b, &a); res.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("replay %s: %d %s", req, res.StatusCode, b)
		}
		if !strings.Contains(string(b), `"made":"`+a.Made+`"`) {
			t.Errorf("the answer does not say how the attempt was made: %s", b)
		}
		return a
	}
	detail := func(seq int) (devhook.Attempt, inspector.AttemptView) {
		t.Helper()
		var v struct {
			devhook.Delivery
			View inspector.DetailView `json:"view"`
		}
		f.get(t, "/api/deliveries/"+d.ID, &v)
		if len(v.Attempts) < seq {
			t.Fatalf("%d attempts, want %d", len(v.Attempts), seq)
		}
		return v.Attempts[seq-1], v.View.Attempts[seq-1]
	}
	header := func(extra string) string {
		h := map[string][]string{}
		for k, vs := range d.Header {
			h[k] = vs
		}
		b, _ := json.Marshal(h)
		return strings.TrimSuffix(string(b), "}") + extra + "}"
	}
	const edited = `{\"edited\":true}` // 15 bytes
	for _, tt := range []struct {
		name, req string
		made      string
		resigned  bool
		status    int
		length    int    // the Content-Length recorded
		hint      string // in the detail's hint; "" for none
		notHint   string
	}{
		{"body edited, not re-signed", `{"resign":false,"to":"` + right.URL + `","body_text":"` + edited + `"}`,
			devhook.MadeEdited, false, 401, 15, "the body was edited and not re-signed: the receiver was right to refuse it; replay with re-signing to test the handler", "whose signature is valid"},
		{"body edited with the delivery's headers, not re-signed", `{"resign":false,"to":"` + right.URL + `","header":` + header("") + `,"body_text":"` + edited + `"}`,
			devhook.MadeEdited, false, 401, 15, "the body was edited and not re-signed", "whose signature is valid"},
		{"body edited, re-signed", `{"to":"` + right.URL + `","body_text":"` + edited + `"}`,
			devhook.MadeEdited, true, 200, 15, "", ""},
		{"body edited, re-signed, refused", `{"resign":true,"to":"` + wrong.URL + `","body_text":"` + edited + `"}`,
			devhook.MadeEdited, true, 401, 15, "your receiver refused an edited replay whose signature is valid", "was right"},
		{"headers edited, not re-signed", `{"resign":false,"to":"` + right.URL + `","header":` + header(`,"X-Edited":"1"`) + `}`,
			devhook.MadeEdited, false, 200, len(body), "", ""},
		{"signature edited, not re-signed", `{"resign":false,"to":"` + right.URL + `","header":{"Service-Signature":"t=1,v1=00"}}`,
			devhook.MadeEdited, false, 401, len(body), "the service-signature header was edited and not re-signed", "whose signature is valid"},
		{"re-signed", `{"to":"` + right.URL + `"}`, devhook.MadeResigned, true, 200, len(body), "", ""},
		{"as arrived", `{"resign":false,"to":"` + right.URL + `"}`, devhook.MadeAsArrived, false, 200, len(body), "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := replay(tt.req)
			if a.Made != tt.made || a.Resigned() != tt.resigned || a.Status != tt.status {
				t.Errorf("attempt made %q, re-signed %v, status %d; want %q, %v, %d", a.Made, a.Resigned(), a.Status, tt.made, tt.resigned, tt.status)
			}
			rec, view := detail(a.Seq)
			if rec.Made != tt.made || rec.Resigned() != tt.resigned {
				t.Errorf("recorded attempt made %q, re-signed %v", rec.Made, rec.Resigned())
			}
			sentHeader := d.Header
			if rec.Request != nil {
				sentHeader = rec.Request.Header
			}
			if got := sentHeader.Values("Content-Length"); len(got) != 1 || got[0] != strconv.Itoa(tt.length) {
				t.Errorf("recorded Content-Length %q, want %d", got, tt.length)
			}
			if tt.hint == "" && view.Hint != "" || !strings.Contains(view.Hint, tt.hint) || tt.notHint != "" && strings.Contains(view.Hint, tt.notHint) {
				t.Errorf("hint %q, want one with %q and without %q", view.Hint, tt.hint, tt.notHint)
			}
		})
	}

	// An edited replay recorded before devhook kept how an attempt was
	// made reads as it did.
	old := devhook.Attempt{Kind: devhook.AttemptReplay, Target: right.URL + d.Path, StartedAt: time.Now(), Status: 401,
		Request: &devhook.Request{Method: "POST", Path: d.Path, Header: d.Header, Body: []byte(`{"edited":true}`)}}
	a, err := f.DB.AddAttempt(d.ID, old)
	if err != nil {
		t.Fatal(err)
	}
	rec, view := detail(a.Seq)
	if rec.Made != "" || !strings.Contains(view.Hint, "your receiver refused a delivery whose signature is valid") {
		t.Errorf("an old attempt reads made %q, hint %q", rec.Made, view.Hint)
	}
}
