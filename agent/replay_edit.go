package agent

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/devhook/devhook/relay/wire"
	"golang.org/x/net/http/httpguts"
)

// HeaderEdit is a change to a recorded delivery's headers before it is
// replayed (devhook replay --header, --remove-header): Set replaces every
// value of each of its names with its values, in order; Remove removes
// each name. Names are matched case-insensitively.
type HeaderEdit struct {
	Set    http.Header
	Remove []string
}

// CheckEditable says why a replay's edit may not set or remove the
// header name, or nil when it may: the agent computes Content-Length from
// the body it sends and Host from the target, and drops hop-by-hop headers.
func CheckEditable(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("%q is not a header name", name)
	}
	switch k := http.CanonicalHeaderKey(name); {
	case k == "Content-Length":
		return errors.New("Content-Length is computed: the length of the body sent")
	case k == "Host":
		return errors.New("Host is the target's (replay to another one with --to URL)")
	case wire.HasHopByHop(http.Header{k: nil}): // the relay's list of them
		return fmt.Errorf("%s is a hop-by-hop header: it is not sent to the receiver", k)
	}
	return nil
}

// Apply returns a copy of h with the edit made, and the names of Remove
// that h does not have. It checks every name (CheckEditable), a name both
// set and removed, and values (no line breaks).
func (e HeaderEdit) Apply(h http.Header) (out http.Header, absent []string, err error) {
	set := make(http.Header, len(e.Set)) // one key a name, however it was spelled
	for k, vs := range e.Set {
		if err := CheckEditable(k); err != nil {
			return nil, nil, err
		}
		set[http.CanonicalHeaderKey(k)] = append(set[http.CanonicalHeaderKey(k)], vs...)
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, nil, fmt.Errorf("the value of %s must not hold a line break or a control character: %q", k, v)
			}
		}
	}
	for _, name := range e.Remove {
		if err := CheckEditable(name); err != nil {
			return nil, nil, err
		}
		if _, ok := set[http.CanonicalHeaderKey(name)]; ok {
			return nil, nil, fmt.Errorf("%s is both set and removed: setting it replaces its values already", http.CanonicalHeaderKey(name))
		}
	}
	out = h.Clone()
	if out == nil {
		out = http.Header{}
	}
	for _, name := range e.Remove {
		found := false
		for k := range out {
			if strings.EqualFold(k, name) {
				delete(out, k)
				found = true
			}
		}
		if !found {
			absent = append(absent, http.CanonicalHeaderKey(name))
		}
	}
	for name, vs := range set {
		for k := range out {
			if strings.EqualFold(k, name) {
				delete(out, k)
			}
		}
		out[name] = vs
	}
	slices.Sort(absent)
	return out, slices.Compact(absent), nil
}

// Touches reports whether the edit sets or removes header name.
func (e HeaderEdit) Touches(name string) bool {
	for k := range e.Set {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return slices.ContainsFunc(e.Remove, func(r string) bool { return strings.EqualFold(r, name) })
}
