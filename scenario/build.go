package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/devhook/devhook"
)

// Options say how to build a scenario. The zero value keeps everything.
type Options struct {
	// Redact lists JSON paths ($.data.run_id) whose values are replaced
	// by pseudonyms; see redact.go.
	Redact []string
}

// Build makes a scenario of deliveries, in the order they were received
// (ReceivedAt, then id), redacting what opt says. The warnings are for the
// user: a path that matched nothing.
func Build(deliveries []*devhook.Delivery, opt Options) (*Scenario, []string, error) {
	if len(deliveries) == 0 {
		return nil, nil, errors.New("no deliveries to save")
	}
	paths, err := parsePaths(opt.Redact)
	if err != nil {
		return nil, nil, err
	}
	ds := slices.Clone(deliveries)
	slices.SortStableFunc(ds, func(a, b *devhook.Delivery) int {
		return cmp.Or(a.ReceivedAt.Compare(b.ReceivedAt), cmp.Compare(a.ID, b.ID))
	})
	s := &Scenario{About: About, Redacted: slices.Clone(opt.Redact)}
	first := ds[0].ReceivedAt
	for _, d := range ds {
		e := Entry{OffsetMS: d.ReceivedAt.Sub(first).Milliseconds(), Method: d.Method, Path: d.Path,
			Query: d.RawQuery, Header: keptHeader(d.Header), Body: slices.Clone(d.Body), Signature: signatureKind(d.Verdict.Result)}
		if e.Signature == SignatureMalformed {
			for k, v := range d.Header {
				if strings.EqualFold(k, devhook.SignatureHeader) {
					e.Header[k] = slices.Clone(v)
				}
			}
		}
		if e.Path == "" {
			e.Path = "/"
		}
		if a := recorded(d); a != nil {
			e.Recorded = &Answer{Status: a.Status, Body: slices.Clone(a.Body)}
		}
		s.Deliveries = append(s.Deliveries, e)
	}
	warnings := redact(s, paths)
	return s, warnings, nil
}

// keptHeader is h without the signature, which a played delivery gets
// afresh, and without Content-Length, which the sender sets from the body.
func keptHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		if strings.EqualFold(k, devhook.SignatureHeader) || strings.EqualFold(k, "Content-Length") {
			continue
		}
		out[k] = slices.Clone(v)
	}
	return out
}

// signatureKind is what a recorded verdict says of the signature, for
// play to reproduce: "" for a valid one, and for one that could not be
// checked (no secret, verification off), which play signs afresh.
func signatureKind(verdict string) string {
	switch verdict {
	case devhook.VerdictInvalidSignature:
		return SignatureInvalid
	case devhook.VerdictMissingSignature:
		return SignatureMissing
	case devhook.VerdictInvalidFormat:
		return SignatureMalformed
	case devhook.VerdictInvalidTime:
		return SignatureExpired
	}
	return ""
}

// recorded is the receiver's last answer to d as it was received: the
// last attempt that is not a replay and got a status.
func recorded(d *devhook.Delivery) *devhook.Attempt {
	for i := len(d.Attempts) - 1; i >= 0; i-- {
		if a := &d.Attempts[i]; a.Kind != devhook.AttemptReplay && a.Status != 0 {
			return a
		}
	}
	return nil
}

// Export reads the deliveries ids name with load and returns the bytes of
// their scenario and the warnings, as devhook scenario save writes them:
// the inspector's "save as scenario" calls it with its store's Delivery.
func Export(ids []string, load func(id string) (*devhook.Delivery, error), opt Options) ([]byte, []string, error) {
	if len(ids) == 0 {
		return nil, nil, errors.New("no deliveries to save")
	}
	seen := map[string]bool{}
	var ds []*devhook.Delivery
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		d, err := load(id)
		if err != nil {
			return nil, nil, fmt.Errorf("read delivery %s: %w", id, err)
		}
		ds = append(ds, d)
	}
	s, warnings, err := Build(ds, opt)
	if err != nil {
		return nil, nil, err
	}
	b, err := s.Marshal()
	return b, warnings, err
}

// Selection names recorded deliveries: a run's, a list of ids, or the last
// N received. Exactly one is set.
type Selection struct {
	RunID string
	IDs   []string
	Last  int
}

// listPage is the most an inspector lists at once (a store, 1000).
const listPage = 500

// ResolveRunID returns the run id whose short form (devhook.ShortRunID,
// as devhook listen shows it) is short, looking through the recorded
// deliveries (list, newest first, paged by Filter.Before); short itself
// when no run has it as its short form. Two runs with the same short id
// are an error naming both.
func ResolveRunID(ctx context.Context, list func(context.Context, devhook.Filter) ([]devhook.Summary, error), short string) (string, error) {
	var found []string
	f := devhook.Filter{Limit: listPage}
	for {
		items, err := list(ctx, f)
		if err != nil {
			return "", err
		}
		for _, it := range items {
			id := it.Event.RunID
			if id != short && devhook.ShortRunID(id) == short && !slices.Contains(found, id) {
				found = append(found, id)
			}
		}
		if len(items) < f.Limit {
			break
		}
		f.Before = items[len(items)-1].ID
	}
	switch len(found) {
	case 0:
		return short, nil
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("the short run id %s names %d runs: %s; give the whole id", short, len(found), strings.Join(found, ", "))
}

// ErrNoDeliveries matches (errors.Is) the error of Select when nothing
// recorded matches the selection.
var ErrNoDeliveries = errors.New("no deliveries recorded")

// noDeliveries is an error that says which deliveries are missing and
// matches ErrNoDeliveries.
type noDeliveries string

func (e noDeliveries) Error() string        { return string(e) }
func (e noDeliveries) Is(target error) bool { return target == ErrNoDeliveries }

// Select returns the ids of the deliveries sel names, through list (a
// store's or an inspector's, newest first, paging by Filter.Before).
func Select(ctx context.Context, list func(context.Context, devhook.Filter) ([]devhook.Summary, error), sel Selection) ([]string, error) {
	n := 0
	for _, set := range []bool{sel.RunID != "", len(sel.IDs) > 0, sel.Last != 0} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return nil, errors.New("name the deliveries with one of a run id, their ids or a number of the last ones")
	case len(sel.IDs) > 0:
		return sel.IDs, nil
	case sel.Last < 0:
		return nil, fmt.Errorf("the last %d deliveries: give a number of deliveries, 1 or more", sel.Last)
	}
	var ids []string
	f := devhook.Filter{RunID: sel.RunID}
	for {
		f.Limit = listPage
		if sel.Last > 0 {
			f.Limit = min(listPage, sel.Last-len(ids))
		}
		items, err := list(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		if len(items) < f.Limit || (sel.Last > 0 && len(ids) >= sel.Last) {
			break
		}
		f.Before = items[len(items)-1].ID
	}
	if len(ids) == 0 && sel.RunID != "" && len(sel.RunID) <= devhook.ShortRunIDLen {
		// The short id devhook listen shows: the run it names.
		full, err := ResolveRunID(ctx, list, sel.RunID)
		if err != nil {
			return nil, err
		}
		if full != sel.RunID {
			sel.RunID = full
			return Select(ctx, list, sel)
		}
	}
	if len(ids) == 0 {
		if sel.RunID != "" {
			return nil, noDeliveries("no delivery of run " + sel.RunID + " is recorded")
		}
		return nil, noDeliveries("no deliveries recorded yet")
	}
	slices.Reverse(ids) // oldest first
	return ids, nil
}
