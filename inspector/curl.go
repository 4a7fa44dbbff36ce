package inspector

import (
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/export"
)

// handleCurl answers the delivery as one curl command that sends it to
// the first forward target (or ?to=) as it arrived: export.CurlCommand,
// the command devhook deliveries export --format curl writes for it.
func (s *Server) handleCurl(w http.ResponseWriter, r *http.Request) {
	d, err := s.delivery(r.PathValue("id"))
	// Only its request is needed: an attempt that cannot be read does not
	// stop it, as in deliveries export --format curl; a body that cannot
	// be read does (409), the error naming the body alone. Writing the
	// command sends nothing: its error says what it could not write, as
	// the body's download does, not that nothing was sent.
	if pe := bodyUnreadable(d, err); pe != nil {
		s.fail(w, r, unreadablePart("write the curl command", pe))
		return
	}
	if err != nil && !partial(d, err) {
		s.fail(w, r, err)
		return
	}
	target, _ := s.replayTarget(d)
	if target == "" && len(s.cfg.Settings.Forward) > 0 { // a route drops it
		target = joinTarget(s.cfg.Settings.Forward[0], d.Path, d.RawQuery)
	}
	if to := strings.TrimSpace(r.URL.Query().Get("to")); to != "" {
		u, err := url.Parse(to)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			s.fail(w, r, devhook.Errorf(devhook.EINVALID, "target %q is not an http or https URL", to))
			return
		}
		target = joinTarget(to, d.Path, d.RawQuery)
	}
	if target == "" {
		// No forward target: where the delivery went, else a guess.
		if target, err = export.Target(d, nil); err != nil {
			target = joinTarget("http://127.0.0.1:8080", d.Path, d.RawQuery)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, export.CurlCommand(d, target))
}
