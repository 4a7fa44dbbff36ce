package agent

import (
	"context"
	"net/url"

	"github.com/devhook/devhook"
)

// Replay sends stored delivery id again and records the attempt. By default
// it goes to the first forward target, re-signed with a fresh t when the
// secret is known; opt changes that. A delivery some attempts of which
// cannot be read is sent as one whose were (devhook.SendError); one whose
// body cannot be read is refused with its *devhook.PartialError, unless
// opt replaces the body whole (devhook.ReplayError).
func (a *Agent) Replay(ctx context.Context, id string, opt devhook.ReplayOptions) (devhook.Attempt, error) {
	d, err := a.cfg.Store.Delivery(id)
	if err = devhook.ReplayError(d, err, opt); err != nil {
		return devhook.Attempt{}, err
	}
	d.Route = d.ArrivalRoute() // for live views
	resign := a.SecretKnown()
	if opt.Resign != nil {
		resign = *opt.Resign
	}
	if resign && !a.SecretKnown() {
		return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "cannot re-sign: no signing secret is known")
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
				return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "replay's header edit: %w", err)
			}
			req.Header = h
		}
		if opt.HasBody {
			req.Body = opt.Body
		}
	}
	var target *url.URL
	var rt *devhook.Route
	to := ""
	switch {
	case opt.To != "":
		if target, err = ParseTarget(opt.To); err != nil {
			return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "replay target: %w", err)
		}
	case len(a.targets) > 0:
		rt = a.replayRoute(d, req)
		if rt.Drop() {
			return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "delivery %s matches %s, which drops it: a replay of it needs a target", id, rt)
		}
		target = a.targetsOf(rt)[0]
	default:
		// Offline replay: where it went last time.
		last := lastForward(d)
		if last == nil {
			if d.ArrivalRoute().Drop() {
				return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "delivery %s was dropped by %s, never forwarded: a replay of it needs a target", id, d.ArrivalRoute())
			}
			return devhook.Attempt{}, devhook.Errorf(devhook.EINVALID, "nowhere to replay delivery %s to: it was never forwarded and no target is given", id)
		}
		to, rt = last.Target, last.Route
	}
	at := a.attempt(ctx, d, target, devhook.AttemptReplay, resign, req, to, rt)
	if a.cfg.OnResult != nil {
		d.Attempts = nil
		a.cfg.OnResult(Result{Delivery: d, Attempt: at, Status: at.Status, Replay: true})
	}
	return *at, nil
}

// replayRoute returns the route a replay of d, or of req in its place,
// takes without a target of its own: the routes of this agent, matched
// now, as if it arrived again; nil without routes.
func (a *Agent) replayRoute(d *devhook.Delivery, req *devhook.Request) *devhook.Route {
	if a.routes == nil {
		return nil
	}
	if req != nil {
		return a.routes.match(request{path: req.Path, header: req.Header, body: req.Body})
	}
	return a.routes.match(request{path: d.Path, header: d.Header, body: d.Body})
}

// ReplayTarget says where a replay of d without a target of its own goes:
// the URL called, and the route that chose it (nil without routes). The
// URL is empty when d's route drops it (route.Drop()), or when there is
// nowhere to send it.
func (a *Agent) ReplayTarget(d *devhook.Delivery) (string, *devhook.Route) {
	if len(a.targets) == 0 {
		if last := lastForward(d); last != nil {
			return last.Target, last.Route
		}
		return "", nil
	}
	rt := a.replayRoute(d, nil)
	if rt.Drop() {
		return "", rt
	}
	return devhook.TargetURL(a.targetsOf(rt)[0], d.Path, d.RawQuery), rt
}

// lastForward returns the last attempt of d that went to a receiver (not
// a drop), or nil.
func lastForward(d *devhook.Delivery) *devhook.Attempt {
	for i := len(d.Attempts) - 1; i >= 0; i-- {
		if at := &d.Attempts[i]; at.Target != "" && at.Kind != devhook.AttemptDrop {
			return at
		}
	}
	return nil
}
