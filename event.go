package devhook

import (
	"net/http"
	"time"
)

// APIVersion is the constant api_version of run.status payloads.
const APIVersion = "2024-03-04"

// EventRunStatus is the only event type the service sends.
const EventRunStatus = "run.status"

// RunStatus is the body of a run.status delivery, with every field of the
// service's interface. Durations are milliseconds, sizes bytes.
type RunStatus struct {
	EventType  string        `json:"event_type"`
	APIVersion string        `json:"api_version"`
	Data       RunStatusData `json:"data"`
}

// RunStatusData is the data object of a run.status payload.
type RunStatusData struct {
	RunID                 string  `json:"run_id"`
	Status                string  `json:"status"`    // legacy: running, succeeded or failed
	StatusV2              string  `json:"status_v2"` // RunStatuses
	CreatedAt             string  `json:"created_at"`
	Duration              int64   `json:"duration"`
	InputSize             int64   `json:"input_size"`
	OutputSize            int64   `json:"output_size"`
	Error                 *string `json:"error"`
	ApplicationID         string  `json:"application_id"`
	ApplicationInstanceID string  `json:"application_instance_id"`
	ApplicationVersionID  string  `json:"application_version_id"`
}

// RunStatuses are the values of status_v2, in the order a run takes them:
// queued, running, then one of succeeded, failed and canceled.
func RunStatuses() []string { return []string{"queued", "running", "succeeded", "failed", "canceled"} }

// LegacyStatus returns the legacy status field that goes with a status_v2
// value: the first delivery of a run (queued) carries "running", and a
// canceled run says "failed" there (the legacy field knows only running,
// succeeded and failed).
func LegacyStatus(statusV2 string) string {
	switch statusV2 {
	case "queued":
		return "running"
	case "canceled":
		return "failed"
	}
	return statusV2
}

// CanceledRunError is the error of a canceled run, in its record and its
// run.status events.
const CanceledRunError = "run was canceled"

// ReplayOptions says how to send a stored delivery again.
type ReplayOptions struct {
	// Resign signs the body with a fresh t. Nil means: re-sign when the
	// secret is known.
	Resign *bool `json:"resign,omitempty"`
	// To overrides the target URL (scheme, host and base path); empty means
	// the agent's first forward target.
	To string `json:"to,omitempty"`
	// Header and Body, when set, replace the delivery's.
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// HasBody says Body is set, so that an edit to an empty body is possible.
	HasBody bool `json:"-"`
	// SetHeader and RemoveHeader edit the headers sent (the delivery's,
	// or Header when it is set) instead of replacing them all: each name
	// of SetHeader gets its values in place of its own, each name of
	// RemoveHeader is removed; names in any case. The headers they do not
	// name are sent as recorded, byte for byte, which a whole Header
	// through JSON cannot promise (a value that is not UTF-8).
	SetHeader    http.Header `json:"set_header,omitempty"`
	RemoveHeader []string    `json:"remove_header,omitempty"`
}

// Change kinds.
const (
	ChangeDelivery = "delivery" // a new delivery was recorded
	ChangeAttempt  = "attempt"  // an attempt was added to a delivery
	// ChangeRetry: a delivery's retry state changed (owed, delivered after
	// retries, given up). Summary.Retry is the new state, nil once the
	// receiver took it.
	ChangeRetry = "retry"
	// ChangeHealth: the agent's Health changed (recording failing or
	// working again, deliveries owed or given up). Health is set.
	ChangeHealth = "health"
	// ChangeDeleted: deliveries were deleted. Deleted names them; Reload
	// is set instead when they are too many to name: a view reloads.
	ChangeDeleted = "deleted"
)

// Change is what the agent publishes when the store changes, so that the
// inspector can update open pages.
type Change struct {
	Kind    string   `json:"kind"`
	Summary Summary  `json:"delivery"`
	Attempt *Attempt `json:"attempt,omitempty"`
	Health  *Health  `json:"health,omitempty"`
	// Deleted and Reload: of a ChangeDeleted.
	Deleted []string `json:"deleted,omitempty"`
	Reload  bool     `json:"reload,omitempty"`
}

// NewRunStatus returns a realistic run.status payload for a run in state
// statusV2 (one of RunStatuses), with every field of the interface filled
// as the service fills it at that state: a run that ended has a duration,
// one that succeeded an output size, one that failed or was canceled an
// error.
func NewRunStatus(runID, appID, statusV2 string, createdAt time.Time) RunStatus {
	d := RunStatusData{
		RunID: runID, Status: LegacyStatus(statusV2), StatusV2: statusV2,
		CreatedAt: createdAt.UTC().Format("2006-01-02T15:04:05Z"), InputSize: 1432,
		ApplicationID: appID, ApplicationInstanceID: "latest", ApplicationVersionID: "",
	}
	errorText := func(s string) *string { return &s }
	switch statusV2 {
	case "succeeded":
		d.Duration, d.OutputSize = 5123, 20871
	case "failed":
		d.Duration, d.Error = 2048, errorText("the application exited with status 1")
	case "canceled":
		d.Duration, d.Error = 1024, errorText(CanceledRunError)
	}
	return RunStatus{EventType: EventRunStatus, APIVersion: APIVersion, Data: d}
}
