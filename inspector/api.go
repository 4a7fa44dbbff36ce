package inspector

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/check"
)

const (
	defaultLimit = 50
	// maxLimit leaves room for the one extra row the list asks for to know
	// whether another page follows, under devhook.Filter's cap of 1000.
	maxLimit = 500
	// maxReplayRequest bounds a replay request's JSON.
	maxReplayRequest = 32 << 20
	// maxView bounds the text of one body that the detail view carries;
	// the whole body stays downloadable.
	maxView = 1 << 20
	// recentRuns is how many of the newest deliveries /api/runs groups.
	recentRuns = 1000
)

type errorBody struct {
	Error string `json:"error"`
}

// statusOf maps a devhook error code to an HTTP status.
func statusOf(err error) int {
	switch devhook.ErrorCode(err) {
	case devhook.ENOTFOUND:
		return http.StatusNotFound
	case devhook.EINVALID:
		return http.StatusBadRequest
	case devhook.ECONFLICT:
		return http.StatusConflict
	case devhook.EUNAUTH:
		return http.StatusUnauthorized
	case devhook.ETOOLARGE:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusInternalServerError
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{Error: "encoding the answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError answers with err's message; internal errors keep their
// message too, since the only reader is the developer on this machine.
func writeError(w http.ResponseWriter, err error) {
	var e *devhook.Error
	msg := err.Error()
	if errors.As(err, &e) && e.Code != devhook.EINTERNAL {
		msg = e.Message
	}
	writeJSON(w, statusOf(err), errorBody{Error: msg})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if statusOf(err) >= 500 {
		s.cfg.Logf("inspector: %s %s: %v", r.Method, r.URL.Path, err)
	}
	writeError(w, err)
}

// ListPage is the answer of GET /api/deliveries.
type ListPage struct {
	Items []devhook.Summary `json:"items"`
	// Next is the before cursor of the following page, empty on the last.
	Next string `json:"next"`
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
		if err != nil || n < 1 || n > maxLimit {
			return f, devhook.Errorf(devhook.EINVALID, "limit %q is not a number from 1 to %d", v, maxLimit)
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
	}
	writeJSON(w, http.StatusOK, page)
}

// BodyView is a body decoded for the page.
type BodyView struct {
	Size        int    `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	UTF8        bool   `json:"utf8"`
	JSON        bool   `json:"json"`
	// Text is the body as text when it is UTF-8.
	Text string `json:"text,omitempty"`
	// Pretty is the indented JSON when the body is JSON.
	Pretty string `json:"pretty,omitempty"`
	// Hex is a hex dump when the body is not UTF-8.
	Hex string `json:"hex,omitempty"`
	// Truncated says Text, Pretty or Hex stop before the end of the body.
	Truncated bool `json:"truncated,omitempty"`
}

// NewBodyView decodes body for display.
func NewBodyView(body []byte, h http.Header) BodyView {
	v := BodyView{Size: len(body), ContentType: h.Get("Content-Type")}
	if len(body) == 0 {
		v.UTF8 = true
		return v
	}
	show := body
	if len(show) > maxView {
		show, v.Truncated = show[:maxView], true
	}
	if utf8.Valid(body) && !bytes.ContainsRune(body, 0) {
		v.UTF8 = true
		v.Text = string(show)
		if json.Valid(body) {
			v.JSON = true
			var buf bytes.Buffer
			if json.Indent(&buf, body, "", "  ") == nil {
				p := buf.Bytes()
				if len(p) > maxView {
					p = p[:maxView]
					for !utf8.Valid(p) {
						p = p[:len(p)-1]
					}
					v.Truncated = true
				}
				v.Pretty = string(p)
			}
		}
		if v.Truncated {
			for !utf8.Valid([]byte(v.Text)) {
				v.Text = v.Text[:len(v.Text)-1]
			}
		}
		return v
	}
	if len(show) > maxView/4 {
		show, v.Truncated = show[:maxView/4], true
	}
	v.Hex = hexDump(show)
	return v
}

// hexDump formats b as offset, 16 hex bytes and their printable ASCII.
func hexDump(b []byte) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	for off := 0; off < len(b); off += 16 {
		line := b[off:min(off+16, len(b))]
		fmt.Fprintf(&sb, "%08x  ", off)
		for i := range 16 {
			if i < len(line) {
				sb.WriteByte(digits[line[i]>>4])
				sb.WriteByte(digits[line[i]&0xf])
				sb.WriteByte(' ')
			} else {
				sb.WriteString("   ")
			}
			if i == 7 {
				sb.WriteByte(' ')
			}
		}
		sb.WriteString(" |")
		for _, c := range line {
			if c >= 0x20 && c < 0x7f {
				sb.WriteByte(c)
			} else {
				sb.WriteByte('.')
			}
		}
		sb.WriteString("|\n")
	}
	return sb.String()
}

// DeliveryView is the answer of GET /api/deliveries/{id}: the delivery and
// its bodies decoded for display.
type DeliveryView struct {
	*devhook.Delivery
	// Retry is set while the agent owes the delivery to the receiver,
	// and once it gave up on it.
	Retry *devhook.RetryState `json:"retry,omitempty"`
	View  DetailView          `json:"view"`
}

// DetailView holds the decoded bodies of a delivery and of its attempts,
// in the order of Delivery.Attempts.
type DetailView struct {
	Body     BodyView      `json:"body"`
	Attempts []AttemptView `json:"attempts"`
	// Target is where a replay goes by default, with the delivery's path.
	Target string `json:"target,omitempty"`
	// Resign says a replay without "resign" re-signs (the secret is known).
	Resign bool `json:"resign"`
	// ReplayAvailable is false when the inspector has no replayer.
	ReplayAvailable bool `json:"replay_available"`
	// StatusNote explains status beside status_v2 for a run.status body.
	StatusNote string `json:"status_note,omitempty"`
}

// AttemptView holds the decoded bodies of one attempt.
type AttemptView struct {
	Response BodyView  `json:"response"`
	Request  *BodyView `json:"request,omitempty"`
	// Hint is set when the receiver refused a delivery whose signature is
	// valid: what to run, and the likely cause (check.Hint).
	Hint string `json:"hint,omitempty"`
}

func (s *Server) handleDelivery(w http.ResponseWriter, r *http.Request) {
	d, err := s.cfg.Store.Delivery(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := DeliveryView{Delivery: d, View: DetailView{
		Body:            NewBodyView(d.Body, d.Header),
		Attempts:        make([]AttemptView, len(d.Attempts)),
		Target:          s.defaultTarget(d),
		Resign:          s.secretKnown(),
		ReplayAvailable: s.cfg.Replayer != nil,
		StatusNote:      d.Event.StatusNote(),
	}}
	rs, err := s.cfg.Store.Retries([]string{d.ID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st, ok := rs[d.ID]; ok {
		v.Retry = &st
	}
	for i, a := range d.Attempts {
		av := AttemptView{Response: NewBodyView(a.Body, a.Header), Hint: check.Hint(d, &d.Attempts[i])}
		if a.Request != nil {
			rv := NewBodyView(a.Request.Body, a.Request.Header)
			av.Request = &rv
		}
		v.View.Attempts[i] = av
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) secretKnown() bool {
	return s.cfg.Settings.SecretKnown != nil && s.cfg.Settings.SecretKnown()
}

// defaultTarget is the first forward target joined with the delivery's
// path and query: the URL a replay calls.
func (s *Server) defaultTarget(d *devhook.Delivery) string {
	if len(s.cfg.Settings.Forward) == 0 {
		return ""
	}
	return joinTarget(s.cfg.Settings.Forward[0], d.Path, d.RawQuery)
}

func joinTarget(base, path, rawQuery string) string {
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimSuffix(base, "/") + path
	}
	return devhook.TargetURL(u, path, rawQuery)
}

func (s *Server) handleRequestBody(w http.ResponseWriter, r *http.Request) {
	d, err := s.cfg.Store.Delivery(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	serveDownload(w, d.ID+"-request", d.Header.Get("Content-Type"), d.Body)
}

func (s *Server) handleAttemptBody(w http.ResponseWriter, r *http.Request) {
	d, err := s.cfg.Store.Delivery(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	seq, err := strconv.Atoi(r.PathValue("seq"))
	if err != nil {
		s.fail(w, r, devhook.Errorf(devhook.EINVALID, "attempt %q is not a number", r.PathValue("seq")))
		return
	}
	for _, a := range d.Attempts {
		if a.Seq == seq {
			serveDownload(w, fmt.Sprintf("%s-attempt-%d-response", d.ID, seq), a.Header.Get("Content-Type"), a.Body)
			return
		}
	}
	s.fail(w, r, devhook.Errorf(devhook.ENOTFOUND, "delivery %s has no attempt %d", d.ID, seq))
}

// serveDownload sends body as an attachment that the browser saves and
// never renders.
func serveDownload(w http.ResponseWriter, name, contentType string, body []byte) {
	ext := ".bin"
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			ext = ".json"
		case strings.HasPrefix(mt, "text/"):
			ext = ".txt"
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name + ext}))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

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
	if _, err := s.cfg.Store.Delivery(id); err != nil {
		s.fail(w, r, err)
		return
	}
	a, err := s.cfg.Replayer.Replay(r.Context(), id, opt)
	if err != nil {
		s.fail(w, r, fmt.Errorf("replaying delivery %s: %w", id, err))
		return
	}
	// The Replayer records the attempt and its owner publishes the change,
	// as for every attempt; the page that asked reloads on this answer.
	writeJSON(w, http.StatusOK, a)
}

// SettingsView is the answer of GET /api/settings.
type SettingsView struct {
	Forward         []string `json:"forward"`
	RelayURL        string   `json:"relay_url"`
	PublicURL       string   `json:"public_url"`
	Channel         string   `json:"channel"`
	SecretKnown     bool     `json:"secret_known"`
	Verify          string   `json:"verify"`
	ReplayAvailable bool     `json:"replay_available"`
	// Data is the data directory whose store this inspector serves.
	Data string `json:"data,omitempty"`
}

func (s *Server) handleSettings(w http.ResponseWriter, r *http.Request) {
	st := s.cfg.Settings
	v := SettingsView{
		Forward: st.Forward, RelayURL: st.RelayURL, PublicURL: st.PublicURL, Channel: st.Channel,
		SecretKnown: s.secretKnown(), Verify: st.Verify, ReplayAvailable: s.cfg.Replayer != nil, Data: st.DataDir,
	}
	if v.Forward == nil {
		v.Forward = []string{}
	}
	if v.Verify == "" {
		v.Verify = "report"
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	var h devhook.Health
	if s.cfg.Health != nil {
		h = s.cfg.Health()
	}
	writeJSON(w, http.StatusOK, h)
}

// leaveOutOfCurl reports whether a header is not part of a curl command:
// hop-by-hop headers and those curl computes itself.
func leaveOutOfCurl(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer",
		"Upgrade", "Host", "Content-Length", "Accept-Encoding", "Proxy-Authorization", "Proxy-Authenticate":
		return true
	}
	return false
}

// Curl returns a shell command that sends d to target as it arrived: same
// method, headers (repeated ones too) and byte-exact body.
func Curl(d *devhook.Delivery, target string) string {
	var sb strings.Builder
	binary := !utf8.Valid(d.Body) || bytes.ContainsRune(d.Body, 0)
	if binary {
		sb.WriteString("printf %s " + shellQuote(base64.StdEncoding.EncodeToString(d.Body)) + " | base64 -d | ")
	}
	sb.WriteString("curl -sS -i -X " + shellQuote(d.Method) + " " + shellQuote(target))
	keys := make([]string, 0, len(d.Header))
	for k := range d.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if leaveOutOfCurl(k) {
			continue
		}
		for _, v := range d.Header[k] {
			sb.WriteString(" \\\n  -H " + shellQuote(k+": "+v))
		}
	}
	switch {
	case binary:
		sb.WriteString(" \\\n  --data-binary @-")
	case len(d.Body) > 0:
		sb.WriteString(" \\\n  --data-binary " + shellQuote(string(d.Body)))
	}
	sb.WriteString("\n")
	return sb.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (s *Server) handleCurl(w http.ResponseWriter, r *http.Request) {
	d, err := s.cfg.Store.Delivery(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	target := s.defaultTarget(d)
	if to := strings.TrimSpace(r.URL.Query().Get("to")); to != "" {
		u, err := url.Parse(to)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			s.fail(w, r, devhook.Errorf(devhook.EINVALID, "target %q is not an http or https URL", to))
			return
		}
		target = joinTarget(to, d.Path, d.RawQuery)
	}
	if target == "" {
		target = "http://127.0.0.1:8080" + d.Path
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, Curl(d, target))
}
