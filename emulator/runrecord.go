package emulator

import (
	"bytes"
	"encoding/json"
	"sort"

	"github.com/devhook/devhook"
)

// A run as the API shows it: its record, event, output and sizes.

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
