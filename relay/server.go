// Package relay is devhook's public relay server: it takes deliveries at
// a public URL (its own IngressListener reads them), streams them to the
// channel's agent over a WebSocket in the protocol of package wire, passes
// the agent's answer back, and queues what no agent can take (a Store:
// boltrelay on one machine, natsrelay for a cluster) until one does.
//
// # Ingress
//
// A delivery's answer to its sender:
//
//	the agent's status   the agent answered (an agent that cannot frame the
//	                     receiver's answer sends 502 at once)
//	202                  no agent, or it went away before answering, or a
//	                     run.status delivery while the channel's queue holds
//	                     deliveries not yet sent to the agent (drain.go): the
//	                     delivery is on disk (synced) and will be delivered
//	400                  a path with a dot segment (devhook.HasDotSegment), or
//	                     framing that is ambiguous (IngressListener: both
//	                     Content-Length and Transfer-Encoding, bare LF, obs-fold,
//	                     ...): nothing was kept; the connection is closed
//	404                  unknown channel
//	408                  the body did not arrive within BodyTimeout (default 30 s),
//	                     or it stalled (no byte for BodyStall, 5 s) or crawled
//	                     (under BodyMinRate over a BodyRateWindow): nothing was
//	                     kept, its bytes freed at once
//	413                  body over MaxBody (default 10 MiB): declared, at once;
//	                     chunked, as soon as it passes it
//	429 + Retry-After    the channel holds MaxChannelInflight body bytes already,
//	                     counted as they arrived
//	                     (default 32 MiB): nothing was kept, send again later
//	431                  method, path, query, remote address and headers would
//	                     make a deliver frame header over wire.MaxHeaderSize (1 MiB),
//	                     as wire.FrameHeaderLen computes it: nothing was kept
//	503 + Retry-After    the relay holds MaxInflight body bytes (default 128 MiB),
//	                     or the queue could not be written: nothing was kept
//	504                  the agent has the delivery but did not answer within
//	                     ResponseTimeout (default 30 s)
package relay

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// Defaults of Config.
const (
	DefaultResponseTimeout    = 30 * time.Second
	DefaultWindow             = 64
	DefaultBodyTimeout        = 30 * time.Second
	DefaultBodyStall          = 5 * time.Second
	DefaultBodyMinRate        = 16 << 10 // bytes per second
	DefaultBodyRateWindow     = 5 * time.Second
	DefaultMaxChannelInflight = 32 << 20
	DefaultMaxInflight        = 128 << 20
)

// RetryAfter is the Retry-After of a delivery refused for load (429, 503).
const RetryAfter = time.Second

// Config configures a Server. Zero values mean defaults.
type Config struct {
	Store Store // required
	// Router finds the agent holding a channel. Default: a new Hub, for a
	// relay that is a single process.
	Router Router
	// PublicURL is the base URL senders reach the relay at, such as
	// https://relay.example.com. Empty: derived from each request's Host.
	PublicURL string
	// MaxBody bounds a delivery's body; larger ones get 413.
	MaxBody int64
	// BodyTimeout bounds the reading of a delivery's body, from the end of
	// its headers. A sender slower than that gets 408 and its connection
	// is closed.
	BodyTimeout time.Duration
	// BodyStall: a body from which no byte arrives for this long gets
	// 408, its connection is closed and the bytes it held are given back
	// (budget.go, bodyPace). Default DefaultBodyStall; negative: none.
	BodyStall time.Duration
	// BodyMinRate is the rate, in bytes per second, a body must keep
	// after its first BodyRateWindow, measured over each BodyRateWindow
	// that follows: one that brings less gets 408 as a stalled body does.
	// Default DefaultBodyMinRate; negative: none.
	BodyMinRate int64
	// BodyRateWindow is the window BodyMinRate is measured over, and the
	// grace a body has before it is. Default DefaultBodyRateWindow.
	BodyRateWindow time.Duration
	// MaxChannelInflight bounds the body bytes of one channel's deliveries
	// the relay holds at once (being read, or waiting for the agent's
	// answer): beyond it, senders get 429 with Retry-After. A body counts
	// by the bytes that arrived, never by its Content-Length (budget.go).
	// Default: DefaultMaxChannelInflight, or MaxBody if larger. It may not
	// be below MaxBody.
	MaxChannelInflight int64
	// MaxInflight is the same bound over all channels: beyond it, 503
	// with Retry-After. Default: DefaultMaxInflight, or MaxChannelInflight
	// if larger. It may not be below MaxChannelInflight.
	MaxInflight int64
	// ResponseTimeout is how long a sender waits for the agent's answer
	// before it gets 504.
	ResponseTimeout time.Duration
	// PingInterval is the heartbeat period.
	PingInterval time.Duration
	// Window bounds the queued deliveries in flight to one agent, sent
	// and not yet acknowledged; as many more, acknowledged, may wait for
	// their removal from the store (drain.go).
	Window int
	// OpenToken, when set, is required (as a bearer token) to open a
	// channel. At least MinOpenToken bytes.
	OpenToken string
	// ChannelIdle: a channel no agent opened for this long is removed
	// with its queue (by a Store that is a Sweeper). Default
	// DefaultChannelIdle.
	ChannelIdle time.Duration
	// SweepInterval is how often expired deliveries are dropped and idle
	// channels looked for (see sweep.go). Default DefaultSweepInterval.
	SweepInterval time.Duration
	// PrivateMetrics: /metrics is not served by the Server's handler, only
	// by Metrics (on an address of its own).
	PrivateMetrics bool
	Now            func() time.Time
	Logf           func(format string, args ...any)
}

// Server is a relay. It is an http.Handler; Close disconnects agents.
type Server struct {
	cfg      Config
	router   Router
	upgrader websocket.Upgrader
	budget   budget
	metrics  *metrics
	known    sync.Map  // id of a channel known to exist → when it was read (knownFor)
	waiters  sync.Pool // *answerWait not in use (agentConn.Deliver)
	touched  sync.Map  // channel id → when this Server last marked it opened

	sweepMu   sync.Mutex // one Sweep at a time
	sw        sweepState // under sweepMu (sweep.go)
	storeLog  logEvery   // a store call a request made that failed
	sweepStop chan struct{}
	sweepDone chan struct{}
	sweepOnce sync.Once
	fullLog   logEvery // refusals for a full queue or disk

	wg sync.WaitGroup // every connection's goroutines

	mu     sync.Mutex
	conns  map[*agentConn]struct{}
	closed bool
}

// NewServer validates cfg and returns a relay.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("relay: Config.Store is required")
	}
	if cfg.PublicURL != "" {
		if !strings.HasPrefix(cfg.PublicURL, "http://") && !strings.HasPrefix(cfg.PublicURL, "https://") {
			return nil, fmt.Errorf("relay: public URL %q must start with http:// or https://", cfg.PublicURL)
		}
		cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = wire.DefaultMaxBody
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.BodyStall == 0 {
		cfg.BodyStall = DefaultBodyStall
	}
	if cfg.BodyMinRate == 0 {
		cfg.BodyMinRate = DefaultBodyMinRate
	}
	if cfg.BodyRateWindow <= 0 {
		cfg.BodyRateWindow = DefaultBodyRateWindow
	}
	switch {
	case cfg.MaxChannelInflight <= 0:
		cfg.MaxChannelInflight = max(DefaultMaxChannelInflight, cfg.MaxBody)
	case cfg.MaxChannelInflight < cfg.MaxBody:
		return nil, fmt.Errorf("relay: the in-flight bytes of a channel (%d) must be at least the largest body (%d)", cfg.MaxChannelInflight, cfg.MaxBody)
	}
	switch {
	case cfg.MaxInflight <= 0:
		cfg.MaxInflight = max(DefaultMaxInflight, cfg.MaxChannelInflight)
	case cfg.MaxInflight < cfg.MaxChannelInflight:
		return nil, fmt.Errorf("relay: the in-flight bytes of all channels (%d) must be at least those of one channel (%d)", cfg.MaxInflight, cfg.MaxChannelInflight)
	}
	if cfg.ResponseTimeout <= 0 {
		cfg.ResponseTimeout = DefaultResponseTimeout
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = wire.DefaultPingInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := checkOpenToken(cfg.OpenToken); err != nil {
		return nil, err
	}
	if cfg.ChannelIdle <= 0 {
		cfg.ChannelIdle = DefaultChannelIdle
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	router := cfg.Router
	if router == nil {
		router = NewHub()
	}
	s := &Server{
		cfg:    cfg,
		router: router,
		budget: budget{maxChannel: cfg.MaxChannelInflight, maxTotal: cfg.MaxInflight, channels: make(map[string]int64)},
		conns:  make(map[*agentConn]struct{}),
		upgrader: websocket.Upgrader{
			// Reads reuse the HTTP server's buffer; write buffers come from
			// a pool and are held only during a write, so an idle agent
			// costs little more than its socket, one goroutine and a timer.
			WriteBufferSize: 32 << 10, WriteBufferPool: &sync.Pool{},
			// Agents are programs, not pages: no Origin to check.
			CheckOrigin: func(*http.Request) bool { return true },
		},
	}
	s.metrics = newMetrics(s)
	s.sweepStop, s.sweepDone = make(chan struct{}), make(chan struct{})
	s.startSweeper()
	return s, nil
}

// Close disconnects every agent and waits for the connections' goroutines.
// Senders still waiting get their delivery queued (202).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := make([]*agentConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.closeWith(websocket.CloseGoingAway, "relay closing")
	}
	s.wg.Wait()
	s.stopSweeper()
	return nil
}

// ServeHTTP routes the relay's endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if handedOver(r) {
		// The IngressListener read this request's header and handed its
		// connection over: the next one is to be read by it too (ingress.go).
		w.Header().Set("Connection", "close")
	}
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/c/"):
		s.observeIngress(w, r)
	case p == "/v1/channels":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			httpError(w, http.StatusMethodNotAllowed, "use POST to open a channel")
			return
		}
		s.serveOpen(w, r)
	case strings.HasPrefix(p, "/v1/channels/") && strings.HasSuffix(p, "/connect"):
		s.serveConnect(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/v1/channels/"), "/connect"))
	case strings.HasPrefix(p, "/v1/channels/") && !strings.Contains(p[len("/v1/channels/"):], "/"):
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			httpError(w, http.StatusMethodNotAllowed, "use GET to check a channel")
			return
		}
		s.serveCheck(w, r, strings.TrimPrefix(p, "/v1/channels/"))
	case p == "/healthz":
		s.serveHealth(w)
	case p == "/metrics" && !s.cfg.PrivateMetrics:
		s.metrics.handler.ServeHTTP(w, r)
	default:
		httpError(w, http.StatusNotFound, "no such endpoint; deliveries go to /c/<channel>/...")
	}
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set(devhook.AnswerHeader, "relay")
	w.WriteHeader(code)
	io.WriteString(w, "devhook relay: "+msg+"\n")
}
