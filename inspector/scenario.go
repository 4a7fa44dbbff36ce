package inspector

// "Save as scenario": GET /api/scenario answers recorded deliveries as a
// scenario file (docs/SCENARIOS.md), byte for byte what
// `devhook scenario save FILE --run RUN_ID` or `--id ID,ID` writes for
// the same deliveries and --redact paths:
//
//	GET /api/scenario?run_id=R                 every delivery of run R
//	GET /api/scenario?id=A&id=B  (or id=A,B)   these deliveries
//	    &redact=$.data.run_id                  optional, repeatable: as --redact
//
// The answer is application/json with Content-Disposition: attachment
// (scenario-<run>.json, or scenario-<n>-deliveries.json), and one
// Devhook-Warning header per redaction path that matched nothing (the
// warnings the command prints). The selection and the file come from
// scenario.Select and scenario.Export, which the command calls too.
//
// Errors are JSON, as elsewhere: 400 when the request names neither or
// both of run_id and id, or a redaction path is malformed; 404 when the
// run has no delivery or an id is unknown; 409 when a delivery some parts
// of which cannot be read is among them (as scenario save, nothing is
// saved), saying which, what cannot be read, in which file, and what to do.

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/scenario"
)

func (s *Server) handleScenario(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel := scenario.Selection{RunID: strings.TrimSpace(q.Get("run_id"))}
	for _, v := range q["id"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id != "" && !slices.Contains(sel.IDs, id) {
				sel.IDs = append(sel.IDs, id)
			}
		}
	}
	if (sel.RunID == "") == (len(sel.IDs) == 0) {
		s.fail(w, r, devhook.Errorf(devhook.EINVALID, "name the deliveries to save with run_id=RUN_ID or id=ID (repeated, or comma-separated), one of the two"))
		return
	}
	opt := scenario.Options{Redact: q["redact"]}
	if err := scenario.CheckRedact(opt.Redact); err != nil {
		s.fail(w, r, devhook.Errorf(devhook.EINVALID, "%w", err))
		return
	}

	// Select and Export say what went wrong in the words of the command
	// line; the store's own failures are kept apart to answer 500.
	var storeErr error
	list := func(_ context.Context, f devhook.Filter) ([]devhook.Summary, error) {
		items, err := s.cfg.Store.List(f)
		if err != nil {
			storeErr = fmt.Errorf("listing the deliveries of run %s: %w", sel.RunID, err)
		}
		return items, err
	}
	ids, err := scenario.Select(r.Context(), list, sel)
	switch {
	case storeErr != nil:
		s.fail(w, r, storeErr)
		return
	case err != nil:
		s.fail(w, r, devhook.Errorf(devhook.ENOTFOUND, "no delivery of run %s is stored", sel.RunID))
		return
	}
	b, warnings, err := scenario.Export(ids, s.delivery, opt)
	if pe := (*devhook.PartialError)(nil); errors.As(err, &pe) {
		// As devhook scenario save: a scenario plays whole deliveries.
		s.fail(w, r, devhook.Errorf(devhook.ECONFLICT, "cannot save delivery %s in a scenario: a scenario plays whole deliveries only, and %w; nothing was saved: "+
			"save the others without it (devhook deliveries export --format scenario leaves out the deliveries that cannot be read)", pe.ID, pe))
		return
	}
	if err != nil {
		// An unknown id answers the store's "delivery "…" not found".
		s.fail(w, r, fmt.Errorf("saving a scenario: %w", err))
		return
	}

	name := fmt.Sprintf("scenario-%d-deliveries.json", len(ids))
	if sel.RunID != "" {
		name = "scenario-" + fileName(sel.RunID) + ".json"
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	for _, warning := range warnings {
		h.Add("Devhook-Warning", warning)
	}
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// fileName keeps the letters, digits, dots, dashes and underscores of a
// run id for a file name, and replaces the rest with "_".
func fileName(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
