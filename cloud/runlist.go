package cloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/devhook/devhook"
)

// The list of an application's runs: GET /v1/applications/{id}/runs, the
// call docs/INTERFACE.md chose where the interface shows none. It answers
// {"items": [run record without output…]}, newest first; status, limit
// and before (the last id of the page before) select.

// DefaultRunLimit is how many runs ListRuns lists when RunFilter.Limit is 0.
const DefaultRunLimit = 20

// runPage is the most runs asked for in one call (the service's bound).
const runPage = 100

// RunStatuses are the statuses (status_v2) a run can have, in order.
var RunStatuses = []string{"queued", "running", "succeeded", "failed", "canceled"}

// RunFilter selects the runs ListRuns lists.
type RunFilter struct {
	// Status keeps the runs whose status (status_v2) is one of these;
	// none keeps every run.
	Status []string
	// Limit is the most runs listed; 0 means DefaultRunLimit.
	Limit int
	// Before, a run's id, lists the runs after it (older).
	Before string
}

// RunList is the answer of the list call.
type RunList struct {
	Items []Run `json:"items"`
}

// ListRuns lists runs of the application app, newest first, without
// their output: at most f.Limit, in as many calls as that takes. Each
// Run's Raw is its record as the service sent it. A service that ignores
// the status filter or the paging is filtered and stopped here, so the
// answer is what f asks for either way.
func (c *Client) ListRuns(ctx context.Context, app string, f RunFilter) ([]Run, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultRunLimit
	}
	var runs []Run
	// A service that ignores the status filter is looked through for
	// MaxResolveRuns runs more than the limit at most.
	err := c.eachRun(ctx, app, f, min(limit, runPage), limit+MaxResolveRuns, func(r Run) bool {
		runs = append(runs, r)
		return len(runs) < limit
	})
	return runs, err
}

// eachRun calls fn with app's runs that f selects, newest first, asking
// for page runs a call, until fn returns false, the list ends, or most
// runs have been looked at.
func (c *Client) eachRun(ctx context.Context, app string, f RunFilter, page, most int, fn func(Run) bool) error {
	want := map[string]bool{}
	for _, s := range f.Status {
		want[strings.ToLower(s)] = true
	}
	seen := map[string]bool{}
	before := f.Before
	for n := 0; n < most; {
		q := url.Values{"limit": {strconv.Itoa(page)}}
		if len(f.Status) > 0 {
			q.Set("status", strings.Join(f.Status, ","))
		}
		if before != "" {
			q.Set("before", before)
		}
		raw, err := c.call(ctx, http.MethodGet, path("v1", "applications", app, "runs"), q, nil, nil)
		if err != nil {
			return err
		}
		items, err := runItems(raw)
		if err != nil {
			return fmt.Errorf("list the runs of %s: %w", app, err)
		}
		for _, it := range items {
			var r Run
			if err := json.Unmarshal(it, &r); err != nil {
				return fmt.Errorf("list the runs of %s: a run is not the record expected: %w", app, err)
			}
			r.fill(it)
			if r.ID == "" || seen[r.ID] {
				return nil // a service that does not page: this page came before
			}
			seen[r.ID] = true
			n++
			if len(want) > 0 && !want[strings.ToLower(r.Status())] {
				continue
			}
			if !fn(r) || n >= most {
				return nil
			}
		}
		if len(items) < page {
			return nil
		}
		before = lastID(items)
	}
	return nil
}

// runItems are the runs of a list answer: {"items": […]}, as devhook
// chose, or {"runs": […]} or a bare array, as other services answer
// lists.
func runItems(raw json.RawMessage) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) == nil {
		return items, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("the answer is not a JSON object: %w", err)
	}
	for _, k := range []string{"items", "runs"} {
		if v, ok := m[k]; ok {
			if err := json.Unmarshal(v, &items); err != nil {
				return nil, fmt.Errorf("the answer's %s is not an array: %w", k, err)
			}
			return items, nil
		}
	}
	return nil, errors.New("the answer has no items")
}

func lastID(items []json.RawMessage) string {
	var r Run
	json.Unmarshal(items[len(items)-1], &r)
	r.fill(nil)
	return r.ID
}

// MaxResolveRuns is how many of an application's newest runs ResolveRunID
// looks through.
const MaxResolveRuns = 1000

// ErrRunNotFound matches (errors.Is) ResolveRunID's error when no run's
// id is, starts with, or has as its short form the reference.
var ErrRunNotFound = errors.New("no run has that id")

// AmbiguousRunError is ResolveRunID's error when a reference names more
// than one run.
type AmbiguousRunError struct {
	App, Ref string
	Runs     []Run // newest first; at most the first 10
	More     int   // how many more there are
}

func (e *AmbiguousRunError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q names %d runs of %s:", e.Ref, len(e.Runs)+e.More, e.App)
	for _, r := range e.Runs {
		fmt.Fprintf(&b, "\n  %s  %s  %s", r.ID, r.Status(), r.Metadata.CreatedAt)
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n  and %d more", e.More)
	}
	b.WriteString("\ngive more of the id")
	return b.String()
}

// ResolveRunID returns the id of app's run that ref names: a run's whole
// id, the start of exactly one run's id, or the short id devhook listen
// shows (devhook.ShortRunID: the last digits of a time-ordered UUID). It
// looks through the application's MaxResolveRuns newest runs with
// ListRuns; ref naming none is ErrRunNotFound, naming several an
// *AmbiguousRunError.
func (c *Client) ResolveRunID(ctx context.Context, app, ref string) (string, error) {
	if ref == "" {
		return "", fmt.Errorf("%w: the run id is empty", ErrRunNotFound)
	}
	var found []Run
	exact, seen := false, 0
	err := c.eachRun(ctx, app, RunFilter{}, runPage, MaxResolveRuns, func(r Run) bool {
		seen++
		switch {
		case r.ID == ref:
			exact = true
			return false
		case strings.HasPrefix(r.ID, ref) || devhook.ShortRunID(r.ID) == ref:
			if !slices.ContainsFunc(found, func(f Run) bool { return f.ID == r.ID }) {
				found = append(found, r)
			}
		}
		return true
	})
	switch {
	case err != nil:
		return "", fmt.Errorf("look for run %q of %s: %w", ref, app, err)
	case exact:
		return ref, nil
	case len(found) == 1:
		return found[0].ID, nil
	case len(found) == 0:
		return "", fmt.Errorf("%w: no run of %s has an id that is or starts with %q (among its %d newest)", ErrRunNotFound, app, ref, seen)
	}
	e := &AmbiguousRunError{App: app, Ref: ref, Runs: found}
	if len(found) > 10 {
		e.Runs, e.More = found[:10], len(found)-10
	}
	return "", e
}

// WithRunID calls f with the run id ref; when the service knows no run
// by it (404), with the id of the one run ref names (ResolveRunID), so
// that a command takes the short id devhook listen shows or the start of
// an id as well as the whole. Resolving costs nothing when ref is a whole
// id. It returns f's error, or the resolution's when ref names several
// runs.
func (c *Client) WithRunID(ctx context.Context, app, ref string, f func(id string) error) error {
	err := f(ref)
	if !IsNotFound(err) {
		return err
	}
	id, rerr := c.ResolveRunID(ctx, app, ref)
	var amb *AmbiguousRunError
	switch {
	case errors.As(rerr, &amb):
		return rerr
	case rerr != nil || id == ref:
		return err // the service's own 404 says best what is missing
	}
	return f(id)
}
