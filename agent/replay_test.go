package agent_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
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
