package agent

// Routes: several receivers from one listen.
//
// A route is MATCH -> TARGET (listen --route, or a line of --routes FILE).
// The routes are tried in order for each delivery; the first whose MATCH
// holds chooses its TARGET, and a delivery no route matches goes to the
// --forward targets as it would without routes (the first answers, the
// others get a copy). MATCH is one or more conditions joined by " & "
// (spaces around the &), all of which must hold:
//
//	path:GLOB          the delivery's path (after /c/<channel>, as sent, without
//	                   the query): * is any text within a segment, ** any
//	                   number of whole segments (/a/** matches /a, /a/ and
//	                   /a/b/c; /a/**/z matches /a/z and /a/b/z)
//	json:PATH=VALUE    the field at the dotted PATH of the JSON body
//	                   (devhook.JSONPath: data.items.0.id) has the text VALUE:
//	                   a string's value, or a number, true, false or null as
//	                   written; "VALUE" in double quotes matches a string only
//	header:NAME=VALUE  a header NAME (any case) has the value VALUE exactly (one
//	                   of its values, when repeated)
//
// TARGET is what --forward takes (host:port, :port, port, an http(s) URL
// with a path and a query) or drop: the delivery is recorded and shown,
// not forwarded, and its sender gets 202 (answer.go's dropAnswer), so that
// the service does not send it again.
//
// The routes are parsed and compiled once (ParseRoute); matching builds
// nothing: the path and header conditions compare in place, and the JSON
// conditions of all routes share one scan of the body
// (devhook.LookupJSON), made only when a route's other conditions held and
// its JSON ones are asked (BenchmarkRouteMatch).

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"github.com/devhook/devhook"
)

// Route is one of listen's routes, parsed: ParseRoute.
type Route struct {
	text    string
	conds   []cond
	target  *url.URL   // nil for drop
	targets []*url.URL // target alone, for the forward
}

// String is the route as written.
func (r *Route) String() string { return r.text }

// Target is where the route sends: the receiver's URL, or "drop".
func (r *Route) Target() string {
	if r.target == nil {
		return devhook.RouteDrop
	}
	return r.target.String()
}

type condKind uint8

const (
	condPath condKind = iota
	condHeader
	condJSON
)

// cond is one condition of a route's MATCH.
type cond struct {
	kind condKind
	glob glob // condPath
	// condHeader: the canonical name; condJSON: the path as written.
	name       string
	value      string
	jsonPath   devhook.JSONPath
	pathIndex  int  // condJSON: the index of jsonPath among the router's paths
	stringOnly bool // condJSON: VALUE was quoted
}

// Kinds of condition, as a MATCH names them.
const (
	kindPath   = "path:"
	kindJSON   = "json:"
	kindHeader = "header:"
)

// ParseRoute parses a route, MATCH -> TARGET. Its errors say what is
// wrong with it, naming the offending part; the caller says where the
// route came from.
func ParseRoute(s string) (Route, error) {
	text := strings.TrimSpace(s)
	if text == "" {
		return Route{}, errors.New("the route is empty; write MATCH -> TARGET, such as 'path:/github/** -> localhost:9001'")
	}
	arrow := strings.LastIndex(text, "->")
	if arrow < 0 {
		return Route{}, fmt.Errorf("no \"->\" in %q: a route is MATCH -> TARGET, such as 'path:/github/** -> localhost:9001'", text)
	}
	match, target := strings.TrimSpace(text[:arrow]), strings.TrimSpace(text[arrow+2:])
	if match == "" {
		return Route{}, errors.New("nothing to match before \"->\": give path:GLOB, json:PATH=VALUE or header:NAME=VALUE")
	}
	if target == "" {
		return Route{}, errors.New("no target after \"->\": give host:port, a URL, or drop")
	}
	r := Route{text: text}
	if target != devhook.RouteDrop {
		u, err := ParseTarget(target)
		if err != nil {
			return Route{}, fmt.Errorf("target %q: %w; or drop", target, err)
		}
		r.target, r.targets = u, []*url.URL{u}
	}
	parts := splitConditions(match)
	for i, part := range parts {
		if part == "" {
			return Route{}, fmt.Errorf("an empty condition in %q (condition %d): conditions are joined by \" & \"", match, i+1)
		}
		c, err := parseCondition(part)
		if err != nil {
			return Route{}, err
		}
		r.conds = append(r.conds, c)
	}
	// The JSON conditions last: the others cost less, and one that fails
	// spares the scan of the body.
	slices.SortStableFunc(r.conds, func(a, b cond) int { return cmp.Compare(a.kind, b.kind) })
	return r, nil
}

// splitConditions splits MATCH at each & that has a space or a tab on
// both sides, and trims the parts.
func splitConditions(match string) []string {
	var parts []string
	start := 0
	for i := 1; i+1 < len(match); i++ {
		if match[i] == '&' && isBlank(match[i-1]) && isBlank(match[i+1]) {
			parts = append(parts, strings.TrimSpace(match[start:i]))
			start = i + 1
		}
	}
	return append(parts, strings.TrimSpace(match[start:]))
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func parseCondition(s string) (cond, error) {
	switch {
	case strings.HasPrefix(s, kindPath):
		g, err := compileGlob(strings.TrimSpace(s[len(kindPath):]))
		if err != nil {
			return cond{}, err
		}
		return cond{kind: condPath, glob: g, name: g.text}, nil
	case strings.HasPrefix(s, kindJSON):
		return parseJSONCondition(s, s[len(kindJSON):])
	case strings.HasPrefix(s, kindHeader):
		return parseHeaderCondition(s, s[len(kindHeader):])
	}
	kind, _, ok := strings.Cut(s, ":")
	if !ok || strings.ContainsAny(kind, " /=") {
		return cond{}, fmt.Errorf("condition %q has no kind: write path:GLOB, json:PATH=VALUE or header:NAME=VALUE", s)
	}
	return cond{}, fmt.Errorf("unknown matcher kind %q in %q: use path:GLOB, json:PATH=VALUE or header:NAME=VALUE", kind, s)
}

func parseJSONCondition(s, rest string) (cond, error) {
	path, value, ok := strings.Cut(rest, "=")
	path = strings.TrimSpace(path)
	if !ok {
		return cond{}, fmt.Errorf("%q has no =VALUE: write json:PATH=VALUE, as in json:data.status_v2=succeeded", s)
	}
	p, err := devhook.ParseJSONPath(path)
	if err != nil {
		return cond{}, fmt.Errorf("%q: %w", s, err)
	}
	c := cond{kind: condJSON, name: path, jsonPath: p, value: strings.TrimSpace(value)}
	if v := c.value; len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		if err := json.Unmarshal([]byte(v), &c.value); err != nil {
			return cond{}, fmt.Errorf("%q: the quoted value %s is not a JSON string: %w", s, v, err)
		}
		c.stringOnly = true
	}
	return c, nil
}

func parseHeaderCondition(s, rest string) (cond, error) {
	name, value, ok := strings.Cut(rest, "=")
	name = strings.TrimSpace(name)
	if !ok {
		return cond{}, fmt.Errorf("%q has no =VALUE: write header:NAME=VALUE, as in header:X-Env=staging", s)
	}
	if !isToken(name) {
		return cond{}, fmt.Errorf("%q: %q is not a header name", s, name)
	}
	return cond{kind: condHeader, name: textproto.CanonicalMIMEHeaderKey(name), value: strings.TrimSpace(value)}, nil
}

// isToken reports whether s is an HTTP token, as a header name is.
func isToken(s string) bool {
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

// glob is a compiled path glob: its segments, split at /.
type glob struct {
	text string
	segs []globSeg
}

type globSeg struct {
	text string
	star bool // has a *: matched by wildcard
	any  bool // is **: any number of whole segments
}

func compileGlob(s string) (glob, error) {
	switch {
	case s == "":
		return glob{}, errors.New("path: has no glob: give one such as path:/github/**")
	case s[0] != '/' && !strings.HasPrefix(s, "**"):
		return glob{}, fmt.Errorf("path glob %q must start with / (a delivery's path does) or **", s)
	case strings.ContainsAny(s, "?#"):
		return glob{}, fmt.Errorf("path glob %q has a ? or #: a route matches the path alone, without the query", s)
	}
	g := glob{text: s}
	for _, seg := range strings.Split(s, "/") {
		switch {
		case seg == "**":
			g.segs = append(g.segs, globSeg{text: seg, any: true})
		case strings.Contains(seg, "**"):
			return glob{}, fmt.Errorf("path glob %q: ** must be a whole segment, as in /a/**/b (use * within a segment: /a/b*)", s)
		default:
			g.segs = append(g.segs, globSeg{text: seg, star: strings.IndexByte(seg, '*') >= 0})
		}
	}
	return g, nil
}

// match reports whether path matches g. The path's segments are those
// between its slashes ("/a/b": "", "a", "b"); ** takes any number of
// them, the other segments one each. It backtracks only to the last **
// seen, as wildcard matching does, and builds nothing.
func (g *glob) match(path string) bool {
	n := len(path)
	pi, gi := 0, 0 // the path segment starting at byte pi; the glob's segment gi
	starG, starP := -1, 0
	for pi <= n {
		end := segmentEnd(path, pi)
		if gi < len(g.segs) {
			gs := &g.segs[gi]
			if gs.any {
				starG, starP = gi, pi
				gi++
				continue
			}
			if gs.matches(path[pi:end]) {
				gi++
				pi = end + 1
				continue
			}
		}
		if starG < 0 {
			return false
		}
		// The last ** takes one more segment.
		starP = segmentEnd(path, starP) + 1
		pi, gi = starP, starG+1
	}
	for gi < len(g.segs) && g.segs[gi].any {
		gi++
	}
	return gi == len(g.segs)
}

// segmentEnd is where the path segment starting at i ends: its next
// slash, or the end of the path.
func segmentEnd(path string, i int) int {
	if j := strings.IndexByte(path[i:], '/'); j >= 0 {
		return i + j
	}
	return len(path)
}

// matches reports whether one path segment matches gs: * is any text.
func (gs *globSeg) matches(seg string) bool {
	if !gs.star {
		return gs.text == seg
	}
	p := gs.text
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(seg) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(p) && p[pi] == seg[si]:
			pi++
			si++
		case star >= 0:
			mark++
			pi, si = star+1, mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// Router picks the route of a delivery among listen's routes: NewRouter,
// Match. It is not changed once made, and may be used by many goroutines.
type Router struct {
	routes []Route
	refs   []devhook.Route // refs[i] names routes[i]; shared, never changed
	def    devhook.Route   // no route matched
	paths  []devhook.JSONPath
}

// NewRouter returns the router of routes, tried in order; nil when there
// are none.
func NewRouter(routes []Route) *Router {
	if len(routes) == 0 {
		return nil
	}
	r := &Router{routes: make([]Route, len(routes)), refs: make([]devhook.Route, len(routes)),
		def: devhook.Route{Index: 0, Text: devhook.RouteDefault}}
	byPath := map[string]int{}
	for i := range routes {
		rt := routes[i]
		rt.conds = append([]cond(nil), rt.conds...)
		for j := range rt.conds {
			c := &rt.conds[j]
			if c.kind != condJSON {
				continue
			}
			k, ok := byPath[c.name]
			if !ok {
				k = len(r.paths)
				byPath[c.name] = k
				r.paths = append(r.paths, c.jsonPath)
			}
			c.pathIndex = k
		}
		r.routes[i] = rt
		r.refs[i] = devhook.Route{Index: i + 1, Text: rt.text, Target: rt.Target()}
	}
	return r
}

// targets returns the targets of r's routes (none for a drop, nor for a
// nil r).
func (r *Router) targets() []*url.URL {
	if r == nil {
		return nil
	}
	var out []*url.URL
	for i := range r.routes {
		out = append(out, r.routes[i].targets...)
	}
	return out
}

// request is what a route looks at of a delivery.
type request struct {
	path   string
	header http.Header
	body   []byte
}

// Match returns the route that takes a delivery with this path, header
// and body: the first whose conditions all hold, or the default route
// (Index 0: the --forward targets). The route returned is shared: it must
// not be changed.
func (r *Router) Match(path string, header http.Header, body []byte) *devhook.Route {
	return r.match(request{path: path, header: header, body: body})
}

func (r *Router) match(req request) *devhook.Route {
	if len(r.paths) == 0 {
		for i := range r.routes {
			if r.routes[i].holds(req, r, nil) {
				return &r.refs[i]
			}
		}
		return &r.def
	}
	var js jsonFields
	for i := range r.routes {
		if r.routes[i].holds(req, r, &js) {
			return &r.refs[i]
		}
	}
	return &r.def
}

// route returns the compiled route of ref, or nil for the default route
// or a route of another listen.
func (r *Router) route(ref *devhook.Route) *Route {
	if r == nil || ref == nil || ref.Index < 1 || ref.Index > len(r.routes) || r.refs[ref.Index-1] != *ref {
		return nil
	}
	return &r.routes[ref.Index-1]
}

// jsonFields are the values of the router's JSON paths in one body,
// looked up once, when a route first asks.
type jsonFields struct {
	looked bool
	vals   [devhook.MaxJSONPaths]devhook.JSONValue
}

func (js *jsonFields) value(r *Router, req request, k int) devhook.JSONValue {
	if k >= devhook.MaxJSONPaths {
		// Beyond the paths of one scan: one scan of its own.
		var one [1]devhook.JSONValue
		devhook.LookupJSON(req.body, r.paths[k:k+1], one[:])
		return one[0]
	}
	if !js.looked {
		js.looked = true
		devhook.LookupJSON(req.body, r.paths[:min(len(r.paths), devhook.MaxJSONPaths)], js.vals[:])
	}
	return js.vals[k]
}

// holds reports whether every condition of rt holds for req.
func (rt *Route) holds(req request, r *Router, js *jsonFields) bool {
	for i := range rt.conds {
		c := &rt.conds[i]
		switch c.kind {
		case condPath:
			if !c.glob.match(req.path) {
				return false
			}
		case condHeader:
			if !headerHas(req.header, c.name, c.value) {
				return false
			}
		case condJSON:
			if !js.value(r, req, c.pathIndex).TextIs(c.value, c.stringOnly) {
				return false
			}
		}
	}
	return true
}

// headerHas reports whether h has a value v for the header name (in its
// canonical form; h's keys in another case are found too).
func headerHas(h http.Header, name, v string) bool {
	vs, ok := h[name]
	if !ok {
		for k, kvs := range h {
			if strings.EqualFold(k, name) {
				vs = kvs
				break
			}
		}
	}
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}
