// Package inspector is devhook's local web inspector: a JSON API over the
// agent's store, a live stream of changes, replay, and the single-page app
// embedded from package web.
//
// # API
//
//	GET  /api/deliveries                     newest first; limit, before, verdict, status, run_id, status_v2, q
//	                                         → {"items":[Summary...],"next":"<before cursor or empty>"}
//	GET  /api/deliveries/{id}                → Delivery plus "view" (decoded bodies for the page)
//	GET  /api/deliveries/{id}/body           the request body, raw, as a download
//	GET  /api/deliveries/{id}/attempts/{seq}/body   an attempt's response body, raw, as a download
//	GET  /api/deliveries/{id}/curl           the delivery as a curl command (text/plain); ?to= overrides the target
//	GET  /api/deliveries/{id}/request        method, path, query and headers as they arrived, in base64 (request.go)
//	POST /api/deliveries/{id}/replay         {"resign":bool?,"to":"","header":{...}?,"body_text":"..."?,"body_base64":"..."?} → Attempt
//	DELETE /api/deliveries/{id}              deletes it → {"deleted":1,"ids":[id]}
//	DELETE /api/deliveries                   ?id=A&id=B: those (none unless all are found); else those that
//	                                         received_before (RFC 3339), status, verdict, run_id, status_v2 choose;
//	                                         with none of them, all → {"deleted":n,"ids":[...]} (delete.go)
//	GET  /api/runs                           recent runs: {"items":[{run_id, deliveries, last_status_v2, last_received_at}]}
//	GET  /api/runs/{run_id}                  a run's deliveries oldest first, with a timeline analysis
//	GET  /api/scenario?run_id=R | ?id=A&id=B[&redact=$.path]   the deliveries as a scenario file, a download (scenario.go)
//	GET  /api/settings                       forward targets, routes, relay and public URLs, whether a secret is known, the data directory
//	GET  /api/status                         the agent's devhook.Health: {"storage_error","since","held","owed","failed"}
//	GET  /api/events                         Server-Sent Events: "event: delivery" / "attempt" / "retry", data = devhook.Change;
//	                                         "event: health", data = devhook.Change with "health" set;
//	                                         "event: deleted", data = devhook.Change with "deleted" (ids) or "reload"
//
// A list row and a delivery carry "retry" ({"state":"owed"|"failed","since","reason"})
// while the agent owes the delivery to the receiver, and once it gave up.
// With listen's routes, a delivery carries "route" ({"index","text","target"}:
// the route that took it, index 0 "default" for the forward targets), each
// attempt the route that chose its target, and its view "replay_route", the
// route a replay without a target of its own takes now.
//
// Every {id} is a delivery's id or the start of one that only it has
// (resolve.go). Errors are JSON {"error":"..."} with a status from the
// devhook.ErrorCode of the failure.
//
// # Safety
//
// Every request must name a loopback host (localhost, 127.x.y.z, [::1], or
// one of Config.AllowedHosts) in its Host header, which defeats DNS
// rebinding. State-changing requests from another origin are refused by
// http.CrossOriginProtection. The page builds its DOM with textContent only
// and is served with a strict Content-Security-Policy.
package inspector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
	"github.com/devhook/devhook/web"
)

// Store is what the inspector reads deliveries from.
type Store interface {
	// List returns summaries newest first, paging by f.Before.
	List(f devhook.Filter) ([]devhook.Summary, error)
	// Delivery returns a delivery with its attempts; an *devhook.Error with
	// code devhook.ENOTFOUND when the id is unknown; the delivery and a
	// *devhook.PartialError when parts of it (its body, attempts) could
	// not be read: shown, never sent.
	Delivery(id string) (*devhook.Delivery, error)
	// RunDeliveries returns the summaries of a run's deliveries, oldest first.
	RunDeliveries(runID string) ([]devhook.Summary, error)
	// Retries returns the retry state of those of ids that have one.
	Retries(ids []string) (map[string]devhook.RetryState, error)
	// Damage returns the records the store's reads skipped: damaged, or
	// written by a newer devhook. The list says so.
	Damage() devhook.Damage
	// Resolve returns the id of the delivery whose id is ref or, when none
	// is, of the only one whose id starts with ref: ENOTFOUND when none
	// does, ECONFLICT when several do.
	Resolve(ref string) (string, error)
	// Delete and DeleteMatching remove deliveries with everything kept of
	// them, and return the ids removed (DeleteMatching: and those of the
	// damaged records it kept, which it cannot match).
	Delete(ids []string) ([]string, error)
	DeleteMatching(sel storage.Selection) (storage.Deleted, error)
}

// Replayer sends a stored delivery again and records the attempt itself.
type Replayer interface {
	Replay(ctx context.Context, id string, opt devhook.ReplayOptions) (devhook.Attempt, error)
}

// ReplayTargeter is a Replayer that says where a replay of a delivery
// goes without a target of its own, and by which route (listen --route):
// the URL, or "" when the route drops the delivery. Without it, a
// replay goes to the first forward target.
type ReplayTargeter interface {
	ReplayTarget(d *devhook.Delivery) (target string, route *devhook.Route)
}

// Settings are shown on the page. The secret itself never is.
type Settings struct {
	Forward []string
	// Routes are listen's routes, in order (--route, --routes).
	Routes    []devhook.Route
	RelayURL  string
	PublicURL string
	Channel   string
	// SecretKnown reports whether the agent knows the webhook secret; it may
	// arrive after start-up. Nil means no.
	SecretKnown func() bool
	Verify      string // report, enforce or off
	// DataDir is the absolute path of the data directory whose store
	// this inspector serves, so that a command given --data can tell
	// whether this is the listen recording there.
	DataDir string
}

// Config configures a Server. Zero values mean defaults, except Store,
// which is required.
type Config struct {
	Store Store
	// Replayer is nil when replay is not possible; replay then answers 503.
	Replayer Replayer
	Settings Settings
	// AllowedHosts are host names (without port) accepted in the Host
	// header besides the loopback names.
	AllowedHosts []string
	// Assets is the page; nil means web.FS().
	Assets fs.FS
	// Heartbeat is how often an idle event stream gets a comment line;
	// 0 means 15 seconds.
	Heartbeat time.Duration
	// StreamBuffer is how many changes may wait for a slow subscriber
	// before it is disconnected; 0 means 256.
	StreamBuffer int
	// StreamWriteTimeout bounds each write to a live event stream: a page
	// that stopped reading (its connection's buffers full) is disconnected
	// after it, instead of holding the stream's goroutine; 0 means 10
	// seconds.
	StreamWriteTimeout time.Duration
	// Logf, when set, receives one line per failed request.
	Logf func(format string, args ...any)
	// Health reports the agent's state for GET /api/status; nil means
	// all is well.
	Health func() devhook.Health
	// Deleted, when set, hears the ids of the deliveries the API deleted,
	// before the change is published: listen's agent stops retrying
	// those it owed (agent.Agent.Forget).
	Deleted func(ids []string)
}

// Server serves the inspector. Create it with New.
type Server struct {
	cfg     Config
	handler http.Handler
	hub     *hub
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("inspector: Config.Store is required")
	}
	if cfg.Assets == nil {
		cfg.Assets = web.FS()
	}
	if _, err := fs.Stat(cfg.Assets, "index.html"); err != nil {
		return nil, fmt.Errorf("inspector: the page's assets have no index.html: %w", err)
	}
	if cfg.Heartbeat < 0 || cfg.StreamBuffer < 0 || cfg.StreamWriteTimeout < 0 {
		return nil, errors.New("inspector: Config.Heartbeat, Config.StreamBuffer and Config.StreamWriteTimeout must not be negative")
	}
	if cfg.StreamWriteTimeout == 0 {
		cfg.StreamWriteTimeout = 10 * time.Second
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.StreamBuffer == 0 {
		cfg.StreamBuffer = 256
	}
	for _, h := range cfg.AllowedHosts {
		if h == "" {
			return nil, errors.New("inspector: Config.AllowedHosts has an empty name")
		}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	s := &Server{cfg: cfg, hub: newHub(cfg.StreamBuffer)}
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handler.ServeHTTP(w, r)
}

// Publish sends c to every live subscriber. It never blocks: a subscriber
// whose buffer is full is disconnected, and its page reloads what it missed
// when it reconnects.
func (s *Server) Publish(c devhook.Change) {
	s.hub.publish(c)
}

// Subscribers returns how many live event streams are open.
func (s *Server) Subscribers() int {
	return s.hub.subscribers()
}

// WaitSubscribers returns once n live event streams are open (a page
// connected, or one went away), or with an error when ctx ends first.
func (s *Server) WaitSubscribers(ctx context.Context, n int) error {
	return s.hub.wait(ctx, n)
}

// Close ends every live event stream and refuses new ones, so that
// http.Server.Shutdown can finish. Other requests are still served.
func (s *Server) Close() error {
	s.hub.close()
	return nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/deliveries", s.handleList)
	mux.HandleFunc("GET /api/deliveries/{id}", s.handleDelivery)
	mux.HandleFunc("GET /api/deliveries/{id}/body", s.handleRequestBody)
	mux.HandleFunc("GET /api/deliveries/{id}/attempts/{seq}/body", s.handleAttemptBody)
	mux.HandleFunc("GET /api/deliveries/{id}/curl", s.handleCurl)
	mux.HandleFunc("GET /api/deliveries/{id}/request", s.handleRawRequest)
	mux.HandleFunc("POST /api/deliveries/{id}/replay", s.handleReplay)
	mux.HandleFunc("DELETE /api/deliveries/{id}", s.handleDeleteOne)
	mux.HandleFunc("DELETE /api/deliveries", s.handleDeleteMany)
	mux.HandleFunc("GET /api/runs", s.handleRuns)
	mux.HandleFunc("GET /api/runs/{run_id}", s.handleRun)
	mux.HandleFunc("GET /api/scenario", s.handleScenario)
	mux.HandleFunc("GET /api/settings", s.handleSettings)
	mux.HandleFunc("GET /api/status", s.handleStatus)
	mux.HandleFunc("GET /api/events", s.handleEvents)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, devhook.Errorf(devhook.ENOTFOUND, "no API endpoint %s %s", r.Method, r.URL.Path))
	})
	mux.Handle("/", s.assets())

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.cfg.Logf("inspector: refused a cross-origin %s %s from %q", r.Method, r.URL.Path, r.Header.Get("Origin"))
		writeJSON(w, http.StatusForbidden, errorBody{Error: "cross-origin request refused: use the inspector page itself"})
	}))
	return s.checkHost(securityHeaders(cop.Handler(mux)))
}
