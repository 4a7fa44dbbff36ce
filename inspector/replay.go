package inspector

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/devhook/devhook"
)

// maxReplayRequest bounds a replay request's JSON.
const maxReplayRequest = 32 << 20

// ReplayRequest is the body of POST /api/deliveries/{id}/replay.
type ReplayRequest struct {
	// Resign: nil re-signs when the secret is known.
	Resign *bool  `json:"resign,omitempty"`
	To     string `json:"to,omitempty"`
	// Header replaces the delivery's headers; values are a string or a
	// list of strings.
	Header map[string]json.RawMessage `json:"header,omitempty"`
	// SetHeader and RemoveHeader edit the headers (the delivery's, or
	// Header) rather than replace them: set_header's names get its values
	// in place of theirs, remove_header's names are removed, in any case;
	// the headers they do not name are sent as recorded, byte for byte.
	SetHeader    map[string]json.RawMessage `json:"set_header,omitempty"`
	RemoveHeader []string                   `json:"remove_header,omitempty"`
	// BodyText or BodyBase64 replace the delivery's body; at most one.
	BodyText   *string `json:"body_text,omitempty"`
	BodyBase64 *string `json:"body_base64,omitempty"`
}

// Options turns the request into replay options.
func (q ReplayRequest) Options() (devhook.ReplayOptions, error) {
	opt := devhook.ReplayOptions{Resign: q.Resign, To: strings.TrimSpace(q.To)}
	if opt.To != "" {
		u, err := url.Parse(opt.To)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return opt, devhook.Errorf(devhook.EINVALID, "target %q is not an http or https URL", opt.To)
		}
	}
	if q.Header != nil {
		h, err := headerOf("header", q.Header)
		if err != nil {
			return opt, err
		}
		opt.Header = h
	}
	if len(q.SetHeader) > 0 {
		h, err := headerOf("set_header", q.SetHeader)
		if err != nil {
			return opt, err
		}
		opt.SetHeader = h
	}
	for _, name := range q.RemoveHeader {
		if !validHeaderName(strings.TrimSpace(name)) {
			return opt, devhook.Errorf(devhook.EINVALID, "remove_header: header name %q is not valid", name)
		}
		opt.RemoveHeader = append(opt.RemoveHeader, strings.TrimSpace(name))
	}
	switch {
	case q.BodyText != nil && q.BodyBase64 != nil:
		return opt, devhook.Errorf(devhook.EINVALID, "give body_text or body_base64, not both")
	case q.BodyText != nil:
		opt.Body, opt.HasBody = []byte(*q.BodyText), true
	case q.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*q.BodyBase64)
		if err != nil {
			return opt, devhook.Errorf(devhook.EINVALID, "body_base64 is not base64: %w", err)
		}
		opt.Body, opt.HasBody = b, true
	}
	return opt, nil
}

// headerOf reads the JSON object of field (header, set_header), whose
// values are a string or a list of strings, into a header.
func headerOf(field string, m map[string]json.RawMessage) (http.Header, error) {
	h := make(http.Header, len(m))
	for k, raw := range m {
		name := strings.TrimSpace(k)
		if !validHeaderName(name) {
			return nil, devhook.Errorf(devhook.EINVALID, "%s: header name %q is not valid", field, k)
		}
		var one string
		var many []string
		switch {
		case json.Unmarshal(raw, &one) == nil:
			many = []string{one}
		case json.Unmarshal(raw, &many) == nil:
		default:
			return nil, devhook.Errorf(devhook.EINVALID, "%s %q: the value must be a string or a list of strings", field, k)
		}
		for _, v := range many {
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, devhook.Errorf(devhook.EINVALID, "%s %q: a value must not contain a line break", field, k)
			}
			h[http.CanonicalHeaderKey(name)] = append(h[http.CanonicalHeaderKey(name)], v)
		}
	}
	return h, nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

func (s *Server) handleReplay(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Replayer == nil {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "replay is not available: this inspector has no agent to send with"})
		return
	}
	id := r.PathValue("id")
	var q ReplayRequest
	if r.ContentLength != 0 {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			s.fail(w, r, devhook.Errorf(devhook.EINVALID, "a replay request must be application/json"))
			return
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxReplayRequest))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil && !errors.Is(err, io.EOF) {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				s.fail(w, r, devhook.Errorf(devhook.ETOOLARGE, "the replay request is larger than %d bytes", maxReplayRequest))
				return
			}
			s.fail(w, r, devhook.Errorf(devhook.EINVALID, "reading the replay request: %w", err))
			return
		}
	}
	opt, err := q.Options()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := s.delivery(id)
	// Attempts that cannot be read are its history, not what is sent; a
	// body that cannot be read is not sent when the request replaces it.
	if err = devhook.ReplayError(d, err, opt); err != nil {
		s.fail(w, r, unsendable("replay", err))
		return
	}
	id = d.ID
	a, err := s.cfg.Replayer.Replay(r.Context(), id, opt)
	if err != nil {
		s.fail(w, r, fmt.Errorf("replaying delivery %s: %w", id, unsendable("replay", err)))
		return
	}
	// The Replayer records the attempt and its owner publishes the change,
	// as for every attempt; the page that asked reloads on this answer.
	writeJSON(w, http.StatusOK, a)
}
