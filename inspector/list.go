package inspector

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/devhook/devhook"
)

const (
	defaultLimit = 50
	// MaxListLimit is the most deliveries a page of the list holds
	// (devhook deliveries list --limit says it): it leaves room for the
	// one extra row the list asks for to know whether another page
	// follows, under devhook.Filter's cap of 1000.
	MaxListLimit = 500
)

// ListPage is the answer of GET /api/deliveries.
type ListPage struct {
	Items []devhook.Summary `json:"items"`
	// Next is the before cursor of the following page, empty on the last.
	Next string `json:"next"`
	// Damage is set when the store's reads skipped records (damaged, or a
	// newer devhook's), this list's or an earlier read's: the list holds
	// the others. DamageNote says it in a sentence, with what to do.
	Damage     *devhook.Damage `json:"damage,omitempty"`
	DamageNote string          `json:"damage_note,omitempty"`
}

// ParseFilter reads a list filter from URL query values, as the list
// endpoint does.
func ParseFilter(q url.Values) (devhook.Filter, error) {
	f := devhook.Filter{
		Limit:    defaultLimit,
		Before:   q.Get("before"),
		Verdict:  strings.TrimSpace(q.Get("verdict")),
		RunID:    strings.TrimSpace(q.Get("run_id")),
		StatusV2: strings.TrimSpace(q.Get("status_v2")),
		Text:     q.Get("q"),
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return f, devhook.Errorf(devhook.EINVALID, "limit %q is not a number from 1 to %d", v, MaxListLimit)
		}
		f.Limit = n
	}
	switch v := strings.TrimSpace(q.Get("status")); strings.ToLower(v) {
	case "", "any":
	case "none", "-1", "0":
		f.Status = -1
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 || n > 999 {
			return f, devhook.Errorf(devhook.EINVALID, "status %q is not an HTTP status code or \"none\"", v)
		}
		f.Status = n
	}
	return f, nil
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	f, err := ParseFilter(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := f.Limit
	f.Limit = limit + 1
	items, err := s.cfg.Store.List(f)
	if err != nil {
		s.fail(w, r, fmt.Errorf("listing deliveries: %w", err))
		return
	}
	page := ListPage{Items: items}
	if d := s.cfg.Store.Damage(); d.Any() {
		page.Damage = &d
		page.DamageNote = fmt.Sprintf("Skipped %s; %s.", d.Summary(), d.Advice())
	}
	if len(items) > limit {
		page.Items = items[:limit]
		page.Next = items[limit-1].ID
	}
	if page.Items == nil {
		page.Items = []devhook.Summary{}
	}
	if len(page.Items) > 0 {
		ids := make([]string, len(page.Items))
		for i := range page.Items {
			ids[i] = page.Items[i].ID
		}
		rs, err := s.cfg.Store.Retries(ids)
		if err != nil {
			s.fail(w, r, fmt.Errorf("listing deliveries: %w", err))
			return
		}
		for i := range page.Items {
			if st, ok := rs[page.Items[i].ID]; ok {
				page.Items[i].Retry = &st
			}
		}
		if err := s.fillRoutes(ids, page.Items); err != nil {
			s.fail(w, r, fmt.Errorf("listing deliveries: %w", err))
			return
		}
	}
	writeJSON(w, http.StatusOK, page)
}

// RouteReader is a Store that knows which route (listen --route) took
// each delivery: storage.DB. The list shows it.
type RouteReader interface {
	Routes(ids []string) (map[string]devhook.Route, error)
}

// fillRoutes sets the route of each of items, those of ids, when the
// store knows it; the route of an owed delivery not yet tried is its
// retry state's. Only while listen has routes: the read costs about as
// much as the list's own (BenchmarkRoutes, storage), which a listen
// without routes does not pay for the rows of an earlier one that had
// some (their detail shows it).
func (s *Server) fillRoutes(ids []string, items []devhook.Summary) error {
	rr, ok := s.cfg.Store.(RouteReader)
	if !ok || len(s.cfg.Settings.Routes) == 0 {
		return nil
	}
	routes, err := rr.Routes(ids)
	if err != nil {
		return err
	}
	for i := range items {
		if rt, ok := routes[items[i].ID]; ok {
			items[i].Route = &rt
		} else if st := items[i].Retry; st != nil && st.Route != nil {
			items[i].Route = st.Route
		}
	}
	return nil
}
