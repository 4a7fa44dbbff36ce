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
		opt.Header = make(http.Header, len(q.Header))
		for k, raw := range q.Header {
			name := strings.TrimSpace(k)
			if !validHeaderName(name) {
				return opt, devhook.Errorf(devhook.EINVALID, "header name %q is not valid", k)
			}
			var one string
			var many []string
			switch {
			case json.Unmarshal(raw, &one) == nil:
				many = []string{one}
			case json.Unmarshal(raw, &many) == nil:
			default:
				return opt, devhook.Errorf(devhook.EINVALID, "header %q: the value must be a string or a list of strings", k)
			}
			for _, v := range many {
				if strings.ContainsAny(v, "\r\n\x00") {
					return opt, devhook.Errorf(devhook.EINVALID, "header %q: a value must not contain a line break", k)
				}
				opt.Header[http.CanonicalHeaderKey(name)] = append(opt.Header[http.CanonicalHeaderKey(name)], v)
			}
		}
	}
	switch {
	case q.BodyText != nil && q.BodyBase64 != nil:
		return opt, devhook.Errorf(devhook.EINVALID, "give body_text or body_base64, not both")
	case q.BodyText != nil:
		opt.Body, opt.HasBody = []byte(*q.BodyText), true
	case q.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*q.BodyBase64)
		if err != nil {
			return opt, devhook.Errorf(devhook.EINVALID, "body_base64 is not base64: %v", err)
		}
		opt.Body, opt.HasBody = b, true
	}
	return opt, nil
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
			s.fail(w, r, devhook.Errorf(devhook.EINVALID, "reading the replay request: %v", err))
			return
		}
	}
	opt, err := q.Options()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := s.delivery(id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id = d.ID
	a, err := s.cfg.Replayer.Replay(r.Context(), id, opt)
	if err != nil {
		s.fail(w, r, fmt.Errorf("replaying delivery %s: %w", id, err))
		return
	}
	// The Replayer records the attempt and its owner publishes the change,
	// as for every attempt; the page that asked reloads on this answer.
	writeJSON(w, http.StatusOK, a)
}
