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
//
// The result never leaves target's path: a delivery path with dot
// segments (HasDotSegment), which a receiver or a proxy in front of it
// could resolve to a place above the prefix, is cleaned first
// (CleanDotSegments). The relay refuses such paths with 400; this holds
// for what an older relay, a cluster instance or a scenario file passes.
func TargetURL(target *url.URL, path, rawQuery string) string {
	u := *target
	if q := strings.TrimSuffix(u.RawQuery, "&"); q != "" && rawQuery != "" {
		rawQuery = q + "&" + rawQuery
	} else if q != "" {
		rawQuery = q
	}
	base := strings.TrimSuffix(u.EscapedPath(), "/")
	if HasDotSegment(path) {
		path = CleanDotSegments(path)
	}
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

// maxDecodes bounds the rounds of percent-decoding HasDotSegment and
// CleanDotSegments look through: a path still changing after them is
// taken for hostile.
const maxDecodes = 4

// HasDotSegment reports whether path, an escaped URL path, has a segment
// that a receiver, a framework or a proxy in front of them could take for
// "." or "..": raw or percent-encoded (%2e, %2E, in any mix), separated by
// "/" or "\" raw or encoded (%2f, %5c), encoded more than once (%252e), or
// followed by a path parameter ("..;x"). A path that percent-decodes to
// something new more than maxDecodes times counts as one too.
func HasDotSegment(path string) bool {
	s := path
	for range maxDecodes + 1 {
		if dotSegmentIn(s) {
			return true
		}
		if strings.IndexByte(s, '%') < 0 {
			return false
		}
		next := decodePercent(s)
		if next == s {
			return false
		}
		s = next
	}
	return true
}

// dotSegmentIn reports whether s, split at "/" and "\", has a dot segment.
func dotSegmentIn(s string) bool {
	for s != "" {
		i := strings.IndexAny(s, `/\`)
		seg := s
		if i >= 0 {
			seg, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if isDotSegment(seg) {
			return true
		}
	}
	return false
}

func isDotSegment(seg string) bool {
	if i := strings.IndexByte(seg, ';'); i >= 0 {
		seg = seg[:i] // "..;x": a path parameter, which some servers drop
	}
	return seg == "." || seg == ".."
}

// decodePercent decodes every valid %XX in s and leaves the rest as it is
// (isHex is event_parse.go's).
func decodePercent(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// CleanDotSegments returns path, an escaped URL path, with its dot
// segments resolved as if it were rooted at "/": ".." never climbs above
// the start, so that the result appended to a prefix stays under it. The
// path is percent-decoded as HasDotSegment decodes it, split at "/" and
// "\" and escaped again: the bytes of a path with no dot segment are
// better left alone (call it only when HasDotSegment says so). A path
// that never stops decoding becomes "/".
func CleanDotSegments(path string) string {
	s := path
	for n := 0; strings.IndexByte(s, '%') >= 0; n++ {
		next := decodePercent(s)
		if next == s {
			break
		}
		if n == maxDecodes {
			return "/"
		}
		s = next
	}
	var out []string
	segs := strings.FieldsFunc(s, func(r rune) bool { return r == '/' || r == '\\' })
	for _, seg := range segs {
		switch {
		case isDotSegment(seg) && strings.HasPrefix(seg, ".."):
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case isDotSegment(seg):
		default:
			out = append(out, seg)
		}
	}
	clean := "/" + strings.Join(out, "/")
	if len(out) > 0 && (strings.HasSuffix(s, "/") || strings.HasSuffix(s, `\`) || isDotSegment(lastSegment(s))) {
		clean += "/"
	}
	return (&url.URL{Path: clean}).EscapedPath()
}

func lastSegment(s string) string {
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		return s[i+1:]
	}
	return s
}
