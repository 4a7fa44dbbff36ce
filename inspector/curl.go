package inspector

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

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
		target = "http://127.0.0.1:8080" + d.Path
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, Curl(d, target))
}
