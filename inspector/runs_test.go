package inspector_test

import (
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
)

// TestAnalyzeRunFinalSteps: a run that failed or was canceled is complete
// with its own last step; a run canceled while queued misses nothing; a
// second ending is flagged.
func TestAnalyzeRunFinalSteps(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	steps := func(statuses ...string) []devhook.Summary {
		var out []devhook.Summary
		for i, s := range statuses {
			out = append(out, devhook.Summary{ID: "d" + s, ReceivedAt: at.Add(time.Duration(i) * time.Second), Event: devhook.Event{RunID: "r", StatusV2: s}})
		}
		return out
	}
	tests := []struct {
		statuses []string
		expected string
		missing  string
		complete bool
		flags    string // of the last step
	}{
		{[]string{"queued", "running", "failed"}, "queued,running,failed", "", true, ""},
		{[]string{"queued", "running", "canceled"}, "queued,running,canceled", "", true, ""},
		{[]string{"queued", "canceled"}, "queued,canceled", "", true, ""},
		{[]string{"queued", "failed"}, "queued,running,failed", "running", true, ""},
		{[]string{"queued", "running"}, "queued,running,succeeded", "", false, ""},
		{[]string{"queued", "running", "failed", "succeeded"}, "queued,running,failed", "", true, "duplicate"},
		{[]string{"queued", "running", "exploded"}, "queued,running,succeeded", "", false, "unknown_status"},
	}
	for _, tt := range tests {
		tl := inspector.AnalyzeRun("r", steps(tt.statuses...))
		last := tl.Steps[len(tl.Steps)-1]
		if strings.Join(tl.Expected, ",") != tt.expected || strings.Join(tl.Missing, ",") != tt.missing ||
			tl.Complete != tt.complete || strings.Join(last.Flags, ",") != tt.flags {
			t.Errorf("%v: expected %v missing %v complete %v last flags %v; issues %v",
				tt.statuses, tl.Expected, tl.Missing, tl.Complete, last.Flags, tl.Issues)
		}
	}
}
