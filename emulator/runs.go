package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/devhook/devhook"
)

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
