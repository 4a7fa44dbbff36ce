package emulator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

// The only instance an application has: pushing creates it.
const defaultInstance = "latest"

// Run states, in order.
const (
	statusQueued    = "queued"
	statusRunning   = "running"
	statusSucceeded = "succeeded"
)

type applicationView struct {
	ID                        string `json:"id"`
	Name                      string `json:"name"`
	Description               string `json:"description"`
	Type                      string `json:"type"`
	DefaultInstance           string `json:"default_instance"`
	DefaultExperimentInstance string `json:"default_experiment_instance"`
	SubscriptionID            string `json:"subscription_id"`
	Locked                    bool   `json:"locked"`
	CreatedAt                 string `json:"created_at"`
	UpdatedAt                 string `json:"updated_at"`
}

func (a *application) view() applicationView {
	return applicationView{ID: a.ID, Name: a.Name, Description: a.Description, Type: "custom",
		DefaultInstance: defaultInstance, CreatedAt: a.CreatedAt.Format(timeMicros), UpdatedAt: a.UpdatedAt.Format(timeMicros)}
}

func (e *Emulator) createApplication(w http.ResponseWriter, r *http.Request, c *call) error {
	var in struct {
		ID          *string `json:"id"`
		Name        *string `json:"name"`
		Description *string `json:"description"`
	}
	if err := e.decodeBody(w, r, &in); err != nil {
		return err
	}
	switch {
	case in.ID == nil:
		return errorf(http.StatusBadRequest, "missing field: id")
	case utf8.RuneCountInString(*in.ID) < 1 || utf8.RuneCountInString(*in.ID) > 255:
		return errorf(http.StatusBadRequest, "id must be 1 to 255 characters")
	case in.Name == nil || *in.Name == "":
		return errorf(http.StatusBadRequest, "missing field: name")
	}
	desc := ""
	if in.Description != nil {
		desc = *in.Description
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	k := acctKey(c.account, *in.ID)
	if e.st.apps[k] != nil {
		return errorf(http.StatusConflict, "an application with id %q already exists", *in.ID)
	}
	a := &application{Account: c.account, ID: *in.ID, Name: *in.Name, Description: desc, CreatedAt: now, UpdatedAt: now}
	if err := e.persist(op{bucketApps, k, a}); err != nil {
		return err
	}
	e.st.apps[k] = a
	writeJSON(w, http.StatusCreated, a.view())
	return nil
}

func (e *Emulator) lookupApplication(c *call) (*application, error) {
	id := c.args["application_id"]
	a := e.st.apps[acctKey(c.account, id)]
	if a == nil {
		return nil, errorf(http.StatusNotFound, "no application with id %q; create it with POST /v1/applications", id)
	}
	return a, nil
}

func (e *Emulator) getApplication(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, err := e.lookupApplication(c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.view())
	return nil
}

func (e *Emulator) startRun(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	_, err := e.lookupApplication(c)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	instance := r.URL.Query().Get("instance_id")
	if instance == "" {
		instance = defaultInstance
	}
	if instance != defaultInstance {
		return errorf(http.StatusNotFound, "application %q has no instance %q; its only instance is %q", c.args["application_id"], instance, defaultInstance)
	}
	var in struct {
		Input       json.RawMessage   `json:"input"`
		Options     map[string]string `json:"options"`
		Name        string            `json:"name"`
		Description string            `json:"description"`
	}
	if err := e.decodeBody(w, r, &in); err != nil {
		return err
	}
	if len(in.Input) == 0 {
		return errorf(http.StatusBadRequest, `missing field: input; send {"input": <any JSON>, "options": {...}}`)
	}
	if in.Options == nil {
		in.Options = map[string]string{}
	}
	id, err := e.newID()
	if err != nil {
		return err
	}
	now := e.now()
	rn := &run{Account: c.account, ID: id, AppID: c.args["application_id"], InstanceID: instance,
		Name: in.Name, Description: in.Description, UserEmail: c.email,
		ConsoleURL: e.baseURL(r) + "/console/applications/" + url.PathEscape(c.args["application_id"]) + "/runs/" + id,
		Input:      in.Input, Options: in.Options, Status: statusQueued, CreatedAt: now}
	k := acctKey(c.account, id)
	e.mu.Lock()
	if err := e.persist(op{bucketRuns, k, rn}); err != nil {
		e.mu.Unlock()
		return err
	}
	e.st.runs[k] = rn
	view := rn.view()
	e.mu.Unlock()
	e.schedule(k, true)
	writeJSON(w, http.StatusCreated, view)
	return nil
}

func (e *Emulator) getRun(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.lookupApplication(c); err != nil {
		return err
	}
	id := c.args["run_id"]
	rn := e.st.runs[acctKey(c.account, id)]
	if rn == nil || rn.AppID != c.args["application_id"] {
		return errorf(http.StatusNotFound, "application %q has no run with id %q", c.args["application_id"], id)
	}
	writeJSON(w, http.StatusOK, rn.view())
	return nil
}

// resumeRuns continues the schedule of runs a previous emulator with the
// same data directory left unfinished. Deliveries already sent are not
// sent again.
func (e *Emulator) resumeRuns() {
	e.mu.Lock()
	var keys []string
	for k, rn := range e.st.runs {
		if rn.Status != statusSucceeded {
			keys = append(keys, k)
		}
	}
	e.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		e.schedule(k, false)
	}
}

// schedule moves the run at key to succeeded, one step after each of
// QueueTime and RunTime, and sends a run.status event for every state
// (the queued one too when sendQueued). One goroutine keeps the time, a
// second sends the events in order, each after the previous one's first
// attempts, so that a slow receiver does not hold up the run.
func (e *Emulator) schedule(key string, sendQueued bool) {
	e.mu.Lock()
	account := e.st.runs[key].Account
	e.mu.Unlock()
	events := make(chan devhook.RunStatus, 3)
	started := e.goroutine(func(ctx context.Context) {
		for ev := range events {
			e.mu.Lock()
			hooks := e.subscribers(account)
			e.mu.Unlock()
			e.deliverAll(ctx, account, hooks, ev)
		}
	})
	if !started {
		return
	}
	started = e.goroutine(func(ctx context.Context) {
		defer close(events)
		e.mu.Lock()
		status := e.st.runs[key].Status
		if sendQueued {
			events <- e.st.runs[key].event()
		}
		e.mu.Unlock()
		steps := []struct {
			from, to string
			wait     time.Duration
		}{{statusQueued, statusRunning, e.cfg.QueueTime}, {statusRunning, statusSucceeded, e.cfg.RunTime}}
		for _, s := range steps {
			if status != s.from {
				continue
			}
			t := time.NewTimer(s.wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			ev, ok := e.transition(key, s.to)
			if !ok {
				return
			}
			events <- ev
			status = s.to
		}
	})
	if !started {
		close(events)
	}
}

// transition moves the run to status and returns the event to send.
func (e *Emulator) transition(key, status string) (devhook.RunStatus, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.st.runs[key]
	rn := *old
	now := e.now()
	rn.Status = status
	switch status {
	case statusRunning:
		rn.InitiatedAt = now
	case statusSucceeded:
		rn.FinishedAt = now
	}
	if err := e.persist(op{bucketRuns, key, &rn}); err != nil {
		return devhook.RunStatus{}, false
	}
	e.st.runs[key] = &rn
	return rn.event(), true
}

// solution is the emulated execution's output: the input, copied.
func (rn *run) solution() json.RawMessage {
	if rn.Status != statusSucceeded || string(rn.Input) == "null" {
		return json.RawMessage("{}")
	}
	return rn.Input
}

func (rn *run) durations() (total, execution, outputSize int64) {
	if rn.Status != statusSucceeded {
		return 0, 0, 0
	}
	return rn.FinishedAt.Sub(rn.CreatedAt).Milliseconds(), rn.FinishedAt.Sub(rn.InitiatedAt).Milliseconds(), int64(len(rn.solution()))
}

func (rn *run) event() devhook.RunStatus {
	total, _, out := rn.durations()
	return devhook.RunStatus{EventType: devhook.EventRunStatus, APIVersion: devhook.APIVersion, Data: devhook.RunStatusData{
		RunID: rn.ID, Status: devhook.LegacyStatus(rn.Status), StatusV2: rn.Status,
		CreatedAt: rn.CreatedAt.Format(timeSeconds), Duration: total, InputSize: int64(len(rn.Input)), OutputSize: out,
		ApplicationID: rn.AppID, ApplicationInstanceID: rn.InstanceID, ApplicationVersionID: "",
	}}
}

type optionSummary struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Value  string `json:"value"`
}

// view is the run record.
func (rn *run) view() map[string]any {
	total, execution, out := rn.durations()
	summary := []optionSummary{}
	names := make([]string, 0, len(rn.Options))
	for n := range rn.Options {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		summary = append(summary, optionSummary{Name: n, Source: "user", Value: rn.Options[n]})
	}
	initiated := rn.InitiatedAt
	if initiated.IsZero() {
		initiated = rn.CreatedAt
	}
	jsonFormat := map[string]string{"type": "json"}
	return map[string]any{
		"id": rn.ID, "name": rn.Name, "description": rn.Description, "user_email": rn.UserEmail, "console_url": rn.ConsoleURL,
		"output": map[string]any{"options": rn.Options, "solution": rn.solution(), "metrics": map[string]any{}},
		"metadata": map[string]any{
			"application_id": rn.AppID, "application_instance_id": rn.InstanceID, "application_version_id": "",
			"created_at": rn.CreatedAt.Format(timeMicros), "initiated_at": initiated.Format(timeMicros),
			"duration": total, "execution_duration": execution, "input_size": len(rn.Input), "output_size": out,
			"error": "", "execution_class": "default",
			"format":           map[string]any{"input": jsonFormat, "output": jsonFormat},
			"metrics":          map[string]any{},
			"options":          map[string]any{"active_options": rn.Options, "options_summary": summary},
			"queuing_disabled": false, "queuing_priority": 0,
			"run_type": map[string]string{"type": "standard", "definition_id": "", "reference_id": ""},
			"runtime":  "default", "status_v2": rn.Status,
		},
	}
}
