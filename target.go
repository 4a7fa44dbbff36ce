package devhook

import (
	"net/url"
	"strings"
)

// TargetURL is where a delivery goes at a receiver: target's path is a
// prefix, and the delivery's path (what followed /c/<channel>) and query
// follow it, as listen --forward, replay --to and scenario play --to all
// send. target's own query and fragment are not sent.
func TargetURL(target *url.URL, path, rawQuery string) string {
	u := *target
	base := strings.TrimSuffix(u.EscapedPath(), "/")
	if path == "" {
		path = "/"
	}
	if base != "" && path == "/" {
		path = ""
	}
	u.RawPath, u.Path, u.RawQuery, u.Fragment = "", "", "", ""
	s := u.String() + base + path
	if rawQuery != "" {
		s += "?" + rawQuery
	}
	return s
}
