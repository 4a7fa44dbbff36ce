package inspector

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// Deleting deliveries: DELETE /api/deliveries/{id}, and DELETE
// /api/deliveries for several ids (?id=A&id=B, each a whole id or a prefix
// only one id has; none is deleted unless all are found) or for those a
// selection chooses (received_before, an RFC 3339 time, and the list's
// status, verdict, run_id and status_v2; none of them: all). Both are
// state-changing requests, refused from another origin like replay
// (inspector.go's CrossOriginProtection). Once deleted, Config.Deleted
// hears the ids (the agent stops retrying them) and the live stream says
// "deleted", naming them, or "reload" when they are more than
// maxNamedDeleted.

// maxNamedDeleted bounds the ids a "deleted" event and an answer name.
const maxNamedDeleted = 1000

// DeleteResult is the answer of a delete: how many deliveries went, and
// their ids unless there are more than 1,000.
type DeleteResult struct {
	Deleted int      `json:"deleted"`
	IDs     []string `json:"ids,omitempty"`
	// KeptDamaged are the ids of the records a selection kept because
	// they cannot be read to be matched (damaged, or a newer devhook's):
	// evidence, deleted by id or with all.
	KeptDamaged []string `json:"kept_damaged,omitempty"`
}

func (s *Server) handleDeleteOne(w http.ResponseWriter, r *http.Request) {
	id, err := s.cfg.Store.Resolve(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.deleteIDs(w, r, []string{id})
}

func (s *Server) handleDeleteMany(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if refs := q["id"]; len(refs) > 0 {
		if len(q) > 1 {
			s.fail(w, r, devhook.Errorf(devhook.EINVALID, "give ids or a selection, not both"))
			return
		}
		ids := make([]string, 0, len(refs))
		var problems []string
		code := devhook.ENOTFOUND // of the answer, when one is missing
		for _, ref := range refs {
			id, err := s.cfg.Store.Resolve(ref)
			switch c := devhook.ErrorCode(err); {
			case c == devhook.ENOTFOUND || c == devhook.ECONFLICT || c == devhook.EINVALID:
				problems = append(problems, errorMessage(err))
				if c != devhook.ENOTFOUND {
					code = c
				}
			case err != nil:
				s.fail(w, r, err)
				return
			default:
				ids = append(ids, id)
			}
		}
		if len(problems) > 0 {
			s.fail(w, r, devhook.Errorf(code, "%s\nnothing was deleted", strings.Join(problems, "\n")))
			return
		}
		s.deleteIDs(w, r, ids)
		return
	}
	sel, err := ParseSelection(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.cfg.Store.DeleteMatching(sel)
	s.deleted(out.IDs)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res := deleteResult(out.IDs)
	res.KeptDamaged = out.Kept
	writeJSON(w, http.StatusOK, res)
}

// deleteIDs deletes ids, whole ones, and answers.
func (s *Server) deleteIDs(w http.ResponseWriter, r *http.Request, ids []string) {
	removed, err := s.cfg.Store.Delete(ids)
	s.deleted(removed)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, deleteResult(removed))
}

// deleted tells Config.Deleted and the live stream what went.
func (s *Server) deleted(ids []string) {
	if len(ids) == 0 {
		return
	}
	if s.cfg.Deleted != nil {
		s.cfg.Deleted(ids)
	}
	c := devhook.Change{Kind: devhook.ChangeDeleted, Deleted: ids}
	if len(ids) > maxNamedDeleted {
		c.Deleted, c.Reload = nil, true
	}
	s.Publish(c)
}

func deleteResult(ids []string) DeleteResult {
	res := DeleteResult{Deleted: len(ids), IDs: ids}
	if len(ids) > maxNamedDeleted {
		res.IDs = nil
	}
	return res
}

// errorMessage is err's message without what wraps it.
func errorMessage(err error) string {
	if e, ok := err.(*devhook.Error); ok {
		return e.Message
	}
	return err.Error()
}

// ParseSelection reads which deliveries to delete from URL query values:
// received_before (RFC 3339) and the list's status, verdict, run_id and
// status_v2. None of them chooses all.
func ParseSelection(q url.Values) (storage.Selection, error) {
	for k := range q {
		switch k {
		case "received_before", "status", "verdict", "run_id", "status_v2":
		default:
			return storage.Selection{}, devhook.Errorf(devhook.EINVALID, "a delete takes id, or received_before, status, verdict, run_id and status_v2; not %q", k)
		}
	}
	f, err := ParseFilter(q)
	if err != nil {
		return storage.Selection{}, err
	}
	sel := storage.Selection{Filter: devhook.Filter{Status: f.Status, Verdict: f.Verdict, RunID: f.RunID, StatusV2: f.StatusV2}}
	if v := q.Get("received_before"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return sel, devhook.Errorf(devhook.EINVALID, "received_before %q is not an RFC 3339 time", v)
		}
		sel.ReceivedBefore = t
	}
	return sel, nil
}

// SelectionQuery is the query of DELETE /api/deliveries that chooses what
// sel chooses.
func SelectionQuery(sel storage.Selection) url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !sel.ReceivedBefore.IsZero() {
		set("received_before", sel.ReceivedBefore.UTC().Format(time.RFC3339Nano))
	}
	switch f := sel.Filter; {
	case f.Status < 0:
		set("status", "none")
	case f.Status > 0:
		set("status", fmt.Sprint(f.Status))
	}
	set("verdict", sel.Filter.Verdict)
	set("run_id", sel.Filter.RunID)
	set("status_v2", sel.Filter.StatusV2)
	return q
}
