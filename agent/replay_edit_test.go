package agent_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/devhook/devhook/agent"
)

// A replay's header edit replaces every value of a name set (several
// values kept in order), removes names in any case, says which removed
// names were absent, leaves the delivery's header untouched, and refuses
// what the agent computes or drops: Content-Length, Host, hop-by-hop
// headers; and values with line breaks, a name both set and removed.
func TestHeaderEdit(t *testing.T) {
	recorded := func() http.Header {
		return http.Header{"Content-Type": {"application/json"}, "User-Agent": {"service-webhooks/1"},
			"X-Many": {"a", "b"}, "x-lower": {"raw key"}, "Content-Length": {"12"}}
	}
	for _, tt := range []struct {
		name   string
		edit   agent.HeaderEdit
		want   http.Header
		absent []string
		err    string
	}{
		{"set replaces every value", agent.HeaderEdit{Set: http.Header{"X-Many": {"c"}}},
			http.Header{"Content-Type": {"application/json"}, "User-Agent": {"service-webhooks/1"}, "X-Many": {"c"}, "x-lower": {"raw key"}, "Content-Length": {"12"}}, nil, ""},
		{"set adds, several values in order, any case", agent.HeaderEdit{Set: http.Header{"x-new": {"1", "2"}, "X-LOWER": {"canon"}}},
			http.Header{"Content-Type": {"application/json"}, "User-Agent": {"service-webhooks/1"}, "X-Many": {"a", "b"}, "X-New": {"1", "2"}, "X-Lower": {"canon"}, "Content-Length": {"12"}}, nil, ""},
		{"remove in any case, absent said", agent.HeaderEdit{Remove: []string{"user-agent", "X-LOWER", "X-Nope", "x-nope"}},
			http.Header{"Content-Type": {"application/json"}, "X-Many": {"a", "b"}, "Content-Length": {"12"}}, []string{"X-Nope"}, ""},
		{"an empty value is a value", agent.HeaderEdit{Set: http.Header{"X-Empty": {""}}},
			http.Header{"Content-Type": {"application/json"}, "User-Agent": {"service-webhooks/1"}, "X-Many": {"a", "b"}, "x-lower": {"raw key"}, "Content-Length": {"12"}, "X-Empty": {""}}, nil, ""},
		{"Content-Length", agent.HeaderEdit{Set: http.Header{"Content-Length": {"3"}}}, nil, nil, "Content-Length is computed"},
		{"Content-Length removed", agent.HeaderEdit{Remove: []string{"content-length"}}, nil, nil, "Content-Length is computed"},
		{"Host", agent.HeaderEdit{Set: http.Header{"Host": {"x"}}}, nil, nil, "--to"},
		{"hop-by-hop", agent.HeaderEdit{Set: http.Header{"Transfer-Encoding": {"chunked"}}}, nil, nil, "Transfer-Encoding is a hop-by-hop header"},
		{"hop-by-hop removed", agent.HeaderEdit{Remove: []string{"connection"}}, nil, nil, "Connection is a hop-by-hop header"},
		{"bad name", agent.HeaderEdit{Set: http.Header{"X Bad": {"1"}}}, nil, nil, "not a header name"},
		{"line break", agent.HeaderEdit{Set: http.Header{"X-A": {"1\r\nX-B: 2"}}}, nil, nil, "line break"},
		{"set and removed", agent.HeaderEdit{Set: http.Header{"X-A": {"1"}}, Remove: []string{"x-a"}}, nil, nil, "both set and removed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := recorded()
			got, absent, err := tt.edit.Apply(h)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("edited:\n%v\nwant\n%v", got, tt.want)
			}
			if !reflect.DeepEqual(absent, tt.absent) {
				t.Errorf("absent %q, want %q", absent, tt.absent)
			}
			if !reflect.DeepEqual(h, recorded()) {
				t.Errorf("the delivery's header was changed: %v", h)
			}
		})
	}
}
