package agent

// Targets: a receiver's address as a user gives it (--forward, a route's
// target, replay --to), and the key that tells the targets of the owed
// deliveries and of the runs apart.

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/devhook/devhook"
)

// ParseTarget turns a receiver's address (localhost:8080, :8080, 8080,
// http://host:port/base), as a user gives it, into a URL. Its errors say
// what is wrong with the address; the caller names where it came from.
func ParseTarget(s string) (*url.URL, error) {
	raw := strings.TrimSpace(s)
	switch {
	case raw == "":
		return nil, errors.New("the receiver's address is empty; give one such as localhost:8080")
	case strings.Trim(raw, "0123456789") == "":
		raw = "http://localhost:" + raw
	case strings.HasPrefix(raw, ":"):
		raw = "http://localhost" + raw
	case !strings.Contains(raw, "://"):
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%q is not a receiver address; use host:port or an http(s) URL", s)
	}
	// The query is kept: each delivery's own query follows it
	// (devhook.TargetURL).
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// targetKey names the target of route rt among the deliveries of a run
// (orderKey) and the owed ones: "" for the first --forward target (no
// route, the default route), else the route's target.
func targetKey(rt *devhook.Route) string {
	if rt == nil || rt.Index == 0 {
		return ""
	}
	return rt.Target
}
