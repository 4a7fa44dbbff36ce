package cloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook/auth"
)

// ApplicationInput creates an application.
type ApplicationInput struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Application is an application record, every field of the interface.
type Application struct {
	ID                        string          `json:"id"`
	Name                      string          `json:"name"`
	Description               string          `json:"description"`
	Type                      string          `json:"type"`
	DefaultInstance           string          `json:"default_instance"`
	DefaultExperimentInstance string          `json:"default_experiment_instance"`
	SubscriptionID            string          `json:"subscription_id"`
	Locked                    bool            `json:"locked"`
	CreatedAt                 string          `json:"created_at"`
	UpdatedAt                 string          `json:"updated_at"`
	Raw                       json.RawMessage `json:"-"`
}

// CreateApplication creates an application (and its instance latest).
func (c *Client) CreateApplication(ctx context.Context, in ApplicationInput) (Application, error) {
	var a Application
	raw, err := c.call(ctx, http.MethodPost, "/v1/applications", nil, in, &a)
	a.Raw = raw
	return a, explain(err, http.StatusConflict, "that id is taken: choose another")
}

// GetApplication reads an application.
func (c *Client) GetApplication(ctx context.Context, id string) (Application, error) {
	var a Application
	raw, err := c.call(ctx, http.MethodGet, path("v1", "applications", id), nil, nil, &a)
	a.Raw = raw
	return a, err
}

// RunInput starts a run.
type RunInput struct {
	Input       json.RawMessage   `json:"input"`
	Options     map[string]string `json:"options,omitempty"`
	Name        string            `json:"name,omitempty"`
	Description string            `json:"description,omitempty"`
}

// Run is a run record, or the answer to starting one. ID is run_id when
// the answer has one, else id. Output is the run's output as the service
// sent it: for a pushed application, the JSON it printed.
type Run struct {
	ID          string          `json:"-"`
	RunID       string          `json:"run_id"`
	RecordID    string          `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	UserEmail   string          `json:"user_email"`
	ConsoleURL  string          `json:"console_url"`
	Metadata    RunMetadata     `json:"metadata"`
	Output      json.RawMessage `json:"output"`
	Raw         json.RawMessage `json:"-"`
}

// RunMetadata is a run's metadata, every field of the interface.
// Durations are milliseconds and sizes bytes (docs/INTERFACE.md).
type RunMetadata struct {
	ApplicationID         string      `json:"application_id"`
	ApplicationInstanceID string      `json:"application_instance_id"`
	ApplicationVersionID  string      `json:"application_version_id"`
	CreatedAt             string      `json:"created_at"`
	InitiatedAt           string      `json:"initiated_at"`
	Duration              json.Number `json:"duration"`
	ExecutionDuration     json.Number `json:"execution_duration"`
	InputSize             json.Number `json:"input_size"`
	OutputSize            json.Number `json:"output_size"`
	Error                 any         `json:"error"`
	ExecutionClass        string      `json:"execution_class"`
	Format                struct {
		Input  RunFormat `json:"input"`
		Output RunFormat `json:"output"`
	} `json:"format"`
	Metrics         map[string]any `json:"metrics"`
	Options         RunOptions     `json:"options"`
	QueuingDisabled bool           `json:"queuing_disabled"`
	QueuingPriority int            `json:"queuing_priority"`
	RunType         struct {
		Type         string `json:"type"`
		DefinitionID string `json:"definition_id"`
		ReferenceID  string `json:"reference_id"`
	} `json:"run_type"`
	Runtime  string `json:"runtime"`
	Status   string `json:"status"`
	StatusV2 string `json:"status_v2"`
}

// RunFormat is the format of a run's input or output.
type RunFormat struct {
	Type string `json:"type"`
}

// RunOptions are a run's options as its metadata lists them.
type RunOptions struct {
	ActiveOptions  map[string]string `json:"active_options"`
	OptionsSummary []struct {
		Name   string `json:"name"`
		Source string `json:"source"`
		Value  string `json:"value"`
	} `json:"options_summary"`
}

// Status is status_v2, or the legacy status when there is no status_v2.
func (r Run) Status() string {
	if r.Metadata.StatusV2 != "" {
		return r.Metadata.StatusV2
	}
	return r.Metadata.Status
}

// Final reports whether the run's status will not change any more.
func (r Run) Final() bool { return IsFinalStatus(r.Status()) }

// Succeeded reports whether the run succeeded.
func (r Run) Succeeded() bool { return r.Status() == "succeeded" }

// ErrorText is the run's error, or "".
func (r Run) ErrorText() string {
	switch v := r.Metadata.Error.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// IsFinalStatus reports whether a run status is one a run does not leave.
func IsFinalStatus(s string) bool {
	switch strings.ToLower(s) {
	case "succeeded", "failed", "error", "canceled", "cancelled":
		return true
	}
	return false
}

func (r *Run) fill(raw json.RawMessage) {
	r.Raw = raw
	r.ID = r.RunID
	if r.ID == "" {
		r.ID = r.RecordID
	}
}

// StartRun starts a run of the application's instance ("" means latest).
func (c *Client) StartRun(ctx context.Context, app, instance string, in RunInput) (Run, error) {
	if instance == "" {
		instance = "latest"
	}
	if len(in.Input) == 0 {
		return Run{}, fmt.Errorf("start a run of %s: no input", app)
	}
	var r Run
	raw, err := c.call(ctx, http.MethodPost, path("v1", "applications", app, "runs"), url.Values{"instance_id": {instance}}, in, &r)
	if err != nil {
		return r, err
	}
	r.fill(raw)
	if r.ID == "" {
		return r, fmt.Errorf("start a run of %s: the answer has no run_id or id: %s", app, raw)
	}
	return r, nil
}

// LargeRunBytes is the size past which a run's output or input is read
// through a download URL (format=url), as the service's own clients read
// them: larger ones are not for an inline answer.
const LargeRunBytes = 5 << 20

// maxDownload is the most of an output or input downloaded.
const maxDownload = 1 << 30

// DownloadURL is a run's output in a record read with format=url, and the
// answer of GET …/input?format=url.
type DownloadURL struct {
	URL string `json:"url"`
}

// GetRun reads a run record. An output over LargeRunBytes is read through
// its download URL, and put in the record in its place.
func (c *Client) GetRun(ctx context.Context, app, id string) (Run, error) {
	m, err := c.RunMetadata(ctx, app, id)
	if err != nil {
		return m, err
	}
	return c.runWithOutput(ctx, app, id, m)
}

// RunMetadata reads a run record without its output (GET …/metadata):
// what polling needs.
func (c *Client) RunMetadata(ctx context.Context, app, id string) (Run, error) {
	var r Run
	raw, err := c.call(ctx, http.MethodGet, path("v1", "applications", app, "runs", id, "metadata"), nil, nil, &r)
	if err != nil {
		return r, err
	}
	r.fill(raw)
	if r.ID == "" {
		r.ID = id
	}
	return r, nil
}

// runWithOutput reads the record of the run whose metadata is m, its
// output through a download URL when it is large.
func (c *Client) runWithOutput(ctx context.Context, app, id string, m Run) (Run, error) {
	size, _ := m.Metadata.OutputSize.Int64()
	large := size > LargeRunBytes
	var q url.Values
	if large {
		q = url.Values{"format": {"url"}}
	}
	var r Run
	raw, err := c.call(ctx, http.MethodGet, path("v1", "applications", app, "runs", id), q, nil, &r)
	if err != nil {
		return r, err
	}
	r.fill(raw)
	if r.ID == "" {
		r.ID = id
	}
	if u, ok := downloadURL(r.Output); ok {
		out, err := c.download(ctx, u, "the output of run "+id)
		if err != nil {
			return r, err
		}
		r.Output = out
		var rec map[string]json.RawMessage
		if json.Unmarshal(raw, &rec) == nil {
			rec["output"] = out
			if b, err := json.Marshal(rec); err == nil {
				r.Raw = b
			}
		}
	}
	return r, nil
}

// downloadURL returns the URL when v is {"url": <URL>} and nothing else.
func downloadURL(v json.RawMessage) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || len(m) != 1 || m["url"] == nil {
		return "", false
	}
	var d DownloadURL
	if json.Unmarshal(v, &d) != nil || d.URL == "" {
		return "", false
	}
	return d.URL, true
}

// GetRunInput reads a run's input as it was given (JSON, or an uploaded
// text input's text); one over LargeRunBytes through its download URL.
func (c *Client) GetRunInput(ctx context.Context, app, id string) ([]byte, error) {
	m, err := c.RunMetadata(ctx, app, id)
	if err != nil {
		return nil, err
	}
	p := path("v1", "applications", app, "runs", id, "input")
	if size, _ := m.Metadata.InputSize.Int64(); size <= LargeRunBytes {
		return c.do(ctx, http.MethodGet, p, nil, nil)
	}
	var d DownloadURL
	raw, err := c.call(ctx, http.MethodGet, p, url.Values{"format": {"url"}}, nil, &d)
	if err != nil {
		return nil, err
	}
	u, ok := downloadURL(raw)
	if !ok {
		return raw, nil // a service that answered it inline after all
	}
	return c.download(ctx, u, "the input of run "+id)
}

// download GETs a download URL, with no credential: the URL is one, and a
// storage service refuses a request that carries two.
func (c *Client) download(ctx context.Context, u, what string) ([]byte, error) {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, fmt.Errorf("download %s: %q is not an absolute http or https URL", what, u)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", what, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("download %s from %s: %w", what, redactURL(u), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDownload+1))
	if err != nil {
		return nil, fmt.Errorf("download %s from %s: %w", what, redactURL(u), err)
	}
	if resp.StatusCode/100 != 2 {
		ae := c.apiError(http.MethodGet, redactURL(u), resp.StatusCode, b)
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden {
			ae.Hint = "the download URL expired: read the run again for a new one"
		}
		return nil, ae
	}
	if len(b) > maxDownload {
		return nil, fmt.Errorf("download %s: it is larger than %d bytes, the most devhook reads", what, maxDownload)
	}
	return b, nil
}

// CancelRun cancels a queued or running run (PATCH …/cancel) and returns
// the record the answer carries, without output. A run that has ended is
// a 409 whose hint says so.
func (c *Client) CancelRun(ctx context.Context, app, id string) (Run, error) {
	var r Run
	raw, err := c.call(ctx, http.MethodPatch, path("v1", "applications", app, "runs", id, "cancel"), nil, nil, &r)
	if err != nil {
		return r, explain(err, http.StatusConflict, fmt.Sprintf("the run has ended already, so there is nothing to cancel: devhook runs get %s %s shows how it ended", app, id))
	}
	r.fill(raw)
	if r.ID == "" {
		r.ID = id
	}
	return r, nil
}

// RunLog is the answer of GET …/logs; Log is nil when it has no log.
type RunLog struct {
	Log *string `json:"log"`
}

// RunLogs reads a run's log: what a pushed application wrote to standard
// error, so far while it runs.
func (c *Client) RunLogs(ctx context.Context, app, id string) (string, error) {
	var l RunLog
	raw, err := c.call(ctx, http.MethodGet, path("v1", "applications", app, "runs", id, "logs"), nil, nil, &l)
	if err != nil {
		return "", err
	}
	if l.Log == nil {
		return "", fmt.Errorf("GET the logs of run %s: the answer has no log: %s", id, raw)
	}
	return *l.Log, nil
}

// WaitRun reads the run's metadata every interval (0 means 500 ms) until
// its status is final or ctx ends, then the whole record (as GetRun).
// onStatus, when not nil, is called with the run each time its status
// changes. It is WatchRun at a steady pace.
func (c *Client) WaitRun(ctx context.Context, app, id string, interval time.Duration, onStatus func(Run)) (Run, error) {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	return c.WatchRun(ctx, app, id, RunWatch{Min: interval, Max: interval, OnStatus: onStatus})
}

// Team is an organization record.
type Team struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Role          string `json:"role"`
	PendingInvite bool   `json:"pending_invite"`
}

// Organizations lists the caller's teams. The call goes over HTTPS only
// (the interface's rule for organization and single sign-on calls): on an
// endpoint of another scheme it is an auth.ErrNotHTTPS, and nothing is
// sent.
func (c *Client) Organizations(ctx context.Context) ([]Team, json.RawMessage, error) {
	if !strings.EqualFold(c.base.Scheme, "https") {
		return nil, nil, fmt.Errorf("%w: the organizations call goes over HTTPS only, and the endpoint %s uses %s (give a bare host or an https:// URL; devhook emulate --tls serves HTTPS)",
			auth.ErrNotHTTPS, c.base.Redacted(), c.base.Scheme)
	}
	var ts []Team
	raw, err := c.call(ctx, http.MethodGet, "/v1/internal/me/organization", nil, nil, &ts)
	return ts, raw, err
}

// ResolveTeam returns the id of the team given by id or name. A UUID is
// taken as an id without a call; anything else is looked up among the
// caller's teams (Organizations: over HTTPS only), by id and then by name
// (case-insensitively).
func (c *Client) ResolveTeam(ctx context.Context, idOrName string) (string, error) {
	if _, err := uuid.Parse(idOrName); err == nil {
		return idOrName, nil
	}
	ts, _, err := c.WithTeam("").Organizations(ctx)
	if errors.Is(err, auth.ErrNotHTTPS) {
		return "", fmt.Errorf("look up team %q: %w; or give the team's id, a UUID, which is sent as it is without a lookup (devhook orgs lists them)", idOrName, err)
	}
	if err != nil {
		return "", fmt.Errorf("look up team %q: %w", idOrName, err)
	}
	var names []string
	for _, t := range ts {
		if t.ID == idOrName {
			return t.ID, nil
		}
	}
	for _, t := range ts {
		if strings.EqualFold(t.Name, idOrName) {
			return t.ID, nil
		}
		names = append(names, fmt.Sprintf("%s (%s)", t.Name, t.ID))
	}
	if len(names) == 0 {
		return "", fmt.Errorf("no team %q: you belong to no team", idOrName)
	}
	return "", fmt.Errorf("no team %q among yours: %s", idOrName, strings.Join(names, ", "))
}
