package agent

// Verify: the signature check, the first stage of a delivery's path
// (live.go). Its verdict is recorded with the delivery; with --verify
// enforce, a delivery that fails it is answered as the reference receiver
// would answer it, and not forwarded.

import (
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// verify checks d's signature. A queued delivery is judged at the time the
// relay received it.
func (a *Agent) verify(d *devhook.Delivery) devhook.Verdict {
	if a.cfg.Verify == VerifyOff {
		return devhook.Verdict{Result: devhook.VerdictUnchecked, Reason: "verification is off"}
	}
	now := a.cfg.Now
	if d.Queued && !d.ReceivedAt.IsZero() {
		at := d.ReceivedAt
		now = func() time.Time { return at }
	}
	v := signature.Verifier{Skew: a.cfg.Skew, Now: now}
	return v.Verify(a.getSecret(), d.Header.Get(devhook.SignatureHeader), d.Body)
}

// rejects returns d's verdict when it must not be forwarded (--verify
// enforce, and the check failed), or nil.
func (a *Agent) rejects(d *devhook.Delivery) *devhook.Verdict {
	if a.cfg.Verify != VerifyEnforce || d.Verdict.OK() {
		return nil
	}
	v := d.Verdict
	return &v
}
