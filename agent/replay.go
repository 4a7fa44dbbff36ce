package agent

import (
	"context"
	"net/url"

	"github.com/devhook/devhook"
)

// Replay sends stored delivery id again and records the attempt. By default
// it goes to the first forward target, re-signed with a fresh t when the
// secret is known; opt changes that.
func (a *Agent) Replay(ctx context.Context, id string, opt devhook.ReplayOptions) (devhook.Attempt, error) {
	d, err := a.cfg.Store.Delivery(id)
	if err != nil {
		return devhook.Attempt{}, err
	}
	resign := a.SecretKnown()
	if opt.Resign != nil {
		resign = *opt.Resign
	}
	if resign && !a.SecretKnown() {
		return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "cannot re-sign: no signing secret is known")
	}
	var target *url.URL
	to := ""
	switch {
	case opt.To != "":
		if target, err = ParseTarget(opt.To); err != nil {
			return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "replay target: %v", err)
		}
	case len(a.targets) > 0:
		target = a.targets[0]
	case d.LastAttempt() != nil && d.LastAttempt().Target != "":
		to = d.LastAttempt().Target // offline replay: where it went last time
	default:
		return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "nowhere to replay delivery %s to: it was never forwarded and no target is given", id)
	}
	var req *devhook.Request
	if opt.Header != nil || opt.HasBody || len(opt.SetHeader) > 0 || len(opt.RemoveHeader) > 0 {
		req = &devhook.Request{Method: d.Method, Path: d.Path, RawQuery: d.RawQuery, Header: d.Header, Body: d.Body}
		if opt.Header != nil {
			req.Header = opt.Header
		}
		if len(opt.SetHeader) > 0 || len(opt.RemoveHeader) > 0 {
			h, _, err := HeaderEdit{Set: opt.SetHeader, Remove: opt.RemoveHeader}.Apply(req.Header)
			if err != nil {
				return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "replay's header edit: %v", err)
			}
			req.Header = h
		}
		if opt.HasBody {
			req.Body = opt.Body
		}
	}
	at := a.attempt(ctx, d, target, devhook.AttemptReplay, resign, req, to)
	if a.cfg.OnResult != nil {
		d.Attempts = nil
		a.cfg.OnResult(Result{Delivery: d, Attempt: at, Status: at.Status, Replay: true})
	}
	return *at, nil
}
