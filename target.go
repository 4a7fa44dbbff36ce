package devhook

import (
	"net/url"
	"strings"
)

// TargetURL is where a delivery goes at a receiver: target's path is a
// prefix, and the delivery's path (what followed /c/<channel>) and query
// follow it, as listen --forward, replay --to and scenario play --to all
// send. target's own query is kept and the delivery's follows it
// (http://h/hooks?token=abc with /x?y=1 is http://h/hooks/x?token=abc&y=1),
// so that receivers that authenticate by query get what they were given;
// target's fragment is not sent.
func TargetURL(target *url.URL, path, rawQuery string) string {
	u := *target
	if q := strings.TrimSuffix(u.RawQuery, "&"); q != "" && rawQuery != "" {
		rawQuery = q + "&" + rawQuery
	} else if q != "" {
		rawQuery = q
	}
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
