package hint_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/hint"
)

// With the webhook known, a receiver that says Invalid signature to a
// delivery verified with the webhook's secret has another secret: the
// hint names the webhook and the command that prints its secret.
func TestAdvise_AnotherSecretNamesTheWebhook(t *testing.T) {
	at := time.Now()
	d := &devhook.Delivery{ID: "d1", Verdict: devhook.Verdict{Result: devhook.VerdictOK, T: at.UnixMilli()}}
	a := &devhook.Attempt{Status: 401, Body: []byte("Unauthorized: Invalid signature"), StartedAt: at, Target: "http://localhost:8080/hook"}
	got := hint.Advise(d, a, hint.Context{Webhook: "devhook-42"})
	if got.Kind != hint.AnotherSecret || !strings.Contains(got.Text, "another secret than webhook devhook-42's") ||
		!strings.Contains(got.Text, "`devhook webhooks secret devhook-42`") {
		t.Fatalf("advice %+v", got)
	}
	// Without the webhook, the general hint.
	if got := hint.Advise(d, a, hint.Context{}); got.Kind != hint.RefusedValid || !strings.Contains(got.Text, "devhook check http://localhost:8080/hook") {
		t.Fatalf("advice without a webhook %+v", got)
	}
	// Other refusals keep their own cause, webhook or not.
	a.Body = []byte("Unauthorized: Invalid Time Value")
	if got := hint.Advise(d, a, hint.Context{Webhook: "devhook-42"}); got.Kind != hint.RefusedValid || !strings.Contains(got.Text, "milliseconds") {
		t.Fatalf("time refusal %+v", got)
	}
	a.Body = []byte("Missing Signature")
	if got := hint.Advise(d, a, hint.Context{Webhook: "devhook-42"}); got.Kind != hint.RefusedValid || !strings.Contains(got.Text, "another header") {
		t.Fatalf("missing refusal %+v", got)
	}
}

// A receiver that accepts a delivery that failed verification, as it was
// sent, does not check signatures; one re-signed on the way carried a
// valid signature, so its acceptance says nothing.
func TestAdvise_AcceptedAFailedSignature(t *testing.T) {
	at := time.Now()
	sig := "t=1,v1=00"
	tests := []struct {
		name    string
		verdict string
		req     *devhook.Request
		status  int
		want    []string // nil: no hint
	}{
		{"invalid", devhook.VerdictInvalidSignature, nil, 200, []string{"invalid_signature → 200", "does not check signatures", "another secret"}},
		{"missing", devhook.VerdictMissingSignature, nil, 204, []string{"without a signature", "missing_signature → 204"}},
		{"malformed", devhook.VerdictInvalidFormat, nil, 200, []string{"malformed", "invalid_format → 200"}},
		{"old t", devhook.VerdictInvalidTime, nil, 200, []string{"5-minute window", "does not check t"}},
		{"valid", devhook.VerdictOK, nil, 200, nil},
		{"no secret known", devhook.VerdictUnchecked, nil, 200, nil},
		{"refused", devhook.VerdictInvalidSignature, nil, 401, nil},
		{"re-signed on the way", devhook.VerdictInvalidTime, &devhook.Request{Resigned: true}, 200, nil},
		{"another signature header sent", devhook.VerdictInvalidSignature, &devhook.Request{Header: http.Header{"Service-Signature": {"t=2,v1=11"}}}, 200, nil},
		{"the same signature header sent", devhook.VerdictInvalidSignature, &devhook.Request{Header: http.Header{"Service-Signature": {sig}, "X-Extra": {"1"}}}, 200, []string{"does not check signatures"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &devhook.Delivery{ID: "d1", Header: http.Header{"Service-Signature": {sig}}, Verdict: devhook.Verdict{Result: tt.verdict}}
			a := &devhook.Attempt{Status: tt.status, StartedAt: at, Target: "http://localhost:8080/hook", Request: tt.req}
			got := hint.Advise(d, a, hint.Context{})
			if tt.want == nil {
				if got.Text != "" {
					t.Fatalf("hint %q, want none", got.Text)
				}
				return
			}
			if got.Kind != hint.NotVerifying {
				t.Errorf("kind %q", got.Kind)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.Text, w) {
					t.Errorf("hint %q does not say %q", got.Text, w)
				}
			}
			if hint.Text(d, a) != got.Text {
				t.Errorf("Text and Advise differ")
			}
		})
	}
	d := &devhook.Delivery{Header: http.Header{"Service-Signature": {sig}}, Verdict: devhook.Verdict{Result: devhook.VerdictInvalidSignature}}
	a := &devhook.Attempt{Status: 200, Target: "http://localhost:8080/hook"}
	if got := hint.Advise(d, a, hint.Context{Webhook: "devhook-42"}); !strings.Contains(got.Text, "webhook devhook-42's secret") {
		t.Errorf("with a webhook: %q", got.Text)
	}
}

// How an attempt was made decides whose a refusal is: an edited body (or
// signature header) sent without a fresh signature is refused rightly; a
// re-signed edit refused is the receiver's matter, as a delivery is. An
// attempt recorded before devhook kept how it was made reads as before.
func TestAdvise_EditedReplays(t *testing.T) {
	at := time.Now()
	body := []byte(`{"event_type":"run.status"}`)
	sig := "t=1,v1=00"
	h := http.Header{"Service-Signature": {sig}, "Content-Type": {"application/json"}}
	other := http.Header{"Service-Signature": {sig}, "Content-Type": {"application/json"}, "X-Edited": {"1"}}
	req := func(header http.Header, b string, resigned bool) *devhook.Request {
		return &devhook.Request{Method: "POST", Path: "/hook", Header: header, Body: []byte(b), Resigned: resigned}
	}
	tests := []struct {
		name   string
		made   string
		req    *devhook.Request
		status int
		t      time.Time // the original signature's t
		kind   string
		want   []string
	}{
		{"body edited, not re-signed, refused", devhook.MadeEdited, req(h, `{"edited":true}`, false), 401, at, hint.EditedNotResigned,
			[]string{"the body was edited and not re-signed: the receiver was right to refuse it; replay with re-signing to test the handler"}},
		{"body edited, not re-signed, refused late", devhook.MadeEdited, req(h, `{"edited":true}`, false), 401, at.Add(-time.Hour), hint.EditedNotResigned,
			[]string{"the body was edited and not re-signed"}},
		{"signature header edited, refused", devhook.MadeEdited, req(http.Header{"Service-Signature": {"t=2,v1=11"}}, string(body), false), 403, at, hint.EditedNotResigned,
			[]string{"the service-signature header was edited and not re-signed"}},
		{"signature header removed, refused", devhook.MadeEdited, req(http.Header{}, string(body), false), 401, at, hint.EditedNotResigned,
			[]string{"the service-signature header was edited"}},
		{"another header edited, refused", devhook.MadeEdited, req(other, string(body), false), 401, at, hint.RefusedValid,
			[]string{"refused an edited replay whose signature is valid", "devhook check"}},
		{"body edited, re-signed, refused", devhook.MadeEdited, req(h, `{"edited":true}`, true), 401, at, hint.RefusedValid,
			[]string{"refused an edited replay whose signature is valid"}},
		{"body edited, not re-signed, accepted", devhook.MadeEdited, req(h, `{"edited":true}`, false), 200, at, hint.NotVerifying,
			[]string{"accepted an edited body sent with its original signature", "does not check signatures"}},
		{"body edited, re-signed, accepted", devhook.MadeEdited, req(h, `{"edited":true}`, true), 200, at, "", nil},
		// A signature edited by hand may sign the edited body: devhook
		// cannot tell, and says no more than it knows.
		{"body and signature edited, accepted", devhook.MadeEdited, req(http.Header{"Service-Signature": {"t=2,v1=11"}}, `{"edited":true}`, false), 200, at, "", nil},
		{"body and signature edited, refused", devhook.MadeEdited, req(http.Header{"Service-Signature": {"t=2,v1=11"}}, `{"edited":true}`, false), 401, at, hint.EditedNotResigned,
			[]string{"the service-signature header was edited and not re-signed: unless the edited one signs the body sent"}},
		{"re-signed, refused", devhook.MadeResigned, req(h, string(body), true), 401, at, hint.RefusedValid,
			[]string{"refused a delivery whose signature is valid"}},
		{"as arrived, refused", devhook.MadeAsArrived, nil, 401, at, hint.RefusedValid,
			[]string{"refused a delivery whose signature is valid"}},
		{"recorded before made was kept", "", req(h, `{"edited":true}`, false), 401, at, hint.RefusedValid,
			[]string{"refused a delivery whose signature is valid"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &devhook.Delivery{ID: "d1", Header: h, Body: body, Verdict: devhook.Verdict{Result: devhook.VerdictOK, T: tt.t.UnixMilli()}}
			a := &devhook.Attempt{Kind: devhook.AttemptReplay, Made: tt.made, Request: tt.req, Status: tt.status, StartedAt: at,
				Target: "http://localhost:8080/hook", Body: []byte("Unauthorized")}
			got := hint.Advise(d, a, hint.Context{})
			if got.Kind != tt.kind {
				t.Errorf("advice %+v, want kind %q", got, tt.kind)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.Text, w) {
					t.Errorf("hint %q does not say %q", got.Text, w)
				}
			}
		})
	}
}

func TestHint(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_000)
	ok := devhook.Verdict{Result: devhook.VerdictOK, T: at.UnixMilli()}
	bad := devhook.Verdict{Result: devhook.VerdictInvalidSignature, T: at.UnixMilli()}
	attempt := func(status int, body string, started time.Time, resigned bool) *devhook.Attempt {
		a := &devhook.Attempt{Status: status, Body: []byte(body), StartedAt: started, Target: "http://localhost:8080/hook"}
		if resigned {
			a.Request = &devhook.Request{Resigned: true}
		}
		return a
	}
	tests := []struct {
		name string
		v    devhook.Verdict
		a    *devhook.Attempt
		want []string // "" alone: no hint
	}{
		{"accepted", ok, attempt(200, "ok", at, false), []string{""}},
		{"not forwarded", ok, nil, []string{""}},
		{"refused, signature bad too", bad, attempt(401, "Unauthorized: Invalid signature", at, false), []string{""}},
		{"500 is not a refusal of the signature", ok, attempt(500, "Internal Server Error", at, false), []string{""}},
		{"time", ok, attempt(401, "Unauthorized: Invalid Time Value", at, false),
			[]string{"devhook check http://localhost:8080/hook", "Invalid Time Value", "milliseconds"}},
		{"signature", ok, attempt(401, "Unauthorized: Invalid signature", at, false),
			[]string{"signature is valid", "another secret", "re-serialized"}},
		{"missing", ok, attempt(403, "Missing Signature", at, false), []string{"another header"}},
		{"format", ok, attempt(401, "Unauthorized: Invalid Signature Format", at, false), []string{"t=<milliseconds>,v1=<hex>"}},
		{"no text", ok, attempt(401, "", at, false), []string{"run `devhook check"}},
		{"replayed old, not re-signed", ok, attempt(401, "Unauthorized: Invalid Time Value", at.Add(6*time.Minute), false),
			[]string{"6m0s old", "--resign"}},
		{"replayed old, re-signed", ok, attempt(401, "Unauthorized: Invalid Time Value", at.Add(6*time.Minute), true),
			[]string{"devhook check", "milliseconds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hint.Text(&devhook.Delivery{ID: "d1", Verdict: tt.v}, tt.a)
			if len(tt.want) == 1 && tt.want[0] == "" {
				if got != "" {
					t.Fatalf("hint %q, want none", got)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Fatalf("hint %q does not say %q", got, w)
				}
			}
		})
	}
}
