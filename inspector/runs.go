package inspector

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/devhook/devhook"
)

// recentRuns is how many of the newest deliveries /api/runs groups.
const recentRuns = 1000

// RunSteps is the order of a successful run's status_v2 values.
func RunSteps() []string { return []string{"queued", "running", "succeeded"} }

// FinalSteps are the status_v2 values a run ends with: succeeded, failed
// (a pushed application that failed or ran out of time) or canceled.
func FinalSteps() []string { return []string{"succeeded", "failed", "canceled"} }

// stepRank is a status_v2's place in a run: queued 0, running 1, any
// final step 2; -1 for one devhook does not know.
func stepRank(statusV2 string) int {
	if slices.Contains(FinalSteps(), statusV2) {
		return 2
	}
	return slices.Index(RunSteps(), statusV2)
}

// expectedSteps is the order of steps of a run that ended with final
// ("" while it has not): a run canceled while queued never ran.
func expectedSteps(final string, ran bool) []string {
	switch {
	case final == "":
		return RunSteps()
	case final == "canceled" && !ran:
		return []string{"queued", final}
	}
	return []string{"queued", "running", final}
}

// Step is one delivery on a run's timeline.
type Step struct {
	devhook.Summary
	// SincePrevious is the time since the previous delivery of the run, in
	// milliseconds; 0 for the first.
	SincePrevious devhook.Duration `json:"since_previous_ms"`
	// Offset is the time since the run's first delivery, in milliseconds.
	// The page draws every gap (the timeline's and the table's) as the
	// difference of two offsets, so that the same gap reads the same.
	Offset devhook.Duration `json:"offset_ms"`
	// Flags: "out_of_order" (arrived after a later step), "duplicate" (a
	// status_v2 seen before), "unknown_status".
	Flags []string `json:"flags,omitempty"`
	Note  string   `json:"note,omitempty"`
}

// Timeline is the answer of GET /api/runs/{run_id}.
type Timeline struct {
	RunID string `json:"run_id"`
	Steps []Step `json:"steps"`
	// Expected is the full order of steps, for drawing the missing ones.
	Expected []string `json:"expected"`
	// Missing are expected steps that never arrived although a later one did.
	Missing []string `json:"missing"`
	// Complete says the last expected step arrived.
	Complete bool `json:"complete"`
	// Total is the time from the first delivery to the last, milliseconds.
	Total devhook.Duration `json:"total_ms"`
	// Issues explain every flag and missing step in a sentence each.
	Issues []string `json:"issues"`
}

// AnalyzeRun builds the timeline of a run from its deliveries, oldest first.
func AnalyzeRun(runID string, items []devhook.Summary) Timeline {
	t := Timeline{RunID: runID, Steps: make([]Step, 0, len(items)), Missing: []string{}, Issues: []string{}}
	seen := map[string]bool{}
	final := "" // the first final step that arrived
	highest := -1
	for i, it := range items {
		st := Step{Summary: it, Offset: devhook.Duration(it.ReceivedAt.Sub(items[0].ReceivedAt))}
		if i > 0 {
			st.SincePrevious = devhook.Duration(it.ReceivedAt.Sub(items[i-1].ReceivedAt))
		}
		rank := stepRank(it.Event.StatusV2)
		switch {
		case rank < 0:
			st.Flags = append(st.Flags, "unknown_status")
			st.Note = fmt.Sprintf("status_v2 %q is not one of queued, running, succeeded, failed, canceled", it.Event.StatusV2)
		case seen[it.Event.StatusV2]:
			st.Flags = append(st.Flags, "duplicate")
			st.Note = fmt.Sprintf("%s arrived again", it.Event.StatusV2)
		case rank == 2 && final != "":
			st.Flags = append(st.Flags, "duplicate")
			st.Note = fmt.Sprintf("%s arrived after the run had ended %s", it.Event.StatusV2, final)
		case rank < highest:
			st.Flags = append(st.Flags, "out_of_order")
			later := RunSteps()[highest]
			if highest == 2 {
				later = final
			}
			st.Note = fmt.Sprintf("%s arrived after %s", it.Event.StatusV2, later)
		}
		if rank == 2 && final == "" {
			final = it.Event.StatusV2
		}
		if st.Note != "" {
			t.Issues = append(t.Issues, fmt.Sprintf("delivery %s: %s", it.ID, st.Note))
		}
		if rank >= 0 {
			seen[it.Event.StatusV2] = true
			highest = max(highest, rank)
		}
		t.Steps = append(t.Steps, st)
	}
	t.Expected = expectedSteps(final, seen["running"])
	for _, name := range t.Expected {
		if r := stepRank(name); r < highest && !seen[name] {
			t.Missing = append(t.Missing, name)
			t.Issues = append(t.Issues, fmt.Sprintf("no %s delivery arrived, but a later step did", name))
		}
	}
	t.Complete = final != ""
	if n := len(items); n > 1 {
		t.Total = devhook.Duration(items[n-1].ReceivedAt.Sub(items[0].ReceivedAt))
	}
	return t
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("run_id")
	items, err := s.cfg.Store.RunDeliveries(id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("reading the deliveries of run %s: %w", id, err))
		return
	}
	if len(items) == 0 {
		s.fail(w, r, devhook.Errorf(devhook.ENOTFOUND, "no delivery of run %s is stored", id))
		return
	}
	slices.SortStableFunc(items, func(a, b devhook.Summary) int { return a.ReceivedAt.Compare(b.ReceivedAt) })
	writeJSON(w, http.StatusOK, AnalyzeRun(id, items))
}

// RunSummary is one run in GET /api/runs.
type RunSummary struct {
	RunID          string    `json:"run_id"`
	Deliveries     int       `json:"deliveries"`
	LastStatusV2   string    `json:"last_status_v2"`
	FirstReceived  time.Time `json:"first_received_at"`
	LastReceivedAt time.Time `json:"last_received_at"`
	// Statuses are the status_v2 values in arrival order.
	Statuses []string `json:"statuses"`
}

// RunList is the answer of GET /api/runs.
type RunList struct {
	Items []RunSummary `json:"items"`
	// Scanned is how many of the newest deliveries were grouped.
	Scanned int `json:"scanned"`
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	var all []devhook.Summary
	f := devhook.Filter{Limit: MaxListLimit}
	for len(all) < recentRuns {
		page, err := s.cfg.Store.List(f)
		if err != nil {
			s.fail(w, r, fmt.Errorf("listing deliveries to group by run: %w", err))
			return
		}
		all = append(all, page...)
		if len(page) < f.Limit {
			break
		}
		f.Before = page[len(page)-1].ID
	}
	runs := []RunSummary{}
	index := map[string]int{}
	// all is newest first; walk it oldest first so statuses read in order.
	for i := len(all) - 1; i >= 0; i-- {
		it := all[i]
		if it.Event.RunID == "" {
			continue
		}
		j, ok := index[it.Event.RunID]
		if !ok {
			j = len(runs)
			index[it.Event.RunID] = j
			runs = append(runs, RunSummary{RunID: it.Event.RunID, FirstReceived: it.ReceivedAt})
		}
		rs := &runs[j]
		rs.Deliveries++
		rs.LastStatusV2 = it.Event.StatusV2
		rs.LastReceivedAt = it.ReceivedAt
		rs.Statuses = append(rs.Statuses, it.Event.StatusV2)
	}
	slices.SortStableFunc(runs, func(a, b RunSummary) int { return b.LastReceivedAt.Compare(a.LastReceivedAt) })
	writeJSON(w, http.StatusOK, RunList{Items: runs, Scanned: len(all)})
}
