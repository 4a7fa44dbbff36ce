// Package devhook holds the domain types shared by every part of devhook:
// a Delivery the relay received, each Attempt to forward it, the signature
// Verdict, and the Error type that carries a machine code.
//
// The package imports only the standard library. Adapters live in
// sub-packages named after their technology (storage for bbolt, relay for
// the WebSocket tunnel, inspector for the local web server).
package devhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// SignatureHeader is the header the service signs its deliveries with.
const SignatureHeader = "service-signature"

// AnswerHeader marks an answer devhook made itself rather than the
// receiver's: "agent" (devhook listen: the receiver could not be reached,
// or --verify enforce refused the delivery) or "relay" (the relay: no such
// channel, busy, too large). A sender reading it knows who answered.
const AnswerHeader = "Devhook-Answer"

// AnswerCutHeader is on a receiver's answer that devhook listen passed on
// cut: its value is the number of bytes of the body, the start of the
// receiver's answer, whose rest was dropped (larger than devhook passes
// back, 10 MiB, or the receiver stopped sending it). The status and the
// other headers are the receiver's.
const AnswerCutHeader = "Devhook-Answer-Cut"

// Verdict names. They are stable: they appear in JSON output, in the
// inspector and in filters.
const (
	VerdictOK               = "ok"
	VerdictMissingSignature = "missing_signature"
	VerdictInvalidFormat    = "invalid_format"
	VerdictInvalidTime      = "invalid_time"
	VerdictNoSecret         = "no_secret"
	VerdictInvalidSignature = "invalid_signature"
	// VerdictUnchecked is recorded when verification is turned off.
	VerdictUnchecked = "unchecked"
)

// Verdict is the outcome of checking a delivery's service-signature.
//
// Status and Text are what the reference receiver would have answered, so a
// user can see both why a signature fails and what their receiver should do.
type Verdict struct {
	Result string `json:"result"`           // one of the Verdict* names
	Reason string `json:"reason,omitempty"` // why, in a sentence; never contains the expected signature
	Status int    `json:"status"`           // reference receiver's status code
	Text   string `json:"text"`             // reference receiver's body text
	// T is the signature's timestamp in Unix milliseconds, when one parsed.
	T int64 `json:"t,omitempty"`
}

// OK reports whether the signature was checked and is valid.
func (v Verdict) OK() bool { return v.Result == VerdictOK }

// Attempt kinds.
const (
	AttemptForward    = "forward"    // the first forward of a live delivery
	AttemptRedelivery = "redelivery" // forward of a delivery that waited in the relay's queue
	AttemptReplay     = "replay"     // a user asked for it again
	// AttemptRetry is a later forward of a queued delivery whose earlier
	// forward got no answer, or 408, 429 or 5xx: the agent owes it to the
	// receiver and retries with backoff. A delivery owed behind an
	// earlier one of its run, sent for the first time once that one went,
	// is a forward or a redelivery, not a retry.
	AttemptRetry = "retry"
	// AttemptDrop records that a route of listen (--route 'MATCH -> drop')
	// dropped the delivery: not forwarded, its sender answered 202 by
	// devhook. Its Target is RouteDrop, its Status 0.
	AttemptDrop = "drop"
)

// RouteDrop is the target of a route that drops what it matches.
const RouteDrop = "drop"

// RouteDefault is the text of Route 0: no route matched, the delivery
// went to the --forward targets.
const RouteDefault = "default"

// Route names the route of listen (--route, --routes) that chose where a
// delivery went. It is recorded with each attempt it chose, and with the
// retry state of a delivery owed to the receiver, so that retries go
// where the delivery went at arrival, after a restart too.
type Route struct {
	// Index is the route's place among listen's routes, 1 for the first;
	// 0 when none matched: the delivery went to the --forward targets.
	Index int `json:"index"`
	// Text is the route as written, "MATCH -> TARGET"; RouteDefault for
	// Index 0.
	Text string `json:"text"`
	// Target is where the route sends: a receiver's URL, or RouteDrop;
	// empty for Index 0 (the --forward targets).
	Target string `json:"target,omitempty"`
}

// Drop reports whether r drops what it matches. A nil r does not.
func (r *Route) Drop() bool { return r != nil && r.Target == RouteDrop }

// String is "route N (TEXT)", or "default" for Index 0.
func (r *Route) String() string {
	if r == nil || r.Index == 0 {
		return RouteDefault
	}
	return fmt.Sprintf("route %d (%s)", r.Index, r.Text)
}

// Retry states of a queued delivery whose forward failed.
const (
	RetryOwed   = "owed"   // the agent retries it until the receiver takes it
	RetryFailed = "failed" // the agent gave up on it
)

// RetryState says where the agent stands with a delivery it owes the
// receiver. A delivery the receiver took has none.
type RetryState struct {
	State string `json:"state"` // RetryOwed or RetryFailed
	// Since is when the first forward failed; retries stop at Since plus
	// the agent's retry horizon.
	Since time.Time `json:"since"`
	// Reason says why the agent gave up (RetryFailed): "gave up after N
	// attempts over 1h: <last error>".
	Reason string `json:"reason,omitempty"`
	// Route is the route that chose the delivery's target at arrival;
	// retries go to its target. Nil: the first --forward target (no
	// routes, or a state written before routes).
	Route *Route `json:"route,omitempty"`
}

// Health is what the agent reports of itself: whether it can record, and
// how many deliveries it owes the receiver. The inspector shows it.
type Health struct {
	// StorageError is set while recording fails (a full disk): live
	// deliveries are then answered 503 and not forwarded, queued ones are
	// held until recording works again.
	StorageError string    `json:"storage_error,omitempty"`
	Since        time.Time `json:"since,omitzero"` // when recording started failing
	Held         int       `json:"held"`           // queued deliveries waiting to be recorded
	Owed         int       `json:"owed"`           // deliveries being retried
	Failed       int       `json:"failed"`         // deliveries the agent gave up on
}

// Delivery is one request that arrived at the relay's public URL.
type Delivery struct {
	ID         string      `json:"id"` // UUIDv7, assigned by the relay, time-ordered
	Channel    string      `json:"channel,omitempty"`
	ReceivedAt time.Time   `json:"received_at"`
	Method     string      `json:"method"`
	Path       string      `json:"path"`            // the path after /c/<channel>, always starting with "/"
	RawQuery   string      `json:"query,omitempty"` // as sent, without "?"
	Header     http.Header `json:"header"`
	Body       []byte      `json:"body"`
	// BodyError, when set, says why the body could not be read from the
	// store (its body file or its value damaged, cut short or missing),
	// naming what is damaged and what to do: Body is then nil, and is not
	// the delivery's body. Such a delivery is partial (Partial).
	BodyError  string `json:"body_error,omitempty"`
	RemoteAddr string `json:"remote_addr,omitempty"`
	// Queued is true when the relay kept the delivery because no agent was
	// connected, and the sender was answered 202.
	Queued bool `json:"queued,omitempty"`

	Verdict Verdict `json:"verdict"`
	Event   Event   `json:"event"`
	// Route is the route that took the delivery at arrival, when listen
	// has routes: the agent sets it as the delivery arrives, and
	// ArrivalRoute finds it again in a recorded delivery. The store does
	// not keep it apart from the attempts.
	Route *Route `json:"route,omitempty"`

	Attempts []Attempt `json:"attempts,omitempty"`
}

// ArrivalRoute returns the route recorded with the first attempt of d
// that is not a replay, or nil when none carries one.
func (d *Delivery) ArrivalRoute() *Route {
	for i := range d.Attempts {
		if a := &d.Attempts[i]; a.Kind != AttemptReplay && a.Route != nil {
			return a.Route
		}
	}
	return nil
}

// Partial reports whether some parts of d could not be read from the
// store: its body (BodyError) or attempts (Attempt.ReadError). A partial
// delivery is shown, never exported as a whole one, and sent again
// (replayed, retried) only when its body was read (SendError).
func (d *Delivery) Partial() bool {
	if d.BodyError != "" {
		return true
	}
	for i := range d.Attempts {
		if d.Attempts[i].ReadError != "" {
			return true
		}
	}
	return false
}

// Unreadable is the *PartialError that says what of d could not be read,
// nil when d is whole.
func (d *Delivery) Unreadable() error {
	if !d.Partial() {
		return nil
	}
	e := &PartialError{ID: d.ID}
	if d.BodyError != "" {
		e.Body = errors.New(d.BodyError)
	}
	for _, a := range d.Attempts {
		if a.ReadError != "" {
			e.Attempts = append(e.Attempts, errors.New(a.ReadError))
		}
	}
	return e
}

// PartialError is the error of a read of a delivery some parts of which
// could not be read: the delivery that comes with it holds everything
// else, each part it lacks marked (Delivery.BodyError,
// Attempt.ReadError). Body is why the body could not be read (nil: it
// was), Attempts why each attempt that could not be.
type PartialError struct {
	ID       string
	Body     error
	Attempts []error
}

func (e *PartialError) Error() string {
	var parts []string
	if e.Body != nil {
		parts = append(parts, "its body cannot be read: "+e.Body.Error())
	}
	for _, a := range e.Attempts {
		parts = append(parts, "an attempt cannot be read: "+a.Error())
	}
	return fmt.Sprintf("delivery %s is partly unreadable: %s", e.ID, strings.Join(parts, "; "))
}

// SendError is the error of an action that sends d again (a replay, a
// retry), d read from the store with err: nil when d's request (method,
// path, query, headers, body) was read whole, though some of its attempts
// could not be, as those are its history, not what is sent; err
// otherwise, a *PartialError when its body could not be read.
func SendError(d *Delivery, err error) error {
	var pe *PartialError
	if d != nil && errors.As(err, &pe) && pe.Body == nil && d.BodyError == "" {
		return nil
	}
	return err
}

// ReplayError is SendError for a replay of d with opt: one that replaces
// the body whole (opt.HasBody) needs nothing of the recorded body, so a
// body that cannot be read does not stop it (its method, path, query and
// headers are read with its record); err otherwise, as SendError says.
func ReplayError(d *Delivery, err error, opt ReplayOptions) error {
	var pe *PartialError
	if d != nil && opt.HasBody && errors.As(err, &pe) {
		return nil
	}
	return SendError(d, err)
}

// Unsendable is the error, ECONFLICT, of an action that sends the
// delivery (a replay), refused because its body could not be read.
func (e *PartialError) Unsendable(action string) *Error {
	return Errorf(ECONFLICT, "cannot %s delivery %s: devhook sends a delivery only with its body, and %w; nothing was sent", action, e.ID, e)
}

// Unwrap returns the errors of the parts, for errors.Is and errors.As.
func (e *PartialError) Unwrap() []error {
	if e.Body == nil {
		return e.Attempts
	}
	return append([]error{e.Body}, e.Attempts...)
}

// Event is what devhook understood of a run.status body. Zero when the body
// is not a run.status event.
type Event struct {
	Type     string `json:"type,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	Status   string `json:"status,omitempty"` // legacy status
	StatusV2 string `json:"status_v2,omitempty"`
}

// StatusNote explains the two status fields of a run.status event for a
// reader: status_v2 is the run's state; status is the legacy field, which
// the first delivery of a run fills with "running" while status_v2 says
// "queued". Empty when the event has no status_v2.
func (e Event) StatusNote() string {
	switch {
	case e.StatusV2 == "":
		return ""
	case e.Status == "":
		return "status_v2 " + e.StatusV2 + " is the run's state (the legacy status field is absent)"
	case e.Status == e.StatusV2:
		return "status_v2 " + e.StatusV2 + " is the run's state; status, the legacy field, says the same"
	case e.StatusV2 == "queued" && e.Status == "running":
		return "status_v2 queued is the run's state; status running is the legacy field, which the first delivery of a run fills with running: read status_v2"
	}
	return "status_v2 " + e.StatusV2 + " is the run's state; status " + e.Status + " is the legacy field, and differs: read status_v2"
}

// LastAttempt returns the most recent attempt, or nil.
func (d *Delivery) LastAttempt() *Attempt {
	if len(d.Attempts) == 0 {
		return nil
	}
	return &d.Attempts[len(d.Attempts)-1]
}

// How an attempt's request was made from its delivery (Attempt.Made).
// The names are stable: they appear in JSON output and in the inspector.
const (
	// MadeAsArrived: the delivery's method, path, query, headers and body,
	// as the relay received them.
	MadeAsArrived = "as-arrived"
	// MadeResigned: as arrived, with a fresh service-signature (a queued
	// delivery, a retry, a replay re-signed).
	MadeResigned = "re-signed"
	// MadeEdited: a replay whose body or headers were changed by the one
	// who asked for it; re-signed or not (Request.Resigned says which).
	MadeEdited = "edited"
)

// Attempt is one forward of a delivery to a local receiver.
type Attempt struct {
	Seq       int       `json:"seq"` // 1-based, in the order attempts were recorded
	Kind      string    `json:"kind"`
	Target    string    `json:"target"` // full URL that was called
	StartedAt time.Time `json:"started_at"`
	Duration  Duration  `json:"duration_ms"`
	// Made says how the request sent was made from the delivery: one of
	// the Made* names. Empty in an attempt recorded by a devhook from
	// before it was kept: Request, if any, is then all that is known.
	Made string `json:"made,omitempty"`
	// Request is the request as sent, when it differs from the delivery:
	// re-signed, edited, or with the headers listen adds to every forward
	// (--header). Its Header is the one sent, Content-Length included.
	Request *Request `json:"request,omitempty"`
	// Route is the route of listen that chose Target (listen --route),
	// when listen has routes; nil for a replay given its own target.
	Route *Route `json:"route,omitempty"`
	// Status is 0 when no answer came; Error then says why (but for a
	// drop, which is not forwarded: AttemptDrop).
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	Error  string      `json:"error,omitempty"`
	// ReadError, when set, says why the store could not read this
	// attempt, recorded with this Seq (0 when its key is damaged too):
	// every other field is then zero, and the delivery is partial.
	ReadError string `json:"read_error,omitempty"`
}

// Edited reports whether the attempt sent a request changed by the one
// who asked for it (MadeEdited).
func (a *Attempt) Edited() bool { return a.Made == MadeEdited }

// Resigned reports whether the attempt sent a fresh signature.
func (a *Attempt) Resigned() bool { return a.Request != nil && a.Request.Resigned }

// SentBody is the body attempt a of d sent.
func (a *Attempt) SentBody(d *Delivery) []byte {
	if a.Request != nil {
		return a.Request.Body
	}
	return d.Body
}

// Request is an HTTP request as sent to a receiver, when it differs from the
// delivery it came from.
type Request struct {
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	RawQuery string      `json:"query,omitempty"`
	Header   http.Header `json:"header"`
	Body     []byte      `json:"body"`
	Resigned bool        `json:"resigned,omitempty"`
}

// Duration marshals as integer milliseconds, with sub-millisecond precision
// kept in memory.
type Duration time.Duration

// MarshalJSON writes milliseconds with three decimals, so that a 0.3 ms
// loopback forward does not read as 0.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))), nil
}

// UnmarshalJSON reads milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return err
	}
	*d = Duration(ms * float64(time.Millisecond))
	return nil
}

// Summary is one row of a delivery list: enough to show without the bodies.
type Summary struct {
	ID         string    `json:"id"`
	ReceivedAt time.Time `json:"received_at"`
	Method     string    `json:"method"`
	Path       string    `json:"path"`
	RawQuery   string    `json:"query,omitempty"`
	Verdict    string    `json:"verdict"`
	Event      Event     `json:"event"`
	BodySize   int       `json:"body_size"`
	Queued     bool      `json:"queued,omitempty"`
	Attempts   int       `json:"attempts"`
	// Last attempt's outcome.
	Status   int      `json:"status"`
	Duration Duration `json:"duration_ms"`
	Error    string   `json:"error,omitempty"`
	// BodyError is set only by a list that searches the bodies
	// (Filter.Text), on a row whose body could not be read from the store
	// (Delivery.BodyError says the same): the row is listed, as its body
	// may hold the text, on what could be read; it says why and what to do.
	BodyError string `json:"body_error,omitempty"`
	// Retry is set while the agent owes the delivery to the receiver, and
	// when it gave up. The store does not keep it in the row: the
	// inspector and the agent fill it.
	Retry *RetryState `json:"retry,omitempty"`
	// Route is the route that took the delivery (listen --route), nil
	// without routes. Not in the row either: Summarize copies the
	// delivery's, the inspector fills it from the attempts.
	Route *Route `json:"route,omitempty"`
}

// Summarize returns the list row of d.
func (d *Delivery) Summarize() Summary {
	s := Summary{
		ID: d.ID, ReceivedAt: d.ReceivedAt, Method: d.Method, Path: d.Path, RawQuery: d.RawQuery,
		Verdict: d.Verdict.Result, Event: d.Event, BodySize: len(d.Body), Queued: d.Queued,
		Attempts: len(d.Attempts), Route: d.Route,
	}
	if a := d.LastAttempt(); a != nil {
		s.Status, s.Duration, s.Error = a.Status, a.Duration, a.Error
	}
	return s
}

// Filter selects deliveries in a list. Zero fields match everything.
type Filter struct {
	Limit    int    // default 50, at most 1000
	Before   string // only ids strictly older than this one (paging)
	Verdict  string
	Status   int // last attempt's status; -1 means "no answer"
	RunID    string
	StatusV2 string
	Text     string // substring of the body, case-insensitive
}

// Error codes.
const (
	ENOTFOUND = "not_found"
	EINVALID  = "invalid"
	ECONFLICT = "conflict"
	EINTERNAL = "internal"
	EUNAUTH   = "unauthorized"
	ETOOLARGE = "too_large"
)

// Error is an error with a machine code, safe to show to a user: the
// category (not found, invalid, conflict, ...) that the inspector's API
// turns into a status and its client turns back into the same code. It keeps
// the chain of the error it was made from: errors.Is and errors.As see
// through it to the error Errorf wrapped with %w.
type Error struct {
	Code    string
	Message string
	// Err is what Message was formatted from when the format wrapped an
	// error with %w (fmt.Errorf's error, so several %w are all kept); nil
	// otherwise.
	Err error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the error Errorf wrapped, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code and a message formatted as
// fmt.Errorf formats it; an error given with %w stays in the chain.
func Errorf(code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Code: code, Message: err.Error()}
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.Err = err
	}
	return e
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL
// for any other error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return "" // before e, which errors.As makes escape: no allocation
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}
