package inspector

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/hint"
)

// DeliveryView is the answer of GET /api/deliveries/{id}: the delivery and
// its bodies decoded for display.
type DeliveryView struct {
	*devhook.Delivery
	// Retry is set while the agent owes the delivery to the receiver,
	// and once it gave up on it.
	Retry *devhook.RetryState `json:"retry,omitempty"`
	View  DetailView          `json:"view"`
}

// DetailView holds the decoded bodies of a delivery and of its attempts,
// in the order of Delivery.Attempts.
type DetailView struct {
	Body     BodyView      `json:"body"`
	Attempts []AttemptView `json:"attempts"`
	// Target is where a replay goes by default, with the delivery's path;
	// empty when the route that takes it drops it (ReplayRoute).
	Target string `json:"target,omitempty"`
	// ReplayRoute is the route that chooses Target (listen --route): the
	// routes are matched again for a replay, as if the delivery arrived
	// now. Nil without routes.
	ReplayRoute *devhook.Route `json:"replay_route,omitempty"`
	// Resign says a replay without "resign" re-signs (the secret is known).
	Resign bool `json:"resign"`
	// ReplayAvailable is false when the inspector has no replayer.
	ReplayAvailable bool `json:"replay_available"`
	// StatusNote explains status beside status_v2 for a run.status body.
	StatusNote string `json:"status_note,omitempty"`
}

// AttemptView holds the decoded bodies of one attempt.
type AttemptView struct {
	Response BodyView  `json:"response"`
	Request  *BodyView `json:"request,omitempty"`
	// Hint is set when the receiver refused a delivery whose signature is
	// valid: what to run, and the likely cause (hint.Text).
	Hint string `json:"hint,omitempty"`
}

func (s *Server) handleDelivery(w http.ResponseWriter, r *http.Request) {
	// A delivery some parts of which cannot be read (storage.DB.Delivery:
	// its body, an attempt) is shown with the rest, each such part
	// saying why (body_error, an attempt's read_error).
	d, err := s.delivery(r.PathValue("id"))
	if err != nil && !partial(d, err) {
		s.fail(w, r, err)
		return
	}
	target, route := s.replayTarget(d)
	v := DeliveryView{Delivery: d, View: DetailView{
		Body:            NewBodyView(d.Body, d.Header),
		Attempts:        make([]AttemptView, len(d.Attempts)),
		Target:          target,
		ReplayRoute:     route,
		Resign:          s.secretKnown(),
		ReplayAvailable: s.cfg.Replayer != nil,
		StatusNote:      d.Event.StatusNote(),
	}}
	rs, err := s.cfg.Store.Retries([]string{d.ID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st, ok := rs[d.ID]; ok {
		v.Retry = &st
	}
	// The route that took it: recorded with its first attempt, or with
	// its retry state while it is owed behind another, not yet tried.
	if d.Route = d.ArrivalRoute(); d.Route == nil && v.Retry != nil {
		d.Route = v.Retry.Route
	}
	for i, a := range d.Attempts {
		if a.ReadError != "" {
			v.View.Attempts[i] = AttemptView{Response: NewBodyView(nil, nil)}
			continue
		}
		av := AttemptView{Response: NewBodyView(a.Body, a.Header), Hint: hint.Text(d, &d.Attempts[i])}
		if a.Request != nil {
			rv := NewBodyView(a.Request.Body, a.Request.Header)
			av.Request = &rv
		}
		v.View.Attempts[i] = av
	}
	writeJSON(w, http.StatusOK, v)
}

// partial reports whether d, read with err, is a delivery some parts of
// which could not be read, to be shown all the same: never sent.
func partial(d *devhook.Delivery, err error) bool {
	var pe *devhook.PartialError
	return d != nil && errors.As(err, &pe)
}

// unsendable is the error of a request that sends delivery d, or uses its
// body, when err says part of it cannot be read: a conflict (409), not
// the inspector's failure, saying what cannot be read.
func unsendable(action string, err error) error {
	var pe *devhook.PartialError
	if !errors.As(err, &pe) {
		return err
	}
	return pe.Unsendable(action)
}

// unreadablePart is the error of a request for a part of a delivery that
// cannot be read (what: "download the body", say), pe naming that part
// alone: a conflict (409), as a replay's (unsendable), not the inspector's
// failure. pe's words are the store's: what cannot be read, in which file,
// and what to do.
func unreadablePart(what string, pe *devhook.PartialError) error {
	return devhook.Errorf(devhook.ECONFLICT, "cannot %s of delivery %s: %w; the rest of the delivery is shown on its page", what, pe.ID, pe)
}

// bodyUnreadable is the *devhook.PartialError of d, read with err, when
// its body cannot be read, naming the body alone (not its attempts); nil
// when the body reads.
func bodyUnreadable(d *devhook.Delivery, err error) *devhook.PartialError {
	var pe *devhook.PartialError
	if d == nil || !errors.As(err, &pe) || pe.Body == nil {
		return nil
	}
	return &devhook.PartialError{ID: pe.ID, Body: pe.Body}
}

func (s *Server) secretKnown() bool {
	return s.cfg.Settings.SecretKnown != nil && s.cfg.Settings.SecretKnown()
}

// replayTarget is the URL a replay of d calls without a target of its
// own, and the route that chose it: the Replayer's word when it has one
// (ReplayTargeter), else the first forward target joined with the
// delivery's path and query.
func (s *Server) replayTarget(d *devhook.Delivery) (string, *devhook.Route) {
	if rt, ok := s.cfg.Replayer.(ReplayTargeter); ok {
		return rt.ReplayTarget(d)
	}
	if len(s.cfg.Settings.Forward) == 0 {
		return "", nil
	}
	return joinTarget(s.cfg.Settings.Forward[0], d.Path, d.RawQuery), nil
}

func joinTarget(base, path, rawQuery string) string {
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimSuffix(base, "/") + path
	}
	return devhook.TargetURL(u, path, rawQuery)
}
