package check

import (
	"strings"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// Hint says what to do when a receiver refused (401 or 403) a delivery
// whose signature devhook verified, and the most likely cause when the
// answer's text names it. It returns "" for any other delivery or attempt.
// It is computed where it is shown, from what is recorded: nothing new is
// stored.
func Hint(d *devhook.Delivery, a *devhook.Attempt) string {
	if d == nil || a == nil || !d.Verdict.OK() || (a.Status != 401 && a.Status != 403) {
		return ""
	}
	resigned := a.Request != nil && a.Request.Resigned
	if !resigned && d.Verdict.T > 0 && !a.StartedAt.IsZero() {
		// A replay sent with the original signature after the window:
		// the receiver is right.
		if age := time.Duration(a.StartedAt.UnixMilli()-d.Verdict.T) * time.Millisecond; age >= signature.Window {
			return "the receiver refused a signature that was " + age.Round(time.Second).String() +
				" old when sent; receivers accept 5 minutes: replay it re-signed (devhook replay " + d.ID + " --resign)"
		}
	}
	h := "your receiver refused a delivery whose signature is valid; run `devhook check " + a.Target + " --secret …` to find out why"
	body := strings.ToLower(string(a.Body))
	if len(body) > 4096 {
		body = body[:4096]
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
	return h
}
