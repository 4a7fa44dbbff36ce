package agent_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/hint"
	"github.com/devhook/devhook/signature"
	"github.com/devhook/devhook/storage"
)

func TestReplay(t *testing.T) {
	rec, recv := newRecorder(t)
	db, err := storage.Open(filepath.Join(t.TempDir(), "d.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := time.Now().Add(-time.Hour)
	body := []byte(`{"event_type":"run.status","data":{"run_id":"r1","status_v2":"running"}}`)
	origSig := signature.Sign(secret, old, body)
	d := &devhook.Delivery{ID: "0190a000-0000-7000-8000-000000000001", ReceivedAt: old, Method: "POST", Path: "/hook", RawQuery: "a=1",
		Header: http.Header{"Service-Signature": {origSig}, "X-Multi": {"1", "2"}}, Body: body}
	if _, err := db.PutDelivery(d); err != nil {
		t.Fatal(err)
	}
	yes, no := true, false

	tests := []struct {
		name      string
		secret    string
		forward   []string
		opt       devhook.ReplayOptions
		wantErr   string
		wantValid bool // the receiver's check of what it got passes now
		wantBody  string
		wantURI   string
	}{
		{name: "default re-signs when the secret is known", secret: secret, forward: []string{recv.URL}, wantValid: true, wantURI: "/hook?a=1"},
		{name: "as is", secret: secret, forward: []string{recv.URL}, opt: devhook.ReplayOptions{Resign: &no}, wantValid: false, wantURI: "/hook?a=1"},
		{name: "no secret: as is by default", forward: []string{recv.URL}, wantValid: false, wantURI: "/hook?a=1"},
		{name: "re-sign without a secret", forward: []string{recv.URL}, opt: devhook.ReplayOptions{Resign: &yes}, wantErr: devhook.EINVALID},
		{name: "edited body is re-signed", secret: secret, forward: []string{recv.URL},
			opt: devhook.ReplayOptions{Body: []byte(`{"edited":true}`), HasBody: true}, wantValid: true, wantBody: `{"edited":true}`, wantURI: "/hook?a=1"},
		{name: "to another target", secret: secret, opt: devhook.ReplayOptions{To: recv.URL + "/base"}, wantValid: true, wantURI: "/base/hook?a=1"},
		{name: "offline: where it went last time", secret: secret, wantValid: true, wantURI: "/base/hook?a=1"},
		{name: "unknown id", secret: secret, forward: []string{recv.URL}, wantErr: devhook.ENOTFOUND},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ag, err := agent.New(agent.Config{Store: db, Secret: tt.secret, Forward: tt.forward})
			if err != nil {
				t.Fatal(err)
			}
			id := d.ID
			if tt.wantErr == devhook.ENOTFOUND {
				id = "0190a000-0000-7000-8000-0000000000ff"
			}
			before := len(rec.requests())
			at, err := ag.Replay(context.Background(), id, tt.opt)
			if tt.wantErr != "" {
				if devhook.ErrorCode(err) != tt.wantErr {
					t.Fatalf("err %v, want code %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := rec.waitFor(t, before+1)[before]
			if got.RequestURI != tt.wantURI {
				t.Errorf("request URI %s, want %s", got.RequestURI, tt.wantURI)
			}
			wantBody := string(body)
			if tt.wantBody != "" {
				wantBody = tt.wantBody
			}
			if string(got.Body) != wantBody || len(got.Header["X-Multi"]) != 2 {
				t.Errorf("receiver got %q with headers %v", got.Body, got.Header)
			}
			v := signature.Verify(secret, got.Header.Get(devhook.SignatureHeader), got.Body, time.Now())
			if v.OK() != tt.wantValid {
				t.Errorf("signature at the receiver: %s (%s)", v.Result, v.Reason)
			}
			if at.Kind != devhook.AttemptReplay || at.Status != 200 || at.Seq == 0 {
				t.Errorf("attempt %+v", at)
			}
			if (at.Request != nil && at.Request.Resigned) != tt.wantValid {
				t.Errorf("attempt request %+v", at.Request)
			}
			stored, _ := db.Delivery(d.ID)
			if last := stored.LastAttempt(); last == nil || last.Seq != at.Seq {
				t.Errorf("attempt not recorded")
			}
		})
	}
}

// Every replay records what was really sent and how it was made from the
// delivery: the recorded request (or the delivery itself, as arrived) is
// what the receiver got, header for header, Content-Length included; an
// edited body sent with its original signature is "edited", not
// re-signed, and its refusal is the receiver's right, not its fault.
func TestReplayRecordsWhatWasSent(t *testing.T) {
	var mu sync.Mutex
	var got []seen
	// The receiver checks signatures as the reference does.
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.RequestURI, r.Header.Clone(), b})
		mu.Unlock()
		if v := signature.Verify(secret, r.Header.Get(devhook.SignatureHeader), b, time.Now()); !v.OK() {
			http.Error(w, v.Text, v.Status)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer recv.Close()
	db, err := storage.Open(filepath.Join(t.TempDir(), "d.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	body := []byte(`{"event_type":"run.status","data":{"run_id":"r1","status_v2":"running","application_id":"app-1"}}`)
	d := &devhook.Delivery{ID: "0190a000-0000-7000-8000-000000000002", ReceivedAt: now, Method: "POST", Path: "/hook", RawQuery: "a=1",
		Header: http.Header{"Service-Signature": {signature.Sign(secret, now, body)}, "Content-Type": {"application/json"},
			"Content-Length": {strconv.Itoa(len(body))}, "X-Multi": {"1", "2"}},
		Body: body}
	d.Verdict = signature.Verify(secret, d.Header.Get(devhook.SignatureHeader), body, now)
	if _, err := db.PutDelivery(d); err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.Config{Store: db, Secret: secret, Forward: []string{recv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	edited := []byte(`{"edited":true}`) // 15 bytes
	withHeader := func(k, v string) http.Header {
		h := d.Header.Clone()
		h[k] = []string{v}
		return h
	}
	yes, no := true, false
	tests := []struct {
		name     string
		opt      devhook.ReplayOptions
		made     string
		resigned bool
		status   int
		hint     string // the kind of hint.Advise's hint; "" for none
	}{
		{"body edited, not re-signed", devhook.ReplayOptions{Resign: &no, Body: edited, HasBody: true},
			devhook.MadeEdited, false, 401, hint.EditedNotResigned},
		{"body edited, re-signed", devhook.ReplayOptions{Resign: &yes, Body: edited, HasBody: true},
			devhook.MadeEdited, true, 200, ""},
		{"body edited with the form's headers, Content-Length kept", devhook.ReplayOptions{Resign: &no, Header: withHeader("Content-Length", "327"), Body: edited, HasBody: true},
			devhook.MadeEdited, false, 401, hint.EditedNotResigned},
		{"signature header edited, not re-signed", devhook.ReplayOptions{Resign: &no, Header: withHeader("Service-Signature", "t=1,v1=00")},
			devhook.MadeEdited, false, 401, hint.EditedNotResigned},
		{"another header edited, not re-signed", devhook.ReplayOptions{Resign: &no, Header: withHeader("X-Edited", "1")},
			devhook.MadeEdited, false, 200, ""},
		{"headers edited, re-signed", devhook.ReplayOptions{Resign: &yes, Header: withHeader("X-Edited", "1")},
			devhook.MadeEdited, true, 200, ""},
		{"emptied body, not re-signed", devhook.ReplayOptions{Resign: &no, Body: []byte{}, HasBody: true},
			devhook.MadeEdited, false, 401, hint.EditedNotResigned},
		{"the same body and headers given", devhook.ReplayOptions{Resign: &no, Header: d.Header.Clone(), Body: body, HasBody: true},
			devhook.MadeAsArrived, false, 200, ""},
		{"as arrived", devhook.ReplayOptions{Resign: &no}, devhook.MadeAsArrived, false, 200, ""},
		{"re-signed", devhook.ReplayOptions{}, devhook.MadeResigned, true, 200, ""},
		{"to another URL, as arrived", devhook.ReplayOptions{Resign: &no, To: recv.URL + "/base"}, devhook.MadeAsArrived, false, 200, ""},
		{"to another URL, edited", devhook.ReplayOptions{Resign: &no, To: recv.URL + "/base", Body: edited, HasBody: true},
			devhook.MadeEdited, false, 401, hint.EditedNotResigned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			before := len(got)
			mu.Unlock()
			at, err := ag.Replay(context.Background(), d.ID, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			if len(got) != before+1 {
				mu.Unlock()
				t.Fatalf("the receiver got %d requests, want 1", len(got)-before)
			}
			sent := got[before]
			mu.Unlock()
			if at.Made != tt.made || at.Resigned() != tt.resigned || at.Status != tt.status {
				t.Errorf("attempt made %q, re-signed %v, status %d; want %q, %v, %d", at.Made, at.Resigned(), at.Status, tt.made, tt.resigned, tt.status)
			}
			if (at.Request == nil) != (tt.made == devhook.MadeAsArrived) {
				t.Errorf("attempt made %q records request %+v", at.Made, at.Request)
			}
			stored, err := db.Delivery(d.ID)
			if err != nil {
				t.Fatal(err)
			}
			rec := stored.LastAttempt()
			if rec.Seq != at.Seq || rec.Made != at.Made || rec.Resigned() != at.Resigned() {
				t.Errorf("recorded attempt %d made %q, re-signed %v; returned %d %q %v", rec.Seq, rec.Made, rec.Resigned(), at.Seq, at.Made, at.Resigned())
			}
			assertRecordedAsSent(t, stored, rec, sent)
			if adv := hint.Advise(stored, rec, hint.Context{}); adv.Kind != tt.hint {
				t.Errorf("hint %q (%s), want kind %q", adv.Text, adv.Kind, tt.hint)
			}
		})
	}
}

// assertRecordedAsSent checks that attempt a of d records the request the
// receiver got: a.Request, or d itself when a has none.
func assertRecordedAsSent(t *testing.T, d *devhook.Delivery, a *devhook.Attempt, got seen) {
	t.Helper()
	method, path, query, header, body := d.Method, d.Path, d.RawQuery, d.Header, d.Body
	if r := a.Request; r != nil {
		method, path, query, header, body = r.Method, r.Path, r.RawQuery, r.Header, r.Body
	}
	u, err := url.Parse(a.Target)
	if err != nil {
		t.Fatal(err)
	}
	if got.Method != method || !strings.HasSuffix(got.RequestURI, path+"?"+query) || u.RequestURI() != got.RequestURI {
		t.Errorf("receiver got %s %s; recorded %s %s?%s to %s", got.Method, got.RequestURI, method, path, query, a.Target)
	}
	if !bytes.Equal(got.Body, body) {
		t.Errorf("receiver got body %q; recorded %q", got.Body, body)
	}
	for k, vs := range header {
		if !slices.Equal(got.Header[k], vs) {
			t.Errorf("header %s: receiver got %q; recorded %q", k, got.Header[k], vs)
		}
	}
	for k, vs := range got.Header {
		if _, ok := header[k]; !ok {
			t.Errorf("header %s: receiver got %q; not recorded", k, vs)
		}
	}
}
