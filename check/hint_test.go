package check_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/check"
)

// With the webhook known, a receiver that says Invalid signature to a
// delivery verified with the webhook's secret has another secret: the
// hint names the webhook and the command that prints its secret.
func TestAdvise_AnotherSecretNamesTheWebhook(t *testing.T) {
	at := time.Now()
	d := &devhook.Delivery{ID: "d1", Verdict: devhook.Verdict{Result: devhook.VerdictOK, T: at.UnixMilli()}}
	a := &devhook.Attempt{Status: 401, Body: []byte("Unauthorized: Invalid signature"), StartedAt: at, Target: "http://localhost:8080/hook"}
	got := check.Advise(d, a, check.HintContext{Webhook: "devhook-42"})
	if got.Kind != check.HintAnotherSecret || !strings.Contains(got.Text, "another secret than webhook devhook-42's") ||
		!strings.Contains(got.Text, "`devhook webhooks secret devhook-42`") {
		t.Fatalf("advice %+v", got)
	}
	// Without the webhook, the general hint.
	if got := check.Advise(d, a, check.HintContext{}); got.Kind != check.HintRefusedValid || !strings.Contains(got.Text, "devhook check http://localhost:8080/hook") {
		t.Fatalf("advice without a webhook %+v", got)
	}
	// Other refusals keep their own cause, webhook or not.
	a.Body = []byte("Unauthorized: Invalid Time Value")
	if got := check.Advise(d, a, check.HintContext{Webhook: "devhook-42"}); got.Kind != check.HintRefusedValid || !strings.Contains(got.Text, "milliseconds") {
		t.Fatalf("time refusal %+v", got)
	}
	a.Body = []byte("Missing Signature")
	if got := check.Advise(d, a, check.HintContext{Webhook: "devhook-42"}); got.Kind != check.HintRefusedValid || !strings.Contains(got.Text, "another header") {
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
			got := check.Advise(d, a, check.HintContext{})
			if tt.want == nil {
				if got.Text != "" {
					t.Fatalf("hint %q, want none", got.Text)
				}
				return
			}
			if got.Kind != check.HintNotVerifying {
				t.Errorf("kind %q", got.Kind)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.Text, w) {
					t.Errorf("hint %q does not say %q", got.Text, w)
				}
			}
			if check.Hint(d, a) != got.Text {
				t.Errorf("Hint and Advise differ")
			}
		})
	}
	d := &devhook.Delivery{Header: http.Header{"Service-Signature": {sig}}, Verdict: devhook.Verdict{Result: devhook.VerdictInvalidSignature}}
	a := &devhook.Attempt{Status: 200, Target: "http://localhost:8080/hook"}
	if got := check.Advise(d, a, check.HintContext{Webhook: "devhook-42"}); !strings.Contains(got.Text, "webhook devhook-42's secret") {
		t.Errorf("with a webhook: %q", got.Text)
	}
}
