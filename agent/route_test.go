package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
)

func mustRoutes(t testing.TB, texts ...string) []agent.Route {
	t.Helper()
	var rs []agent.Route
	for _, s := range texts {
		r, err := agent.ParseRoute(s)
		if err != nil {
			t.Fatalf("ParseRoute(%q): %v", s, err)
		}
		rs = append(rs, r)
	}
	return rs
}

func TestParseRoute(t *testing.T) {
	for _, c := range []struct {
		in, target string
	}{
		{"path:/a/** -> localhost:9001", "http://localhost:9001"},
		{"  path:/a -> 9001  ", "http://localhost:9001"},
		{"path:/a->:9001", "http://localhost:9001"},
		{"json:data.status_v2=succeeded & header:X-Env=dev -> https://h.example/base?k=v", "https://h.example/base?k=v"},
		{"header:x-a=b -> drop", devhook.RouteDrop},
		{"path:** -> drop", devhook.RouteDrop},
		{"json:a=x->y -> :1", "http://localhost:1"}, // the last -> splits
	} {
		r, err := agent.ParseRoute(c.in)
		if err != nil {
			t.Errorf("ParseRoute(%q): %v", c.in, err)
			continue
		}
		if r.Target() != c.target || r.String() != strings.TrimSpace(c.in) {
			t.Errorf("ParseRoute(%q) = %q -> %q, want target %q", c.in, r.String(), r.Target(), c.target)
		}
	}
}

func TestParseRoute_Errors(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string // in the error
	}{
		{"", []string{"empty"}},
		{"path:/a", []string{`no "->"`, "MATCH -> TARGET"}},
		{"path:/a/** -> ", []string{"no target"}},
		{" -> :9001", []string{"nothing to match"}},
		{"query:a=b -> :9001", []string{`unknown matcher kind "query"`, "query:a=b", "path:GLOB"}},
		{"/a/** -> :9001", []string{`"/a/**" has no kind`}},
		{"path:/a** -> :9001", []string{`"/a**"`, "whole segment"}},
		{"path:/a/***/b -> :9001", []string{"whole segment"}},
		{"path:a/b -> :9001", []string{`"a/b"`, "must start with /"}},
		{"path: -> :9001", []string{"no glob"}},
		{"path:/a?x=1 -> :9001", []string{"without the query"}},
		{"json:data.status -> :9001", []string{"json:data.status", "=VALUE"}},
		{"json:a..b=1 -> :9001", []string{"empty key"}},
		{"json:=1 -> :9001", []string{"JSON path is empty"}},
		{`json:a="x -> :9001`, []string{}}, // an unbalanced quote is a value as written
		{`json:a="x\q" -> :9001`, []string{"not a JSON string"}},
		{"header:X-Env -> :9001", []string{"=VALUE"}},
		{"header:X Env=a -> :9001", []string{"not a header name"}},
		{"path:/a &  & header:x=y -> :9001", []string{"empty condition", "condition 2"}},
		{"path:/a -> ftp://x", []string{`target "ftp://x"`, "drop"}},
	} {
		_, err := agent.ParseRoute(c.in)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("ParseRoute(%q): %v", c.in, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseRoute(%q): no error", c.in)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseRoute(%q) = %q, want it to say %q", c.in, err, w)
			}
		}
	}
}

type routeCase struct {
	path   string
	header http.Header
	body   string
	want   int // the route's index, 0 for the default
}

func checkRoutes(t *testing.T, routes []string, cases []routeCase) {
	t.Helper()
	r := agent.NewRouter(mustRoutes(t, routes...))
	for _, c := range cases {
		got := r.Match(c.path, c.header, []byte(c.body))
		if got.Index != c.want {
			t.Errorf("routes %q: %s %v %s → route %d (%s), want %d", routes, c.path, c.header, c.body, got.Index, got.Text, c.want)
			continue
		}
		if c.want > 0 && got.Text != routes[c.want-1] || c.want == 0 && (got.Text != devhook.RouteDefault || got.Target != "") {
			t.Errorf("route %d text %q target %q", got.Index, got.Text, got.Target)
		}
	}
}

func TestRouteMatch_Path(t *testing.T) {
	checkRoutes(t, []string{"path:/a/** -> :1"}, []routeCase{
		{path: "/a", want: 1}, {path: "/a/", want: 1}, {path: "/a/b", want: 1}, {path: "/a/b/c/d", want: 1},
		{path: "/ab", want: 0}, {path: "/", want: 0}, {path: "/b/a", want: 0},
	})
	checkRoutes(t, []string{"path:/a/*/c -> :1"}, []routeCase{
		{path: "/a/b/c", want: 1}, {path: "/a//c", want: 1}, {path: "/a/b/x/c", want: 0}, {path: "/a/c", want: 0},
	})
	checkRoutes(t, []string{"path:/a/**/z -> :1"}, []routeCase{
		{path: "/a/z", want: 1}, {path: "/a/b/z", want: 1}, {path: "/a/b/c/z", want: 1}, {path: "/a/z/z", want: 1},
		{path: "/a/b/zz", want: 0}, {path: "/z", want: 0}, {path: "/a/z/", want: 0},
	})
	checkRoutes(t, []string{"path:/hooks/gh-* -> :1", "path:/hooks/*-prod/** -> :2", "path:/**/*.json -> :3"}, []routeCase{
		{path: "/hooks/gh-push", want: 1}, {path: "/hooks/gh-", want: 1}, {path: "/hooks/gh/x", want: 0},
		{path: "/hooks/eu-prod", want: 2}, {path: "/hooks/eu-prod/x/y", want: 2}, {path: "/hooks/-prod", want: 2},
		{path: "/x/y/data.json", want: 3}, {path: "/data.json", want: 3}, {path: "/data.jsonx", want: 0},
	})
	checkRoutes(t, []string{"path:/a*b*c -> :1", "path:** -> :2"}, []routeCase{
		{path: "/abc", want: 1}, {path: "/aXbYc", want: 1}, {path: "/abbc", want: 1}, {path: "/acb", want: 2}, {path: "/", want: 2},
	})
	checkRoutes(t, []string{"path:/ -> :1", "path:/* -> :2"}, []routeCase{
		{path: "/", want: 1}, {path: "/x", want: 2}, {path: "/x/", want: 0},
	})
}

func TestRouteMatch_JSON(t *testing.T) {
	body := `{"event_type":"run.status","data":{"run_id":"r1","status_v2":"succeeded","n":3,"ok":true,"none":null,"f":1.50,
		"items":[{"id":"first"},{"id":7}],"s":"3","nested":{"deep":{"er":"x y"}}},"data2":[[1,2],[3]]}`
	for _, c := range []struct {
		match string
		want  bool
	}{
		{"json:event_type=run.status", true},
		{"json:data.status_v2=succeeded", true},
		{"json:data.status_v2=running", false},
		{"json:data.n=3", true},
		{`json:data.n="3"`, false}, // quoted: a string only
		{`json:data.s="3"`, true},
		{"json:data.s=3", true},
		{"json:data.ok=true", true},
		{"json:data.ok=1", false},
		{"json:data.none=null", true},
		{"json:data.f=1.50", true},
		{"json:data.f=1.5", false}, // numbers compare as written
		{"json:data.items.0.id=first", true},
		{"json:data.items.1.id=7", true},
		{"json:data.items.2.id=7", false},
		{"json:data.items.x.id=7", false},
		{"json:data2.0.1=2", true},
		{"json:data2.1.0=3", true},
		{"json:data.nested.deep.er=x y", true},
		{"json:data.nested.deep={}", false}, // an object has no text
		{"json:data.missing=x", false},
		{"json:data.status_v2=succeeded & json:data.n=3", true},
		{"json:data.status_v2=succeeded & json:data.n=4", false},
	} {
		checkRoutes(t, []string{c.match + " -> :1"}, []routeCase{{path: "/", body: body, want: map[bool]int{true: 1}[c.want]}})
	}
	// Not JSON, or JSON cut short: no JSON condition holds.
	checkRoutes(t, []string{"json:a=1 -> :1"}, []routeCase{
		{path: "/", body: `{"a":1}`, want: 1}, {path: "/", body: `{"a":1`, want: 0}, {path: "/", body: `a=1`, want: 0},
		{path: "/", body: ``, want: 0}, {path: "/", body: `{"a":1,"a":2}`, want: 0}, {path: "/", body: ` {"a":"1"} `, want: 1},
	})
}

func TestRouteMatch_Header(t *testing.T) {
	routes := []string{"header:x-github-event=push -> :1", "HEADER:x -> :2"}
	if _, err := agent.ParseRoute(routes[1]); err == nil {
		t.Fatal("HEADER: took as a kind: kinds are lower case")
	}
	checkRoutes(t, routes[:1], []routeCase{
		{path: "/", header: http.Header{"X-Github-Event": {"push"}}, want: 1},
		{path: "/", header: http.Header{"x-github-event": {"push"}}, want: 1}, // a key not canonical
		{path: "/", header: http.Header{"X-GITHUB-EVENT": {"ping", "push"}}, want: 1},
		{path: "/", header: http.Header{"X-Github-Event": {"Push"}}, want: 0}, // the value is exact
		{path: "/", header: http.Header{"X-Github-Event": {"push "}}, want: 0},
		{path: "/", header: http.Header{}, want: 0},
		{path: "/", header: nil, want: 0},
	})
	checkRoutes(t, []string{"header:X-Token=a=b -> :1"}, []routeCase{
		{path: "/", header: http.Header{"X-Token": {"a=b"}}, want: 1},
	})
}

// Conditions joined by & must all hold; the routes are tried in order and
// the first that matches wins.
func TestRouteMatch_AllAndOrder(t *testing.T) {
	routes := []string{
		"path:/gh/** & header:X-Env=prod & json:action=opened -> :1",
		"path:/gh/** & header:X-Env=prod -> drop",
		"path:/gh/** -> :3",
		"json:action=opened -> :4",
	}
	prod := http.Header{"X-Env": {"prod"}}
	checkRoutes(t, routes, []routeCase{
		{path: "/gh/pr", header: prod, body: `{"action":"opened"}`, want: 1},
		{path: "/gh/pr", header: prod, body: `{"action":"closed"}`, want: 2},
		{path: "/gh/pr", header: nil, body: `{"action":"opened"}`, want: 3},
		{path: "/other", header: prod, body: `{"action":"opened"}`, want: 4},
		{path: "/other", header: prod, body: `{"action":"closed"}`, want: 0},
	})
	r := agent.NewRouter(mustRoutes(t, routes...))
	if got := r.Match("/gh/x", prod, nil); !got.Drop() || got.Target != devhook.RouteDrop {
		t.Errorf("route 2 = %+v, want a drop", got)
	}
	if agent.NewRouter(nil) != nil {
		t.Error("NewRouter(nil) is not nil")
	}
}

// More JSON paths than one scan takes: each beyond is looked up alone.
func TestRouteMatch_ManyJSONPaths(t *testing.T) {
	var routes []string
	for i := range devhook.MaxJSONPaths + 6 {
		routes = append(routes, fmt.Sprintf("json:k%d=%d -> :%d", i, i, 1000+i))
	}
	r := agent.NewRouter(mustRoutes(t, routes...))
	for _, i := range []int{0, 5, devhook.MaxJSONPaths - 1, devhook.MaxJSONPaths, devhook.MaxJSONPaths + 5} {
		body := fmt.Sprintf(`{"other":1,"k%d":%d}`, i, i)
		if got := r.Match("/", nil, []byte(body)); got.Index != i+1 {
			t.Errorf("body %s → route %d, want %d", body, got.Index, i+1)
		}
	}
}

func TestParseRoutes_Lines(t *testing.T) {
	rs, err := agent.ParseRoutes("routes.txt", []byte("# comment\n\npath:/a/** -> :9001\n  json:x=1 & header:A=b -> drop  \n"))
	if err != nil || len(rs) != 2 || rs[0].Target() != "http://localhost:9001" || rs[1].Target() != "drop" {
		t.Fatalf("ParseRoutes: %v %v", rs, err)
	}
	_, err = agent.ParseRoutes("my.routes", []byte("path:/a -> :1\n# x\npath:/b/** ->\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "my.routes:3: ") || !strings.Contains(err.Error(), "no target") {
		t.Fatalf("error of line 3: %v", err)
	}
	if _, err := agent.ParseRoutes("empty", []byte("# nothing\n")); err == nil || !strings.Contains(err.Error(), "no route") {
		t.Fatalf("empty file: %v", err)
	}
}

func TestParseRoutes_YAML(t *testing.T) {
	file := `routes:
  - path:/github/** -> localhost:9001
  - match: json:data.status_v2=succeeded
    to: :9002
  - match:
      - path:/noise/**
      - header:X-Env=test
    to: drop
`
	rs, err := agent.ParseRoutes("r.yaml", []byte(file))
	if err != nil || len(rs) != 3 {
		t.Fatalf("ParseRoutes: %v %v", rs, err)
	}
	want := []string{"path:/github/** -> localhost:9001", "json:data.status_v2=succeeded -> :9002", "path:/noise/** & header:X-Env=test -> drop"}
	for i := range rs {
		if rs[i].String() != want[i] {
			t.Errorf("route %d = %q, want %q", i+1, rs[i].String(), want[i])
		}
	}
	// A top-level list is a list of routes too.
	if rs, err := agent.ParseRoutes("r.yml", []byte("- path:/a -> :1\n- path:/b -> drop\n")); err != nil || len(rs) != 2 {
		t.Fatalf("a top-level list: %v %v", rs, err)
	}
	for _, c := range []struct{ file, want string }{
		{"routes:\n  - path:/a -> :1\n  - path:/a** -> :2\n", "r.yaml:3: "},
		{"routes:\n  - match: path:/a\n    to: :1\n  - match: path:/b\n", "r.yaml:4: "},
		{"routes:\n  - match: path:/a\n    too: :1\n", "r.yaml:3: unknown key \"too\""},
		{"routes:\n  - match:\n      - path:/a\n      - {x: 1}\n    to: :1\n", "r.yaml:4: "},
		{"routs:\n  - path:/a -> :1\n", "r.yaml:1: unknown key \"routs\""},
		{"routes: path:/a -> :1\n", "r.yaml:1: routes must be a list"},
		{"routes:\n  - [\n", "r.yaml: "},
	} {
		_, err := agent.ParseRoutes("r.yaml", []byte(c.file))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("ParseRoutes(%q) = %v, want it to begin %q", c.file, err, c.want)
		}
	}
}

var benchRouteBody = []byte(`{"event_type":"run.status","data":{"run_id":"run-0123456789","application_id":"app-42",` +
	`"status":"succeeded","status_v2":"succeeded","items":[{"id":"a"},{"id":"b"}]},"padding":"` + strings.Repeat("x", 1200) + `"}`)

// BenchmarkRouteMatch is the cost of choosing a route for one delivery,
// with ten routes before the one that matches.
func BenchmarkRouteMatch(b *testing.B) {
	h := http.Header{"Content-Type": {"application/json"}, "Service-Signature": {"t=1,v1=abc"}, "X-Env": {"prod"}, "User-Agent": {"service"}}
	var miss []string
	for i := range 10 {
		miss = append(miss, fmt.Sprintf("path:/other%d/** & header:X-Env=prod -> :%d", i, 9000+i))
	}
	for _, c := range []struct {
		name  string
		route string
	}{
		{"path", "path:/hooks/*/run/** -> :9100"},
		{"header", "header:x-env=prod -> :9100"},
		{"json", "json:data.status_v2=succeeded -> :9100"},
		{"json-array", "json:data.items.1.id=b -> :9100"},
		{"all", "path:/hooks/** & header:X-Env=prod & json:data.status_v2=succeeded -> :9100"},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := agent.NewRouter(mustRoutes(b, append(miss, c.route)...))
			b.ReportAllocs()
			b.SetBytes(int64(len(benchRouteBody)))
			for b.Loop() {
				if r.Match("/hooks/x/run/y", h, benchRouteBody).Index != 11 {
					b.Fatal("no match")
				}
			}
		})
	}
	b.Run("json-ten-routes", func(b *testing.B) {
		var rs []string
		for i := range 10 {
			rs = append(rs, fmt.Sprintf("json:data.status_v2=s%d -> :%d", i, 9000+i))
		}
		r := agent.NewRouter(mustRoutes(b, append(rs, "json:data.status_v2=succeeded -> :9100")...))
		b.ReportAllocs()
		b.SetBytes(int64(len(benchRouteBody)))
		for b.Loop() {
			if r.Match("/hooks/x", h, benchRouteBody).Index != 11 {
				b.Fatal("no match")
			}
		}
	})
}
