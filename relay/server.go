package relay

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/devhook/devhook"
)

// Defaults of Config.
const (
	DefaultMaxBody            = 10 << 20
	DefaultResponseTimeout    = 30 * time.Second
	DefaultPingInterval       = 15 * time.Second
	DefaultWindow             = 64
	DefaultBodyTimeout        = 30 * time.Second
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
	// MaxChannelInflight bounds the body bytes of one channel's deliveries
	// the relay holds at once (being read, or waiting for the agent's
	// answer): beyond it, senders get 429 with Retry-After. A body counts
	// by its Content-Length from the start, or as it arrives when chunked.
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
	// Window bounds the queued deliveries in flight to one agent.
	Window int
	// OpenToken, when set, is required (as a bearer token) to open a channel.
	OpenToken string
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
	known    sync.Map // ids of channels known to exist; channels are never removed

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
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
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
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
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
	return nil
}

// ServeHTTP routes the relay's endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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

// OpenChannel creates a channel and returns its credentials. r, when not
// nil, supplies the Host for the public URL.
func (s *Server) OpenChannel(r *http.Request) (Credentials, error) {
	var id [16]byte
	var tok [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Credentials{}, fmt.Errorf("open channel: %w", err)
	}
	if _, err := rand.Read(tok[:]); err != nil {
		return Credentials{}, fmt.Errorf("open channel: %w", err)
	}
	cr := Credentials{Channel: hex.EncodeToString(id[:]), Token: base64.RawURLEncoding.EncodeToString(tok[:])}
	sum := sha256.Sum256([]byte(cr.Token))
	if err := s.cfg.Store.PutChannel(Channel{ID: cr.Channel, TokenHash: sum[:], CreatedAt: s.cfg.Now().UTC()}); err != nil {
		return Credentials{}, fmt.Errorf("open channel: %w", err)
	}
	s.known.Store(cr.Channel, struct{}{})
	cr.PublicURL = s.PublicURL(r, cr.Channel)
	return cr, nil
}

// PublicURL is the URL senders use for channel.
func (s *Server) PublicURL(r *http.Request, channel string) string {
	base := s.cfg.PublicURL
	if base == "" && r != nil {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	return base + "/c/" + channel
}

func (s *Server) serveOpen(w http.ResponseWriter, r *http.Request) {
	if s.cfg.OpenToken != "" && !tokenEqual(bearer(r), s.cfg.OpenToken) {
		httpError(w, http.StatusUnauthorized, "this relay requires a token to open channels (Authorization: Bearer <token>)")
		return
	}
	cr, err := s.OpenChannel(r)
	if err != nil {
		s.cfg.Logf("relay: %v", err)
		httpError(w, http.StatusInternalServerError, "could not open a channel")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(cr)
}

// serveCheck tells an agent whether its saved credentials are still good,
// without connecting: a connection would take the channel over.
func (s *Server) serveCheck(w http.ResponseWriter, r *http.Request, channel string) {
	if code, msg := s.authorize(channel, bearer(r)); code != 0 {
		httpError(w, code, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(Credentials{Channel: channel, PublicURL: s.PublicURL(r, channel)})
}

// authorize checks the agent token of channel.
func (s *Server) authorize(channel, token string) (int, string) {
	ch, err := s.cfg.Store.Channel(channel)
	if devhook.ErrorCode(err) == devhook.ENOTFOUND {
		return http.StatusNotFound, "unknown channel " + channel + "; open a new one"
	} else if err != nil {
		s.cfg.Logf("relay: read channel %s: %v", channel, err)
		return http.StatusInternalServerError, "could not read the channel"
	}
	sum := sha256.Sum256([]byte(token))
	if token == "" || subtle.ConstantTimeCompare(sum[:], ch.TokenHash) != 1 {
		return http.StatusUnauthorized, "wrong agent token for channel " + channel
	}
	return 0, ""
}

// channelExists answers 0 when channel exists, or the status and message
// to refuse a delivery with.
func (s *Server) channelExists(channel string) (int, string) {
	if _, ok := s.known.Load(channel); ok {
		return 0, ""
	}
	_, err := s.cfg.Store.Channel(channel)
	if devhook.ErrorCode(err) == devhook.ENOTFOUND {
		return http.StatusNotFound, "unknown channel " + channel
	} else if err != nil {
		s.cfg.Logf("relay: read channel %s: %v", channel, err)
		return http.StatusInternalServerError, "could not read the channel"
	}
	s.known.Store(channel, struct{}{})
	return 0, ""
}

// serveConnect takes an agent's WebSocket. The newest agent of a channel
// holds it: one that was connected is closed with CloseReplaced.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request, channel string) {
	if code, msg := s.authorize(channel, bearer(r)); code != 0 {
		httpError(w, code, msg)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	ws.SetReadLimit(s.cfg.MaxBody + MaxHeaderSize + 4)
	c := &agentConn{
		s: s, ws: ws, channel: channel,
		pending:  make(map[string]chan *Answer),
		inflight: make(map[string]bool),
		acked:    make(map[string]bool),
		done:     make(chan struct{}),
	}
	c.out = newWSWriter(ws, s.cfg.ResponseTimeout, c.close) // close takes no lock a writer holds
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	// The agent holds the channel once it has its hello, and the hello is
	// the first frame: deliveries routed to it meanwhile wait for the lock.
	hh := &Header{Type: TypeHello, Channel: channel, PublicURL: s.PublicURL(r, channel)}
	if qc, ok := s.cfg.Store.(QueueCounter); ok {
		if n, err := qc.QueueLen(channel); err == nil {
			hh.Status = n
		}
	}
	hello, _ := AppendFrame(nil, hh, nil)
	c.out.hold()
	s.router.Attach(channel, c)
	c.out.writeNow(hello, nil)
	c.out.release()
	if c.isGone() {
		s.router.Detach(channel, c) // closed before it was attached
	}
	c.startPing()
	c.kickDrain()
	go func() { defer s.wg.Done(); c.readLoop() }()
}

func (s *Server) serveIngress(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/c/")
	channel, suffix, _ := strings.Cut(rest, "/")
	suffix = "/" + suffix
	if channel == "" {
		httpError(w, http.StatusNotFound, "no channel in the path; deliveries go to /c/<channel>/...")
		return
	}
	if code, msg := s.channelExists(channel); code != 0 {
		httpError(w, code, msg)
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "could not make a delivery id")
		return
	}
	d := &devhook.Delivery{
		ID: id.String(), Channel: channel, ReceivedAt: s.cfg.Now().UTC(), Method: r.Method,
		Path: suffix, RawQuery: r.URL.RawQuery, Header: endToEndShared(r.Header), RemoteAddr: r.RemoteAddr,
		Queued: true, // the larger of its two frame headers
	}
	// Refuse what could never be framed, before reading the body.
	if n := frameHeaderLen(deliverHeader(d)); n > MaxHeaderSize {
		refuse(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf(
			"the request's method, path, query and headers take %d bytes in the relay's frame, over its limit of %d; send smaller headers", n, MaxHeaderSize))
		return
	}
	if r.ContentLength > s.cfg.MaxBody {
		refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes is over the relay's limit of %d bytes", r.ContentLength, s.cfg.MaxBody))
		return
	}
	body, release, code, msg := s.readBody(w, r, channel)
	defer release()
	if code != 0 {
		refuse(w, code, msg)
		return
	}
	d.Body, d.Queued = body, false
	w.Header().Set("Devhook-Delivery", d.ID)
	ans, err := s.router.Deliver(r.Context(), d)
	switch {
	case err == nil:
		answeredByAgent(w)
		h := w.Header()
		for k, v := range endToEndShared(ans.Header) {
			h[k] = v
		}
		h.Del("Content-Length")
		if _, ok := h["Content-Type"]; !ok {
			// The receiver's answer had none: net/http would guess one
			// from the body, and the sender would see a header the
			// receiver never sent.
			h["Content-Type"] = nil
		}
		w.WriteHeader(ans.Status)
		w.Write(ans.Body)
		return
	case errors.Is(err, ErrTimeout):
		httpError(w, http.StatusGatewayTimeout, fmt.Sprintf("the devhook agent did not answer within %s", s.cfg.ResponseTimeout))
		return
	case r.Context().Err() != nil:
		// The sender went away before the answer; the agent records it anyway.
		return
	case errors.Is(err, ErrHeaderTooLarge): // cannot happen after the check above
		httpError(w, http.StatusRequestHeaderFieldsTooLarge, err.Error())
		return
	case !errors.Is(err, ErrNoAgent):
		s.cfg.Logf("relay: channel %s: deliver %s: %v; queuing it", channel, d.ID, err)
	}
	// No agent, or it went away mid-delivery: keep the delivery for its return.
	s.enqueue(w, d)
}

// readBody reads r's body within MaxBody and BodyTimeout, holding in-flight
// bytes for it: its Content-Length from the start, or as it arrives when
// chunked. The buffer grows as bytes arrive, so that a sender trickling a
// large body costs what it has sent. release gives the bytes back; it must
// be called when the body is no longer used. A non-zero code is the status
// to refuse the delivery with.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, channel string) (body []byte, release func(), code int, msg string) {
	var held int64
	release = func() { s.budget.give(channel, held) }
	take := func(n int64) int {
		code := s.budget.take(channel, n)
		if code == 0 {
			held += n
		}
		return code
	}
	cl := r.ContentLength
	if cl > 0 {
		if code := take(cl); code != 0 {
			return nil, release, code, s.busy(code)
		}
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	src := http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	buf := make([]byte, 0, max(0, min(cl, 64<<10)))
	for {
		if len(buf) == cap(buf) {
			if cl >= 0 && int64(len(buf)) >= cl {
				break // the server's body reader stops at Content-Length
			}
			size := max(int64(cap(buf))*2, 64<<10)
			if cl >= 0 {
				size = min(size, cl)
			} else {
				size = min(size, s.cfg.MaxBody+1) // one more byte to see it is over
				if code := take(size - held); code != 0 {
					return nil, release, code, s.busy(code)
				}
			}
			buf = append(make([]byte, 0, size), buf...)
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &mbe):
				return nil, release, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is over the relay's limit of %d bytes", s.cfg.MaxBody)
			case errors.As(err, &ne) && ne.Timeout():
				return nil, release, http.StatusRequestTimeout, fmt.Sprintf("the body did not arrive within %s", s.cfg.BodyTimeout)
			}
			return nil, release, http.StatusBadRequest, "could not read the request body: " + err.Error()
		}
	}
	// Cleared once the body is in: a deadline left in place would cancel
	// the request's context while the sender waits for the agent.
	rc.SetReadDeadline(time.Time{})
	return buf, release, 0, ""
}

// refuse answers a delivery with an error and ends the connection without
// reading the rest of its body: net/http would otherwise wait for up to
// 256 KiB more of it, from a sender that may trickle.
func refuse(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	}
	w.Header().Set("Connection", "close")
	http.NewResponseController(w).SetReadDeadline(time.Now())
	httpError(w, code, msg)
}

func (s *Server) busy(code int) string {
	if code == http.StatusTooManyRequests {
		return fmt.Sprintf("this channel already has %d bytes of deliveries in flight; retry later", s.cfg.MaxChannelInflight)
	}
	return "the relay is busy; retry later"
}

func (s *Server) enqueue(w http.ResponseWriter, d *devhook.Delivery) {
	d.Queued = true
	if err := s.cfg.Store.Enqueue(d.Channel, d); err != nil {
		s.cfg.Logf("relay: queue delivery %s: %v", d.ID, err)
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		httpError(w, http.StatusServiceUnavailable, "no agent is connected and the delivery could not be queued; try again")
		return
	}
	// An agent may have connected after the delivery was routed.
	s.router.Kick(d.Channel)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, "{\"queued\":true,\"id\":%q}\n", d.ID)
}

// budget counts the body bytes the relay holds, per channel and in all.
type budget struct {
	maxChannel, maxTotal int64

	mu       sync.Mutex
	total    int64
	channels map[string]int64
}

// take holds n more bytes for channel, or answers the status that refuses
// them: 429 over the channel's bound, 503 over the relay's.
func (b *budget) take(channel string, n int64) int {
	if n <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.channels[channel]+n > b.maxChannel:
		return http.StatusTooManyRequests
	case b.total+n > b.maxTotal:
		return http.StatusServiceUnavailable
	}
	b.channels[channel] += n
	b.total += n
	return 0
}

func (b *budget) give(channel string, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if b.channels[channel] -= n; b.channels[channel] <= 0 {
		delete(b.channels, channel)
	}
}

// agentConn is one connected agent, an Endpoint. readLoop is the only
// reader; write serializes writers. Heartbeats come from a timer, so an
// idle agent has no goroutine but its reader.
type agentConn struct {
	s       *Server
	ws      *websocket.Conn
	channel string

	out *wsWriter // every data frame goes through it

	mu       sync.Mutex
	pending  map[string]chan *Answer // live deliveries waiting for a response
	inflight map[string]bool         // queued deliveries sent, not yet acked and dequeued
	acked    map[string]bool         // dequeued since the drain pass began: its batches may be older
	stuck    map[string]bool         // queued deliveries that could be neither sent nor parked
	gone     bool
	pinger   *time.Timer    // next heartbeat
	pings    sync.WaitGroup // a heartbeat being written

	draining   bool          // a drain goroutine runs
	drainAgain bool          // the queue may have new work since it started
	done       chan struct{} // closed when the connection ends
	closeOnce  sync.Once
}

func (c *agentConn) isGone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone
}

// closeWith ends the connection, telling the agent why.
func (c *agentConn) closeWith(code int, reason string) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.gone = true
		if c.pinger != nil {
			c.pinger.Stop()
		}
		c.mu.Unlock()
		close(c.done)
		// WriteControl may run beside a data write.
		c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
		c.ws.Close()
		c.s.router.Detach(c.channel, c)
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
}

func (c *agentConn) close() { c.closeWith(websocket.CloseGoingAway, "relay closing") }

// Replace implements Endpoint.
func (c *agentConn) Replace() {
	c.s.cfg.Logf("relay: channel %s: a new agent connected; closing the previous one", c.channel)
	c.closeWith(CloseReplaced, "replaced: another agent connected to this channel")
}

// Kick implements Endpoint.
func (c *agentConn) Kick() { c.kickDrain() }

// write sends one frame: hdr (a frame without payload, as AppendFrame
// makes it) followed by payload, without copying them together. Frames
// of concurrent callers leave together (see wsWriter); a failed write
// closes the connection.
func (c *agentConn) write(hdr, payload []byte) error {
	return c.out.write(hdr, payload)
}

// startPing arms the heartbeat timer.
func (c *agentConn) startPing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.gone {
		c.pinger = time.AfterFunc(c.s.cfg.PingInterval, c.ping)
	}
}

// ping sends a heartbeat, on the timer's goroutine: a connection slow to
// take it delays and drops only itself.
func (c *agentConn) ping() {
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return
	}
	c.pings.Add(1) // readLoop waits for it after the connection ends
	c.mu.Unlock()
	defer c.pings.Done()
	// WriteControl may run beside a data write; it waits for one in
	// progress up to the deadline.
	if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.s.cfg.PingInterval)); err != nil {
		c.s.cfg.Logf("relay: channel %s: dropping the agent: heartbeat: %v", c.channel, err)
		c.close()
		return
	}
	c.mu.Lock()
	if !c.gone {
		c.pinger.Reset(c.s.cfg.PingInterval)
	}
	c.mu.Unlock()
}

// kickDrain makes sure a drain pass runs after this call. The drain
// goroutine exists only while there is queue work.
func (c *agentConn) kickDrain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drainAgain = true
	if c.draining || c.gone {
		return
	}
	c.draining = true
	c.s.wg.Add(1)
	go func() { defer c.s.wg.Done(); c.drainLoop() }()
}

// Deliver implements Endpoint: it sends d and waits for the agent's
// response. It returns ErrNoAgent when the connection ends first.
func (c *agentConn) Deliver(ctx context.Context, d *devhook.Delivery) (*Answer, error) {
	hdr, err := AppendFrame(nil, deliverHeader(d), nil)
	if err != nil {
		return nil, err
	}
	ch := make(chan *Answer, 1)
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return nil, ErrNoAgent
	}
	c.pending[d.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, d.ID)
		c.mu.Unlock()
	}()
	if c.write(hdr, d.Body) != nil {
		return nil, ErrNoAgent
	}
	t := time.NewTimer(c.s.cfg.ResponseTimeout)
	defer t.Stop()
	select {
	case a := <-ch:
		return a, nil
	case <-t.C:
		return nil, ErrTimeout
	case <-c.done:
		return nil, ErrNoAgent
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *agentConn) readLoop() {
	defer func() {
		c.close()
		c.pings.Wait()
	}()
	wait := 2 * c.s.cfg.PingInterval
	c.ws.SetReadDeadline(time.Now().Add(wait))
	c.ws.SetPongHandler(func(string) error { return c.ws.SetReadDeadline(time.Now().Add(wait)) })
	var in msgReader
	for {
		msg, err := in.read(c.ws)
		if err != nil {
			return
		}
		c.ws.SetReadDeadline(time.Now().Add(wait))
		h, body, err := DecodeFrame(msg)
		if err != nil {
			c.s.cfg.Logf("relay: channel %s: dropping the agent: %v", c.channel, err)
			c.closeWith(websocket.CloseProtocolError, clip(err.Error()))
			return
		}
		switch h.Type {
		case TypeResponse:
			c.mu.Lock()
			ch := c.pending[h.ID]
			c.mu.Unlock()
			if ch != nil {
				status := h.Status
				if status < 100 || status > 999 {
					status = http.StatusBadGateway
				}
				select {
				case ch <- &Answer{Status: status, Header: h.Header, Body: body}:
				default:
				}
			}
		case TypeAck:
			c.mu.Lock()
			queued := c.inflight[h.ID]
			c.mu.Unlock()
			if queued {
				// The id stays in flight until its dequeue is committed:
				// a drain pass meanwhile would find it still queued and
				// send it again.
				if err := c.s.cfg.Store.Dequeue(c.channel, h.ID); err != nil {
					c.s.cfg.Logf("relay: channel %s: dequeue %s: %v", c.channel, h.ID, err)
				}
				c.s.metrics.acked.Inc()
				c.mu.Lock()
				delete(c.inflight, h.ID)
				c.acked[h.ID] = true
				c.mu.Unlock()
				c.kickDrain()
			}
		}
	}
}

// drainBatch bounds the queued deliveries (bodies included) read from the
// store at once.
const drainBatch = 8

// drainLoop sends queued deliveries, at most Window unacknowledged at once,
// for as long as it is kicked: at connect, after each ack of a queued
// delivery, after each enqueue. Whatever happens to one delivery, the
// drain state is reset when it returns.
func (c *agentConn) drainLoop() {
	for c.nextPass() {
		if !c.drainPass() {
			break // the connection failed
		}
	}
}

// nextPass reports whether the drain goroutine should make another pass,
// and clears draining, atomically, when it should not.
func (c *agentConn) nextPass() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.drainAgain || c.gone {
		c.draining = false
		return false
	}
	c.drainAgain = false
	clear(c.acked)
	return true
}

// drainPass sends what the queue holds beyond what is in flight. It
// returns false when the connection failed.
func (c *agentConn) drainPass() bool {
	after := ""
	for {
		c.mu.Lock()
		room := c.s.cfg.Window - len(c.inflight)
		c.mu.Unlock()
		if room <= 0 {
			return true // an ack will kick again
		}
		limit := min(room, drainBatch)
		batch, err := c.s.cfg.Store.Queued(c.channel, after, limit)
		var bad *UnreadableError
		if err != nil && !errors.As(err, &bad) {
			c.s.cfg.Logf("relay: channel %s: read queue: %v", c.channel, err)
			return true // the next kick retries
		}
		for _, d := range batch {
			after = d.ID
			if !c.sendQueued(d) {
				return false
			}
		}
		if bad != nil {
			after = bad.ID
			c.park(bad.ID, bad.Error())
			continue
		}
		if len(batch) < limit {
			return true
		}
	}
}

// sendQueued sends queued delivery d unless it is in flight already. A
// delivery that cannot be framed is parked, never retried: the queue
// behind it goes on. It returns false when the connection failed.
func (c *agentConn) sendQueued(d *devhook.Delivery) bool {
	c.mu.Lock()
	skip := c.inflight[d.ID] || c.acked[d.ID] || c.stuck[d.ID]
	gone := c.gone
	if !skip && !gone {
		c.inflight[d.ID] = true
	}
	c.mu.Unlock()
	if gone {
		return false
	}
	if skip {
		return true
	}
	d.Queued = true
	hdr, err := AppendFrame(nil, deliverHeader(d), nil)
	if err != nil {
		c.mu.Lock()
		delete(c.inflight, d.ID)
		c.mu.Unlock()
		c.park(d.ID, "it cannot be sent to the agent: "+err.Error())
		return true
	}
	return c.write(hdr, d.Body) == nil
}

// park moves delivery id aside, saying why in the log.
func (c *agentConn) park(id, why string) {
	if err := c.s.cfg.Store.Park(c.channel, id, why); err != nil {
		c.s.cfg.Logf("relay: channel %s: delivery %s is skipped (%s) but could not be parked: %v", c.channel, id, why, err)
		c.mu.Lock()
		if c.stuck == nil {
			c.stuck = make(map[string]bool)
		}
		c.stuck[id] = true
		c.mu.Unlock()
		return
	}
	c.s.cfg.Logf("relay: channel %s: delivery %s parked, the rest of the queue goes on: %s", c.channel, id, why)
}

func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

func tokenEqual(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, "devhook relay: "+msg+"\n")
}

// clip keeps a close reason within the 123 bytes a control frame allows.
func clip(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
