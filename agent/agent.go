// Package agent is devhook's listen loop: it receives deliveries from the
// relay, verifies their signature, records them, forwards them byte-exact to
// the local receiver, passes the receiver's answer back and acknowledges.
//
// For each delivery, in this order, on the goroutine that read it from
// the relay:
//
//	receive → verify → record → order → forward → owe → answer (and ack)
//
// The ack comes only after the delivery is recorded, so the relay keeps a
// delivery until it is on disk here. A delivery that arrives again (same id)
// and already has an attempt is answered from the record, not forwarded twice.
//
// A delivery that cannot be recorded (a full disk) is not forwarded: a live
// one is answered 503, so that whatever a sender saw answered 200 is on
// disk; a queued one is held in memory and its record retried until it
// succeeds, then handled and acknowledged, so that the relay's queue moves
// again by itself once there is room. See queued.go.
//
// A queued delivery whose forward got no answer, or 408, 429 or 5xx, is
// owed to the receiver: its retry state is recorded, the relay is
// acknowledged, and the agent retries it with backoff until the receiver
// takes it or Config.RetryFor has passed, when it gives up loudly. See
// owe.go and retry.go.
//
// The files: agent.go (the Agent, Config, Result, Health), which the
// others use, then from the top down, each using only files below it; the
// stages of a delivery's path, from verify.go to acks.go, come in the
// order it meets them. agent.go uses owed.go, route.go, target.go,
// health.go and, the one reference that runs back up, httpclient.go, whose
// connection pool the Agent holds:
//
//	conn.go        Run; the connection to the relay: dial, reconnect, backoff
//	workers.go     receive: one connection's deliveries, each run on the worker that read it
//	retry.go       retries of the deliveries owed to the receiver
//	replay.go      Agent.Replay
//	live.go        a delivery's path, top to bottom: the stages below, in turn
//	verify.go      verify: the signature
//	record.go      record: on disk first; a duplicate answered from the record
//	order.go       order: a run's deliveries one after the other, in the order they came
//	forward.go     forward: to the receivers, each attempt recorded; the HTTP request
//	httpclient.go  the agent's own HTTP/1.1 client, for plain-http receivers
//	request.go     what both clients share: the header as sent, the answer as recorded
//	owe.go         owe: a queued delivery the receiver did not take
//	queued.go      what differs for a queued one: a write that fails is held
//	acks.go        answer: what goes back to the relay, and the ack
//	late.go        a live delivery's answer too late for the relay: the agent's own 504
//	owed.go        the table of the owed deliveries
//	routefile.go   a file of routes; route.go: routes (listen --route)
//	replay_edit.go a replay's header edit
//	target.go      a receiver's address
//	health.go      whether recording works
package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// Store is what the agent records into. storage.DB implements it.
type Store interface {
	PutDelivery(d *devhook.Delivery) (created bool, err error)
	AddAttempt(id string, a devhook.Attempt) (devhook.Attempt, error)
	Delivery(id string) (*devhook.Delivery, error)

	// PutRetry, DeleteRetry and Retries keep the retry state of the
	// deliveries the agent owes the receiver; AllRetries returns every
	// one, for Run to resume.
	PutRetry(id string, st devhook.RetryState) error
	DeleteRetry(id string) error
	Retries(ids []string) (map[string]devhook.RetryState, error)
	AllRetries() (ids []string, states []devhook.RetryState, err error)
}

// Verification modes.
const (
	VerifyReport  = "report"  // check and record the verdict, forward anyway
	VerifyEnforce = "enforce" // answer a failing delivery as the reference receiver would; do not forward
	VerifyOff     = "off"     // do not check
)

// Defaults of Config.
const (
	DefaultConcurrency    = 64
	DefaultForwardTimeout = 30 * time.Second
	DefaultMaxResponse    = wire.MaxAnswerBody
	DefaultMinBackoff     = 250 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	// DefaultRetryFor is how long a queued delivery whose forward failed
	// is retried before the agent gives up on it.
	DefaultRetryFor        = time.Hour
	DefaultRetryMinBackoff = time.Second
	DefaultRetryMaxBackoff = time.Minute
	// RetryAfter is the Retry-After, in seconds, of the 503 a sender gets
	// when devhook cannot record its delivery.
	RetryAfter = 30
	// ShutdownGrace is how long deliveries under way may take to finish
	// once the agent is told to stop.
	ShutdownGrace = 5 * time.Second
)

// Config configures an Agent. Zero values mean defaults.
type Config struct {
	// Relay and Credentials say where to connect. Both may be empty for an
	// agent that only replays.
	RelayURL    string
	Credentials wire.Credentials
	// RelayFallbacks are other URLs of the same relay cluster (instances
	// sharing channels through NATS). When the relay in use cannot be
	// reached, Run tries the next one at once, and backs off only after
	// every one failed.
	RelayFallbacks []string
	// RelayNetwork says how to reach the relay: the proxy (default: the
	// environment's), a private CA. Open and Check of the channel should
	// use its HTTPClient.
	RelayNetwork relayclient.Network
	// Forward lists receiver URLs; the first one's answer goes back to the
	// sender, the others get a copy.
	Forward []string
	// Routes send the deliveries they match elsewhere (route.go): tried
	// in order, the first that matches chooses the target; a delivery
	// none matches goes to Forward.
	Routes []Route
	Store  Store // required

	Secret string // signing secret; SetSecret changes it later
	Verify string // report (default), enforce or off
	Skew   time.Duration

	// Header is added to every forward and replay, replacing a header of
	// the same name (listen --header); each attempt then records the
	// request as sent.
	Header http.Header
	// TLS configures connections to https receivers (listen --forward-ca,
	// --forward-insecure); nil means the system's roots. Used only when
	// Client is nil.
	TLS *tls.Config

	Concurrency    int           // deliveries forwarded at once
	ForwardTimeout time.Duration // per forward
	MaxResponse    int64         // receiver answers larger than this are cut and flagged
	Client         *http.Client  // nil: a client that follows no redirects and keeps connections
	MinBackoff     time.Duration // reconnecting, and retrying a record that failed
	MaxBackoff     time.Duration
	// HealthyAfter is how long a connection to the relay must live to
	// hold: one that held is redialled at once when it is lost, and the
	// backoff starts again from MinBackoff; one that ends sooner is a
	// failed try, redialled after the backoff (conn.go). Default: the
	// heartbeat period the relay announces, between 1 s and 5 s.
	HealthyAfter time.Duration

	// RetryFor is how long a queued delivery whose forward got no answer,
	// or 408, 429 or 5xx, is retried; then the agent gives up on it.
	// 0 means DefaultRetryFor; negative means no retries: such a delivery
	// is given up at once.
	RetryFor time.Duration
	// RetryMinBackoff and RetryMaxBackoff bound the wait between two
	// retries of one delivery: it doubles from the first to the second,
	// with jitter. Defaults: 1s and 1min. While the receiver refuses
	// connections, its port is probed every second (at most
	// RetryMaxBackoff), and every delivery waiting for it is retried as
	// soon as it accepts one.
	RetryMinBackoff time.Duration
	RetryMaxBackoff time.Duration

	Now func() time.Time
	// Rand returns a number in [0, n), for jitter; nil means math/rand/v2.
	Rand func(n int64) int64
	// OnChange is called after each record, for live views, and when the
	// agent's Health changes (a devhook.ChangeHealth). It must not block.
	OnChange func(devhook.Change)
	// OnResult is called once per delivery handled from the relay, and
	// once more for a delivery owed to the receiver when a retry delivers
	// it (Retry > 0, or Followed) or the agent gives up on it (GaveUp), and once per
	// replay (Replay).
	OnResult func(Result)
	// OnConnect is called each time a connection to the relay is up.
	OnConnect func(Connection)
	Logf      func(format string, args ...any)
}

// Result is what happened to one delivery, for output.
type Result struct {
	Delivery  *devhook.Delivery // without attempts
	Attempt   *devhook.Attempt  // nil when not forwarded
	Status    int               // answered to the sender
	Duplicate bool              // already recorded and forwarded before
	Rejected  bool              // not forwarded: the signature check failed (--verify enforce)
	Error     string            // what went wrong in devhook itself, if anything
	// Copies are the recorded attempts of the other --forward targets
	// (those after the first), when there are any.
	Copies []*devhook.Attempt
	// Cut: the connection to the relay closed (devhook stopping, or the
	// relay gone) before the answer or the ack reached it. The relay
	// keeps the delivery and sends it again on the next connection; its
	// sender got 202 (queued) rather than Status.
	Cut bool

	// Owed: the receiver did not take this queued delivery; the agent
	// retries it for up to Config.RetryFor.
	Owed bool
	// Behind (with Owed): not forwarded, because an earlier delivery of
	// its run is owed to the receiver; it follows that one (order.go).
	Behind bool
	// Retry is set on the result of a retry that delivered an owed
	// delivery: how many retries it took.
	Retry int
	// Followed: the first try of a delivery that was owed behind an
	// earlier one of its run (Behind) delivered it, after that one; Since
	// is when it was put behind. It was never tried before: Retry is 0.
	Followed bool
	// GaveUp: the agent stopped retrying; Error says why ("gave up after
	// N attempts over 1h: ...").
	GaveUp bool
	// Since is when the first forward of an owed delivery failed (with
	// Retry and GaveUp), or when it was put behind an earlier one of its
	// run (with Followed, and GaveUp for one never tried).
	Since time.Time
	// Replay: Attempt is a replay (Agent.Replay), asked for from the
	// inspector or devhook replay.
	Replay bool
}

// Connection is a connection to the relay that just opened, for output.
type Connection struct {
	PublicURL string
	// Queued is how many deliveries waited in the relay's queue; they
	// follow now. 0 from a relay that does not say.
	Queued int
	// Reconnect: an earlier connection of this Run was lost, Down ago.
	Reconnect bool
	Down      time.Duration
	// Fails is how many tries to connect failed before this one (since
	// the last connection opened, or Run started), from the first of them
	// Failing ago; Unsaid: some of them were counted, not said in full.
	// The agent logs no count of its own when OnConnect is set: its
	// caller says it.
	Fails   int
	Failing time.Duration
	Unsaid  bool
	// Unrecordable is how long, over the same time, the agent waited for
	// the store to take writes (a full disk) before it dialled the relay.
	Unrecordable time.Duration
}

// Agent forwards and records deliveries.
type Agent struct {
	cfg     Config
	targets []*url.URL
	routes  *Router // nil without routes
	client  *http.Client
	conns   connPool // kept-alive connections of the agent's own client (httpclient.go)

	secretMu sync.RWMutex
	secret   string

	health     health        // see health.go
	unrecorded unrecordedLog // the attempts not recorded, said once and counted: health.go
	gate       storeGate     // where the writes held for a full disk wait: queued.go
	owed       retrier       // see retry.go

	// The forwards under way to each receiver, within their shares
	// (shares.go): of the workers' and of the retrier's.
	shares, retryShares *shares

	// slots is the current connection's semaphore of deliveries under
	// way: its length is InFlight. Set once per connection.
	slots atomic.Pointer[chan struct{}]
}

// New validates cfg and returns an agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Store == nil {
		return nil, errors.New("agent: Config.Store is required")
	}
	switch cfg.Verify {
	case "":
		cfg.Verify = VerifyReport
	case VerifyReport, VerifyEnforce, VerifyOff:
	default:
		return nil, fmt.Errorf("agent: the signature check (Config.Verify) must be report, enforce or off, not %q", cfg.Verify)
	}
	a := &Agent{cfg: cfg, secret: cfg.Secret}
	for _, f := range cfg.Forward {
		u, err := ParseTarget(f)
		if err != nil {
			return nil, fmt.Errorf("agent: forward target: %w", err)
		}
		a.targets = append(a.targets, u)
	}
	a.routes = NewRouter(cfg.Routes)
	if a.cfg.Concurrency <= 0 {
		a.cfg.Concurrency = DefaultConcurrency
	}
	receivers := receiverCount(append(slices.Clip(a.targets), a.routes.targets()...))
	a.shares, a.retryShares = newShares(receivers, a.cfg.Concurrency), newShares(receivers, retryConcurrency)
	if a.cfg.ForwardTimeout <= 0 {
		a.cfg.ForwardTimeout = DefaultForwardTimeout
	}
	if a.cfg.MaxResponse <= 0 {
		a.cfg.MaxResponse = DefaultMaxResponse
	}
	if a.cfg.MinBackoff <= 0 {
		a.cfg.MinBackoff = DefaultMinBackoff
	}
	if a.cfg.MaxBackoff <= 0 {
		a.cfg.MaxBackoff = DefaultMaxBackoff
	}
	if a.cfg.RetryFor == 0 {
		a.cfg.RetryFor = DefaultRetryFor
	}
	if a.cfg.RetryMinBackoff <= 0 {
		a.cfg.RetryMinBackoff = DefaultRetryMinBackoff
	}
	if a.cfg.RetryMaxBackoff <= 0 {
		a.cfg.RetryMaxBackoff = DefaultRetryMaxBackoff
	}
	a.cfg.RetryMaxBackoff = max(a.cfg.RetryMaxBackoff, a.cfg.RetryMinBackoff)
	if a.cfg.Rand == nil {
		a.cfg.Rand = rand.Int64N
	}
	a.owed.init()
	if a.cfg.Now == nil {
		a.cfg.Now = time.Now
	}
	if a.cfg.Logf == nil {
		a.cfg.Logf = func(string, ...any) {}
	}
	a.health.now, a.health.logf, a.health.changed = a.cfg.Now, a.cfg.Logf, a.publishHealth
	a.unrecorded.now, a.unrecorded.logf = a.cfg.Now, a.cfg.Logf
	a.client = cfg.Client
	if a.client == nil {
		a.client = NewClient(a.cfg.Concurrency, a.cfg.TLS)
	}
	return a, nil
}

// NewClient returns the HTTP client the agent forwards with: no redirects
// followed, no transparent decompression, connections kept for reuse.
// tlsConfig, when not nil, configures https receivers.
func NewClient(conns int, tlsConfig *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tlsConfig != nil {
		tr.TLSClientConfig = tlsConfig.Clone()
	}
	tr.DisableCompression = true
	tr.MaxIdleConns = conns * 2
	tr.MaxIdleConnsPerHost = conns
	tr.Proxy = nil // the receiver is local; a proxy setting must not reroute it
	return &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     tr,
	}
}

// SetSecret sets the signing secret; it may arrive after start-up.
func (a *Agent) SetSecret(s string) {
	a.secretMu.Lock()
	a.secret = s
	a.secretMu.Unlock()
}

// SecretKnown reports whether a signing secret is set.
func (a *Agent) SecretKnown() bool { return a.getSecret() != "" }

func (a *Agent) getSecret() string {
	a.secretMu.RLock()
	defer a.secretMu.RUnlock()
	return a.secret
}

// Targets returns the forward targets as URLs.
func (a *Agent) Targets() []string {
	out := make([]string, len(a.targets))
	for i, t := range a.targets {
		out[i] = t.String()
	}
	return out
}

// Routes returns the routes, in order: what each records with the
// deliveries it takes.
func (a *Agent) Routes() []devhook.Route {
	if a.routes == nil {
		return nil
	}
	return slices.Clone(a.routes.refs)
}

// routeOf returns the route that takes d, and sets d.Route to it; nil
// when the agent has no routes. A delivery's route is chosen once, as it
// arrives.
func (a *Agent) routeOf(d *devhook.Delivery) *devhook.Route {
	if a.routes == nil {
		return nil
	}
	if d.Route == nil {
		d.Route = a.routes.match(request{path: d.Path, header: d.Header, body: d.Body})
	}
	return d.Route
}

// targetsOf returns the targets of route rt: the route's own receiver, or
// the Forward targets for the default route, no route, or a route this
// agent does not have (recorded by an earlier listen), whose recorded
// target is parsed again.
func (a *Agent) targetsOf(rt *devhook.Route) []*url.URL {
	if rt == nil || rt.Index == 0 || rt.Target == "" || rt.Drop() {
		return a.targets
	}
	if r := a.routes.route(rt); r != nil {
		return r.targets
	}
	if u, err := ParseTarget(rt.Target); err == nil {
		return []*url.URL{u}
	}
	return a.targets
}

// Health returns whether recording works and how many deliveries are
// held, owed and given up.
func (a *Agent) Health() devhook.Health {
	h := a.health.state()
	h.Owed, h.Failed = a.owed.counts()
	return h
}

// publishHealth tells live views the agent's Health.
func (a *Agent) publishHealth() {
	if a.cfg.OnChange == nil {
		return
	}
	h := a.Health()
	a.cfg.OnChange(devhook.Change{Kind: devhook.ChangeHealth, Health: &h})
}

func (a *Agent) publish(c devhook.Change) {
	if a.cfg.OnChange != nil {
		a.cfg.OnChange(c)
	}
}

// jitter returns a random wait between d/2 and 3d/2.
func (a *Agent) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(a.cfg.Rand(int64(d))) + d/2
}
