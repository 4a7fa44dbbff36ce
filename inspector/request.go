package inspector

// The request a delivery arrived with, byte for byte:
//
//	GET /api/deliveries/{id}/request
//	→ {"method":"UE9TVA==","path":"L2hvb2s=","query":"…",
//	   "header":[{"name":"Q29udGVudC1UeXBl","value":"YXBwbGljYXRpb24vanNvbg=="},…],
//	   "targets":["aHR0cDovLzEyNy4wLjAuMTo4MDgwL2hvb2s=",…]}
//
// Every string is standard base64 of its bytes; header lines are in the
// order of their names, each name's values in order; targets are the URLs
// the attempts called, in their order. JSON strings hold UTF-8 only: a
// header value, a path or a query with other bytes (a Latin-1 header, a
// raw byte in a query) reaches a client of GET /api/deliveries/{id} with
// U+FFFD in their place. Client.Delivery asks for this when it sees one,
// so that export, scenario save and show read through a running listen
// what they read from its store.

import (
	"context"
	"encoding/base64"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/devhook/devhook"
)

type rawRequest struct {
	Method  string    `json:"method"`
	Path    string    `json:"path"`
	Query   string    `json:"query"`
	Header  []rawLine `json:"header"`
	Targets []string  `json:"targets"`
}

type rawLine struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func (s *Server) handleRawRequest(w http.ResponseWriter, r *http.Request) {
	d, err := s.delivery(r.PathValue("id"))
	if err != nil && !partial(d, err) { // it uses no body
		s.fail(w, r, err)
		return
	}
	raw := rawRequest{Method: b64(d.Method), Path: b64(d.Path), Query: b64(d.RawQuery), Header: []rawLine{}, Targets: []string{}}
	for _, a := range d.Attempts {
		raw.Targets = append(raw.Targets, b64(a.Target))
	}
	for _, k := range slices.Sorted(maps.Keys(d.Header)) {
		for _, v := range d.Header[k] {
			raw.Header = append(raw.Header, rawLine{Name: b64(k), Value: b64(v)})
		}
	}
	writeJSON(w, http.StatusOK, raw)
}

// lossy reports whether d, read from JSON, may have lost bytes: U+FFFD in
// its method, path, query, a header or an attempt's target.
func lossy(d *devhook.Delivery) bool {
	const bad = "\uFFFD"
	if strings.Contains(d.Method+d.Path+d.RawQuery, bad) {
		return true
	}
	for _, a := range d.Attempts {
		if strings.Contains(a.Target, bad) {
			return true
		}
	}
	for k, vs := range d.Header {
		if strings.Contains(k, bad) || slices.ContainsFunc(vs, func(v string) bool { return strings.Contains(v, bad) }) {
			return true
		}
	}
	return false
}

// restoreRequest puts into d the method, path, query and headers it
// arrived with, and its attempts' targets, from
// GET /api/deliveries/{id}/request. A listen from
// before it answers 404: d is left as it is.
func (c *Client) restoreRequest(ctx context.Context, d *devhook.Delivery) error {
	var raw rawRequest
	err := c.do(ctx, http.MethodGet, "/api/deliveries/"+url.PathEscape(d.ID)+"/request", nil, &raw)
	if devhook.ErrorCode(err) == devhook.ENOTFOUND {
		return nil
	}
	if err != nil {
		return err
	}
	dec := func(s string) (string, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		return string(b), err
	}
	var errs [3]error
	m, p, q := raw.Method, raw.Path, raw.Query
	m, errs[0] = dec(m)
	p, errs[1] = dec(p)
	q, errs[2] = dec(q)
	h := http.Header{}
	for _, l := range raw.Header {
		k, err := dec(l.Name)
		v, verr := dec(l.Value)
		if err != nil || verr != nil {
			return devhook.Errorf(devhook.EINTERNAL, "inspector at %s: a header of delivery %s is not base64", c.BaseURL, d.ID)
		}
		h[k] = append(h[k], v)
	}
	targets := make([]string, len(raw.Targets))
	for i, t := range raw.Targets {
		targets[i], err = dec(t)
		if err != nil {
			errs[0] = err
		}
	}
	for _, err := range errs {
		if err != nil {
			return devhook.Errorf(devhook.EINTERNAL, "inspector at %s: the request of delivery %s is not base64", c.BaseURL, d.ID)
		}
	}
	d.Method, d.Path, d.RawQuery, d.Header = m, p, q, h
	// An attempt recorded since the delivery was read has no place in d.
	for i := range min(len(targets), len(d.Attempts)) {
		d.Attempts[i].Target = targets[i]
	}
	return nil
}
