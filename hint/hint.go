// Package hint says, for one attempt of a recorded delivery, what its
// receiver's answer most likely means and what to do: a refusal of a
// delivery devhook verified, an acceptance of one that failed verification,
// an edited replay sent without a fresh signature. It reads only what is
// recorded. It is apart from package check (the conformance suite) so that
// the inspector, scenario playback and listen's printer reach it without
// the suite.
package hint

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// The kinds of Advice. A view of many deliveries (listen's terminal) shows
// each kind once: the fix is the same for every delivery.
const (
	// OldSignature: a delivery sent with its original signature after
	// the receiver's window; the receiver is right.
	OldSignature = "old-signature"
	// AnotherSecret: the receiver says Invalid signature to a
	// delivery devhook verified with the webhook's secret.
	AnotherSecret = "another-secret"
	// RefusedValid: the receiver refused a delivery devhook verified,
	// for another reason or none it names.
	RefusedValid = "refused-valid"
	// NotVerifying: the receiver accepted a delivery whose signature
	// failed devhook's verification, or an edited body sent with the
	// original signature, which does not match it.
	NotVerifying = "not-verifying"
	// EditedNotResigned: the receiver refused a replay whose body (or
	// signature) was edited and not signed again; the receiver is right.
	EditedNotResigned = "edited-not-re-signed"
)

// Context is what the one who shows a hint knows beyond the delivery.
type Context struct {
	// Webhook is the id of the service's webhook whose secret devhook
	// verifies with (listen --register or --webhook); "" when the secret
	// came from --secret or is not known.
	Webhook string
}

// Advice is a hint and its kind.
type Advice struct {
	Kind string
	Text string
}

// Text says what to do when a receiver refused (401 or 403) a delivery
// whose signature devhook verified, and the most likely cause when the
// answer's text names it, or that the receiver was right (an edited body
// sent without a fresh signature, an old signature); or that the receiver
// does not check signatures when it accepted (2xx) one that failed
// verification, or an edited body with the original signature. It returns "" for
// any other delivery or attempt. It is computed where it is shown, from
// what is recorded: nothing new is stored.
func Text(d *devhook.Delivery, a *devhook.Attempt) string {
	return Advise(d, a, Context{}).Text
}

// Advise is Text with what the caller knows (the webhook), and the hint's
// kind.
func Advise(d *devhook.Delivery, a *devhook.Attempt, hc Context) Advice {
	if d == nil || a == nil {
		return Advice{}
	}
	if a.Status >= 200 && a.Status < 300 {
		return notVerifying(d, a, hc)
	}
	if !d.Verdict.OK() || (a.Status != 401 && a.Status != 403) {
		return Advice{}
	}
	resigned := a.Resigned()
	switch editedSignature(d, a) {
	case "body":
		return Advice{EditedNotResigned, "the body was edited and not re-signed: the receiver was right to refuse it; " +
			"replay with re-signing to test the handler (the signature sent signs the original body, not the one sent)"}
	case "header":
		return Advice{EditedNotResigned, "the service-signature header was edited and not re-signed: unless the edited one signs the body sent " +
			"with the receiver's secret, the receiver was right to refuse it; replay with re-signing to test the handler"}
	}
	if !resigned && d.Verdict.T > 0 && !a.StartedAt.IsZero() {
		// A replay sent with the original signature after the window:
		// the receiver is right.
		if age := time.Duration(a.StartedAt.UnixMilli()-d.Verdict.T) * time.Millisecond; age >= signature.Window {
			return Advice{OldSignature, "the receiver refused a signature that was " + age.Round(time.Second).String() +
				" old when sent; receivers accept 5 minutes: replay it re-signed (devhook replay " + d.ID + " --resign)"}
		}
	}
	body := strings.ToLower(string(a.Body))
	if len(body) > 4096 {
		body = body[:4096]
	}
	if hc.Webhook != "" && strings.Contains(body, "signature") && !strings.Contains(body, "missing") && !strings.Contains(body, "format") {
		// devhook verified with the webhook's own secret, so the
		// receiver's is another: the one fix, named.
		return Advice{AnotherSecret, "your receiver has another secret than webhook " + hc.Webhook + "'s (it says Invalid signature to deliveries signed with it): " +
			"give it the secret that `devhook webhooks secret " + hc.Webhook + "` prints"}
	}
	h := "your receiver refused a delivery whose signature is valid; run `devhook check " + a.Target + " --secret …` to find out why"
	if a.Edited() {
		h = "your receiver refused an edited replay whose signature is valid (the edit may be the cause: compare the request as sent with the delivery); run `devhook check " + a.Target + " --secret …` to find out why"
	}
	switch {
	case strings.Contains(body, "time"):
		h += " (it says Invalid Time Value: most likely it reads t as seconds, the interface's t is Unix milliseconds; or its clock is off)"
	case strings.Contains(body, "missing"):
		h += " (it says Missing Signature: it reads another header than service-signature, or a proxy in front of it drops the header)"
	case strings.Contains(body, "format"):
		h += " (it says Invalid Signature Format: it expects another form than t=<milliseconds>,v1=<hex>)"
	case strings.Contains(body, "signature"):
		h += " (it says Invalid signature: it has another secret, uses the secret decoded, or verifies a re-serialized body instead of the raw bytes)"
	}
	return Advice{RefusedValid, h}
}

// notVerifying is the hint for a receiver that accepted (2xx) a delivery
// whose signature failed verification, as it was sent to it: not one
// devhook re-signed on the way (a queued delivery past its window, a
// replay), which carried a valid signature.
func notVerifying(d *devhook.Delivery, a *devhook.Attempt, hc Context) Advice {
	if d.Verdict.OK() {
		if editedSignature(d, a) == "body" {
			return Advice{NotVerifying, "your receiver accepted an edited body sent with its original signature, which does not match it (edited, not re-signed → " +
				strconv.Itoa(a.Status) + "): it does not check signatures, or checks them on another body than the raw bytes"}
		}
		return Advice{}
	}
	if r := a.Request; r != nil && (r.Resigned ||
		(r.Header != nil && r.Header.Get(devhook.SignatureHeader) != d.Header.Get(devhook.SignatureHeader))) {
		// Re-signed, or sent with another signature header (edit &
		// replay, --header): not the signature that was verified.
		return Advice{}
	}
	arrow := " (" + d.Verdict.Result + " → " + strconv.Itoa(a.Status) + ")"
	var h string
	switch d.Verdict.Result {
	case devhook.VerdictMissingSignature:
		h = "your receiver accepted a delivery without a signature" + arrow + ": it does not check signatures"
	case devhook.VerdictInvalidFormat:
		h = "your receiver accepted a malformed signature" + arrow + ": it does not check signatures"
	case devhook.VerdictInvalidTime:
		h = "your receiver accepted a signature outside the 5-minute window" + arrow + ": it does not check t, or signatures at all"
	case devhook.VerdictInvalidSignature:
		whose := "devhook's --secret"
		if hc.Webhook != "" {
			whose = "webhook " + hc.Webhook + "'s secret"
		}
		h = "your receiver accepted a signature that does not match " + whose + arrow + ": it does not check signatures, or has another secret"
	default:
		return Advice{}
	}
	return Advice{NotVerifying, h}
}

// editedSignature says what of attempt a, an edited replay of d sent
// without a fresh signature, makes the signature it carried other than
// the service's over the body sent: "header" when the service-signature
// header was edited (whatever the body: devhook cannot tell whether the
// edited one signs it), "body" when only the body was (the original
// signature signs the original body, so it cannot match); "" when neither
// was, when a was re-signed, or was not edited (or was recorded before
// devhook kept how an attempt was made).
func editedSignature(d *devhook.Delivery, a *devhook.Attempt) string {
	if !a.Edited() || a.Resigned() || a.Request == nil {
		return ""
	}
	switch {
	case !slices.Equal(a.Request.Header.Values(devhook.SignatureHeader), d.Header.Values(devhook.SignatureHeader)):
		return "header"
	case !bytes.Equal(a.Request.Body, d.Body):
		return "body"
	}
	return ""
}
