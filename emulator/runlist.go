package emulator

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// The list of an application's runs. The interface shows no such call;
// docs/INTERFACE.md has the one devhook chose:
//
//	GET /v1/applications/{application_id}/runs?status=S&limit=N&before=RUN
//
// answers {"items": [run record without output…]}, newest first (by
// created_at, runs created in the same instant in the order they were
// started), at most limit of them (default 20, at most 100), only those
// whose status_v2 is among status (repeated, or comma-separated; any when
// absent), and only those after the run before in that order: a client
// pages on with the last item's id until a page comes back short.
const (
	defaultRunListLimit = 20
	maxRunListLimit     = 100
)

// runStatuses are the run states a list can select, in their order.
var runStatuses = []string{statusQueued, statusRunning, statusSucceeded, statusFailed, statusCanceled}

func (e *Emulator) listRuns(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	limit, err := runListLimit(q["limit"])
	if err != nil {
		return err
	}
	statuses, err := runListStatuses(q["status"])
	if err != nil {
		return err
	}
	before := q.Get("before")

	e.mu.Lock()
	defer e.mu.Unlock()
	a, err := e.lookupApplication(c)
	if err != nil {
		return err
	}
	var runs []*run
	for _, rn := range e.st.runs {
		if rn.Account == c.account && rn.AppID == a.ID {
			runs = append(runs, rn)
		}
	}
	sort.Slice(runs, func(i, j int) bool { return newerRun(runs[i], runs[j]) })
	if before != "" {
		b := e.st.runs[acctKey(c.account, before)]
		if b == nil || b.AppID != a.ID {
			return errorf(http.StatusBadRequest, "before: application %q has no run with id %q; give the id of the last run of the page before", a.ID, before)
		}
		// The order is total and b is in it: the first run not newer is b.
		i := sort.Search(len(runs), func(i int) bool { return !newerRun(runs[i], b) })
		runs = runs[i+1:]
	}
	items := []map[string]any{}
	for _, rn := range runs {
		if len(items) == limit {
			break
		}
		if statuses == nil || statuses[rn.Status] {
			items = append(items, rn.record(false))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
	return nil
}

// newerRun orders runs newest first: by creation, then by the order they
// were started, then by id, so that the order is total and a page's last
// id says where the next begins.
func newerRun(a, b *run) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	if a.Seq != b.Seq {
		return a.Seq > b.Seq
	}
	return a.ID > b.ID
}

func runListLimit(vals []string) (int, error) {
	if len(vals) == 0 {
		return defaultRunListLimit, nil
	}
	n, err := strconv.Atoi(vals[len(vals)-1])
	if err != nil || n < 1 || n > maxRunListLimit {
		return 0, errorf(http.StatusBadRequest, "limit %q: give a whole number from 1 to %d", vals[len(vals)-1], maxRunListLimit)
	}
	return n, nil
}

// runListStatuses reads status parameters, each one or more states joined
// with commas; nil means any.
func runListStatuses(vals []string) (map[string]bool, error) {
	var set map[string]bool
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			s = strings.ToLower(strings.TrimSpace(s))
			if s == "" {
				continue
			}
			known := false
			for _, k := range runStatuses {
				known = known || k == s
			}
			if !known {
				return nil, errorf(http.StatusBadRequest, "status %q: a run's status is one of %s", s, strings.Join(runStatuses, ", "))
			}
			if set == nil {
				set = map[string]bool{}
			}
			set[s] = true
		}
	}
	return set, nil
}
