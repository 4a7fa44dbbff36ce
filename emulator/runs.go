package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

// Every application has the instances latest (its default, which pushing
// creates) and devint, as the service creates them; a run may name either.
// Both run what was pushed: devint is the instance the service's own
// clients start runs on by default (docs/INTERFACE.md says why).
const defaultInstance = "latest"

// instances returns the instances of every application.
func instances() []string { return []string{defaultInstance, "devint"} }

// Run states (status_v2). A run goes queued → running → succeeded, or
// failed when it executes a pushed application that fails (exec.go); PATCH
// …/cancel moves a run that is queued or running to canceled.
const (
	statusQueued    = "queued"
	statusRunning   = "running"
	statusSucceeded = "succeeded"
	statusFailed    = "failed"
	statusCanceled  = "canceled"
)

// final says a run has reached a state it never leaves.
func final(status string) bool {
	return status == statusSucceeded || status == statusFailed || status == statusCanceled
}

// legacyStatus is the legacy status field paired with a status_v2 value.
// The interface pairs queued with running and shows running and succeeded
// as themselves (devhook.LegacyStatus). It does not show canceled; the
// official clients know only failed, running and succeeded as legacy
// values (status_v2 adds queued, canceled and none), so a canceled run
// says failed there, the value such a client reads as "did not succeed",
// and its error says it was canceled.
func legacyStatus(statusV2 string) string {
	if statusV2 == statusCanceled {
		return "failed"
	}
	return devhook.LegacyStatus(statusV2)
}

// canceledError is the error of a canceled run, in its record and events.
const canceledError = "run was canceled"

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

// instance returns the instance a run request names: instance_id, or the
// default one when absent. 404 for an instance the application lacks.
func instanceOf(r *http.Request, c *call) (string, error) {
	instance := r.URL.Query().Get("instance_id")
	if instance == "" {
		return defaultInstance, nil
	}
	for _, i := range instances() {
		if i == instance {
			return instance, nil
		}
	}
	return "", errorf(http.StatusNotFound, "application %q has no instance %q; its instances are %s",
		c.args["application_id"], instance, strings.Join(instances(), " and "))
}

// startRun answers 201 with the run record plus run_id, the field the
// official clients read. The input comes inline ("input") or from an
// upload ("upload_id", see uploads.go), not both.
func (e *Emulator) startRun(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	_, err := e.lookupApplication(c)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	instance, err := instanceOf(r, c)
	if err != nil {
		return err
	}
	var in struct {
		Input       json.RawMessage            `json:"input"`
		UploadID    *string                    `json:"upload_id"`
		Options     map[string]json.RawMessage `json:"options"`
		Name        string                     `json:"name"`
		Description string                     `json:"description"`
	}
	if err := e.decodeBodyN(w, r, &in, e.cfg.MaxInputBytes); err != nil {
		return err
	}
	options, err := optionValues(in.Options)
	if err != nil {
		return err
	}
	switch {
	case len(in.Input) > 0 && in.UploadID != nil:
		return errorf(http.StatusBadRequest, "send either input or upload_id, not both")
	case len(in.Input) == 0 && in.UploadID == nil:
		return errorf(http.StatusBadRequest, `missing field: input; send {"input": <any JSON>, "options": {...}}, `+
			`or {"upload_id": <id>} after a PUT of the input to the upload_url of POST …/runs/uploadurl`)
	}
	id, err := e.newID()
	if err != nil {
		return err
	}
	now := e.now()
	appID := c.args["application_id"]
	rn := &run{Account: c.account, ID: id, AppID: appID, InstanceID: instance,
		Name: in.Name, Description: in.Description, UserEmail: c.email,
		ConsoleURL: e.baseURL(r) + "/console/applications/" + url.PathEscape(appID) + "/runs/" + id,
		Input:      in.Input, Options: options, Status: statusQueued, CreatedAt: now}
	k := acctKey(c.account, id)
	ops := []op{{bucketRuns, k, rn}}
	e.mu.Lock()
	rn.Seq = e.nextSeq()
	if a := e.st.apps[acctKey(c.account, appID)]; a != nil && a.Binary != nil {
		b := *a.Binary
		rn.Binary = &b
	}
	var upKey string
	if in.UploadID != nil {
		u, uk, err := e.upload(c.account, appID, *in.UploadID)
		if err != nil {
			e.mu.Unlock()
			return err
		}
		rn.Input, rn.Text, rn.InputBytes = u.Input, u.Text, u.Size
		upKey = uk
		ops = append(ops, op{bucketUploads, uk, nil}) // single use
	}
	if err := e.persist(ops...); err != nil {
		e.mu.Unlock()
		return err
	}
	if upKey != "" {
		e.dropUpload(upKey)
	}
	e.st.runs[k] = rn
	answer := rn.record(true)
	answer["run_id"] = id
	queued := rn.event()
	e.mu.Unlock()
	e.schedule(k, &queued)
	writeJSON(w, http.StatusCreated, answer)
	return nil
}

// optionValues takes a run's options as the service's clients send them:
// a string as is, a number as its JSON text as sent (3, 2.50, 1e3), a
// boolean as true or false. An object, an array or null is 400.
func optionValues(raw map[string]json.RawMessage) (map[string]string, error) {
	out := make(map[string]string, len(raw))
	for name, v := range raw {
		v = bytes.TrimSpace(v)
		kind := ""
		switch {
		case len(v) == 0:
			kind = "nothing"
		case v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, errorf(http.StatusBadRequest, "options.%s is not a valid JSON string", name)
			}
			out[name] = s
		case string(v) == "true" || string(v) == "false":
			out[name] = string(v)
		case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
			out[name] = string(v) // a number, as sent: the decoder checked it
		case v[0] == '{':
			kind = "an object"
		case v[0] == '[':
			kind = "an array"
		default:
			kind = "null"
		}
		if kind != "" {
			return nil, errorf(http.StatusBadRequest, "options.%s is %s: an option's value is a string, a number or a boolean "+
				"(it reaches the application as the text after -%s)", name, kind, name)
		}
	}
	return out, nil
}

// lookupRun returns the run of the path's application and run_id. The
// caller holds e.mu.
func (e *Emulator) lookupRun(c *call) (string, *run, error) {
	if _, err := e.lookupApplication(c); err != nil {
		return "", nil, err
	}
	id := c.args["run_id"]
	k := acctKey(c.account, id)
	rn := e.st.runs[k]
	if rn == nil || rn.AppID != c.args["application_id"] {
		return "", nil, errorf(http.StatusNotFound, "application %q has no run with id %q", c.args["application_id"], id)
	}
	return k, rn, nil
}

// getRun answers the run record, output included; with format=url its
// output is {"url": <download URL>} (downloads.go).
func (e *Emulator) getRun(w http.ResponseWriter, r *http.Request, c *call) error {
	f, err := format(r)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k, rn, err := e.lookupRun(c)
	if err != nil {
		return err
	}
	rec := rn.record(true)
	if f == "url" && rn.output() != nil {
		u, err := e.downloadURL(r, c.account, k, "output")
		if err != nil {
			return err
		}
		rec["output"] = map[string]string{"url": u}
	}
	writeJSON(w, http.StatusOK, rec)
	return nil
}

// getRunMetadata answers the run record without output: what the official
// clients poll until status_v2 is final.
func (e *Emulator) getRunMetadata(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, rn, err := e.lookupRun(c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rn.record(false))
	return nil
}

// getRunLogs answers {"log": text}. A run of a pushed application logs
// what it writes to standard error, so far while it runs. The emulated
// execution prints nothing of its own, so its log is one line for each
// state the run has reached.
func (e *Emulator) getRunLogs(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	k, rn, err := e.lookupRun(c)
	live := e.logs[k]
	e.mu.Unlock()
	if err != nil {
		return err
	}
	text := rn.log()
	if live != nil {
		text = live.String()
	}
	writeJSON(w, http.StatusOK, map[string]string{"log": text})
	return nil
}

func (rn *run) log() string {
	if rn.Binary != nil {
		return rn.Logs
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s queued on instance %s, input %d bytes\n", rn.CreatedAt.Format(timeMillis), rn.InstanceID, rn.inputSize())
	if !rn.InitiatedAt.IsZero() {
		fmt.Fprintf(&b, "%s running\n", rn.InitiatedAt.Format(timeMillis))
	}
	switch rn.Status {
	case statusSucceeded:
		_, _, out := rn.durations()
		fmt.Fprintf(&b, "%s succeeded, output %d bytes\n", rn.FinishedAt.Format(timeMillis), out)
	case statusCanceled:
		fmt.Fprintf(&b, "%s canceled\n", rn.FinishedAt.Format(timeMillis))
	}
	return b.String()
}

// cancelRun moves a queued or running run to canceled and answers 200 with
// the run record without output; its schedule sends the canceled
// run.status event, after the events before it. A final run is 409.
func (e *Emulator) cancelRun(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	k, old, err := e.lookupRun(c)
	if err != nil {
		return err
	}
	if final(old.Status) {
		return errorf(http.StatusConflict, "run %s already finished (%s): nothing to cancel", old.ID, old.Status)
	}
	rn := *old
	rn.Status, rn.FinishedAt = statusCanceled, e.now()
	if err := e.persist(op{bucketRuns, k, &rn}); err != nil {
		return err
	}
	e.st.runs[k] = &rn
	if wake := e.wake[k]; wake != nil {
		select {
		case wake <- struct{}{}:
		default: // already woken
		}
	}
	writeJSON(w, http.StatusOK, rn.record(false))
	return nil
}

// resumeRuns continues the schedule of runs a previous emulator with the
// same data directory left unfinished. Deliveries already sent are not
// sent again.
func (e *Emulator) resumeRuns() {
	e.mu.Lock()
	var keys []string
	for k, rn := range e.st.runs {
		if !final(rn.Status) {
			keys = append(keys, k)
		}
	}
	e.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		e.schedule(k, nil)
	}
}

// schedule moves the run at key to succeeded, one step after each of
// QueueTime and RunTime, and sends a run.status event for every state it
// moves to (first, the queued one, before them when not nil). A cancel
// wakes it: it then sends the canceled event and stops. One goroutine
// keeps the time, a second sends the events in order, each after the
// previous one's first attempts, so that a slow receiver does not hold up
// the run.
func (e *Emulator) schedule(key string, first *devhook.RunStatus) {
	wake := make(chan struct{}, 1)
	e.mu.Lock()
	account := e.st.runs[key].Account
	e.wake[key] = wake
	e.mu.Unlock()
	forget := func() {
		e.mu.Lock()
		if e.wake[key] == wake {
			delete(e.wake, key)
		}
		e.mu.Unlock()
	}
	events := make(chan devhook.RunStatus, 3) // queued, running, and succeeded or canceled
	started := e.goroutine(func(ctx context.Context) {
		for ev := range events {
			e.mu.Lock()
			hooks := e.subscribers(account)
			e.mu.Unlock()
			e.deliverAll(ctx, account, hooks, ev)
		}
	})
	if !started {
		forget()
		return
	}
	started = e.goroutine(func(ctx context.Context) {
		defer close(events)
		defer forget()
		if first != nil {
			events <- *first
		}
		// A run of a pushed application holds one of MaxParallelRuns
		// slots from leaving queued to its end: past them, runs stay
		// queued.
		holding := false
		defer func() {
			if holding {
				<-e.slots
			}
		}()
		for {
			e.mu.Lock()
			rn := e.st.runs[key]
			status, ev := rn.Status, rn.event()
			e.mu.Unlock()
			var next string
			var wait time.Duration
			switch status {
			case statusQueued:
				next, wait = statusRunning, e.cfg.QueueTime
			case statusRunning:
				if rn.Binary != nil {
					if !holding { // resumed after a restart while running
						select {
						case e.slots <- struct{}{}:
							holding = true
						case <-ctx.Done():
							return
						case <-wake:
							continue
						}
					}
					run := *rn
					res := e.execute(ctx, key, &run, wake)
					if ctx.Err() != nil {
						e.forgetLogs(key)
						return // Close: the run goes on when an emulator starts again
					}
					<-e.slots
					holding = false
					var ev devhook.RunStatus
					var moved bool
					if !e.retrying(ctx, "saving how run "+rn.ID+" ended", func() (err error) {
						ev, moved, err = e.finish(key, res)
						return err
					}) {
						return // Close: the run executes again at the next start
					}
					if moved {
						events <- ev
					}
					continue // a cancel's turn sends it
				}
				next, wait = statusSucceeded, e.cfg.RunTime
			case statusCanceled:
				events <- ev
				return
			default:
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-wake:
				t.Stop()
				continue // canceled: the next turn sends it
			case <-t.C:
			}
			if status == statusQueued && rn.Binary != nil && !holding {
				select {
				case e.slots <- struct{}{}:
					holding = true
				case <-ctx.Done():
					return
				case <-wake:
					continue
				}
			}
			var moved bool
			if !e.retrying(ctx, "saving run "+rn.ID+" as "+next, func() (err error) {
				ev, moved, err = e.transition(key, status, next)
				return err
			}) {
				return
			}
			if moved {
				events <- ev
			}
		}
	})
	if !started {
		forget()
		close(events)
	}
}

// Bounds of the waits between tries of a write that failed.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 30 * time.Second
)

// retrying calls f until it succeeds, waiting between tries from
// retryFirst, doubling to retryMax, give or take a fifth; the first
// failure is logged, and the count once it succeeds. It returns false
// when ctx ends first.
func (e *Emulator) retrying(ctx context.Context, what string, f func() error) bool {
	fails := failures{what: what, logf: e.cfg.Logf}
	wait := retryFirst
	for {
		err := f()
		if err == nil {
			fails.ok()
			return true
		}
		fails.fail(err)
		t := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// transition moves the run from status from to status to and returns the
// event to send. moved is false when the run is no longer in from (a
// cancel came first).
func (e *Emulator) transition(key, from, to string) (ev devhook.RunStatus, moved bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.st.runs[key]
	if old.Status != from {
		return devhook.RunStatus{}, false, nil
	}
	rn := *old
	now := e.now()
	rn.Status = to
	switch to {
	case statusRunning:
		rn.InitiatedAt = now
	case statusSucceeded:
		rn.FinishedAt = now
	}
	if err := e.persist(op{bucketRuns, key, &rn}); err != nil {
		return devhook.RunStatus{}, false, err
	}
	e.st.runs[key] = &rn
	return rn.event(), true, nil
}

// finish records how the execution of the running run at key ended and
// returns the event to send. moved is false when the run is no longer
// running (a cancel came first): it then keeps only the logs.
func (e *Emulator) finish(key string, res outcome) (ev devhook.RunStatus, moved bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer delete(e.logs, key) // the run keeps them from now on
	old := e.st.runs[key]
	rn := *old
	rn.Logs = res.logs
	moved = old.Status == statusRunning && res.status != ""
	if moved {
		rn.Status, rn.FinishedAt = res.status, e.now()
		rn.Output, rn.Error = res.output, res.errMsg
	}
	if err := e.persist(op{bucketRuns, key, &rn}); err != nil {
		return devhook.RunStatus{}, false, err
	}
	e.st.runs[key] = &rn
	return rn.event(), moved, nil
}

// output is the run's output as served, compact: what a pushed
// application printed, or the emulated execution's options, metrics and
// solution (the input, copied). nil until the run has succeeded: a run
// that failed or was canceled has none.
func (rn *run) output() json.RawMessage {
	if rn.Status != statusSucceeded {
		return nil
	}
	if rn.Binary != nil {
		return rn.Output
	}
	solution := rn.Input
	if len(solution) == 0 || string(solution) == "null" {
		solution = json.RawMessage("{}")
	}
	options := rn.Options
	if options == nil {
		options = map[string]string{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as writeJSON serves it
	if err := enc.Encode(map[string]any{"options": options, "solution": solution, "metrics": map[string]any{}}); err != nil {
		return nil // the input was checked as JSON when it came
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// inputSize is the input's size in bytes: the JSON as sent, or the text
// as uploaded.
func (rn *run) inputSize() int64 {
	if rn.InputBytes > 0 {
		return rn.InputBytes
	}
	return int64(len(rn.Input))
}

// durations are zero until the run is final; a canceled run has no output.
func (rn *run) durations() (total, execution, outputSize int64) {
	if !final(rn.Status) {
		return 0, 0, 0
	}
	total = rn.FinishedAt.Sub(rn.CreatedAt).Milliseconds()
	if !rn.InitiatedAt.IsZero() {
		execution = rn.FinishedAt.Sub(rn.InitiatedAt).Milliseconds()
	}
	return total, execution, int64(len(rn.output()))
}

// errorText is the run's error: "" when none.
func (rn *run) errorText() string {
	switch rn.Status {
	case statusCanceled:
		return canceledError
	case statusFailed:
		return rn.Error
	}
	return ""
}

func (rn *run) event() devhook.RunStatus {
	total, _, out := rn.durations()
	var errp *string // null when there is no error
	if msg := rn.errorText(); msg != "" {
		errp = &msg
	}
	return devhook.RunStatus{EventType: devhook.EventRunStatus, APIVersion: devhook.APIVersion, Data: devhook.RunStatusData{
		RunID: rn.ID, Status: legacyStatus(rn.Status), StatusV2: rn.Status,
		CreatedAt: rn.CreatedAt.Format(timeSeconds), Duration: total, InputSize: rn.inputSize(), OutputSize: out,
		Error: errp, ApplicationID: rn.AppID, ApplicationInstanceID: rn.InstanceID, ApplicationVersionID: "",
	}}
}

type optionSummary struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Value  string `json:"value"`
}

// record is the run record; without output when withOutput is false (the
// metadata endpoint and the cancel answer).
func (rn *run) record(withOutput bool) map[string]any {
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
	inputFormat := map[string]string{"type": "json"}
	if rn.Text {
		inputFormat = map[string]string{"type": "text"}
	}
	rec := map[string]any{
		"id": rn.ID, "name": rn.Name, "description": rn.Description, "user_email": rn.UserEmail, "console_url": rn.ConsoleURL,
		"metadata": map[string]any{
			"application_id": rn.AppID, "application_instance_id": rn.InstanceID, "application_version_id": "",
			"created_at": rn.CreatedAt.Format(timeMicros), "initiated_at": initiated.Format(timeMicros),
			"duration": total, "execution_duration": execution, "input_size": rn.inputSize(), "output_size": out,
			"error": rn.errorText(), "execution_class": "default",
			"format":           map[string]any{"input": inputFormat, "output": map[string]string{"type": "json"}},
			"metrics":          map[string]any{},
			"options":          map[string]any{"active_options": rn.Options, "options_summary": summary},
			"queuing_disabled": false, "queuing_priority": 0,
			"run_type": map[string]string{"type": "standard", "definition_id": "", "reference_id": ""},
			"runtime":  rn.runtime(), "status": legacyStatus(rn.Status), "status_v2": rn.Status,
		},
	}
	if withOutput {
		rec["output"] = nil // null until the run has succeeded
		if out := rn.output(); out != nil {
			rec["output"] = out
		}
	}
	return rec
}

// runtime is the runtime of the pushed executable the run executes, or
// "default" for the emulated execution.
func (rn *run) runtime() string {
	if rn.Binary != nil && rn.Binary.Runtime != "" {
		return rn.Binary.Runtime
	}
	return "default"
}
