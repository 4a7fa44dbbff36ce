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
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// Store is what the relay keeps: channels and the queue of deliveries that
// wait for their agent. storage.DB implements it; a clustered relay would
// implement it over a shared log.
type Store interface {
	PutChannel(ch storage.Channel) error
	Channel(id string) (storage.Channel, error)
	Enqueue(channel string, d *devhook.Delivery) error
	Queued(channel string, after string, limit int) ([]*devhook.Delivery, error)
	Dequeue(channel, id string) error
}

// Defaults of Config.
const (
	DefaultMaxBody         = 10 << 20
	DefaultResponseTimeout = 30 * time.Second
	DefaultPingInterval    = 15 * time.Second
	DefaultWindow          = 64
)

// Config configures a Server. Zero values mean defaults.
type Config struct {
	Store Store // required
	// PublicURL is the base URL senders reach the relay at, such as
	// https://relay.example.com. Empty: derived from each request's Host.
	PublicURL string
	// MaxBody bounds a delivery's body; larger ones get 413.
	MaxBody int64
	// ResponseTimeout is how long a sender waits for the agent's answer
	// before it gets 504.
	ResponseTimeout time.Duration
	// PingInterval is the heartbeat period.
	PingInterval time.Duration
	// Window bounds the queued deliveries in flight to one agent.
	Window int
	// OpenToken, when set, is required (as a bearer token) to open a channel.
	OpenToken string
	Now       func() time.Time
	Logf      func(format string, args ...any)
}

// Server is a relay. It is an http.Handler; Close disconnects agents.
type Server struct {
	cfg      Config
	upgrader websocket.Upgrader

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every connection's goroutines

	mu     sync.Mutex
	agents map[string]*agentConn // by channel
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
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:    cfg,
		ctx:    ctx,
		cancel: cancel,
		agents: make(map[string]*agentConn),
		upgrader: websocket.Upgrader{
			// Reads reuse the HTTP server's buffer; write buffers come from
			// a pool and are held only during a write, so an idle agent
			// costs little more than its socket and one goroutine.
			WriteBufferSize: 32 << 10, WriteBufferPool: &sync.Pool{},
			// Agents are programs, not pages: no Origin to check.
			CheckOrigin: func(*http.Request) bool { return true },
		},
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.pingLoop() }()
	return s, nil
}

// Close disconnects every agent and waits for the connections' goroutines.
// Senders still waiting get their delivery queued (202).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := make([]*agentConn, 0, len(s.agents))
	for _, c := range s.agents {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.cancel()
	for _, c := range conns {
		c.close()
	}
	s.wg.Wait()
	return nil
}

// ServeHTTP routes the relay's endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/c/"):
		s.serveIngress(w, r)
	case p == "/v1/channels":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			httpError(w, http.StatusMethodNotAllowed, "use POST to open a channel")
			return
		}
		s.serveOpen(w, r)
	case strings.HasPrefix(p, "/v1/channels/") && strings.HasSuffix(p, "/connect"):
		s.serveConnect(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/v1/channels/"), "/connect"))
	case p == "/healthz":
		io.WriteString(w, "ok\n")
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
	if err := s.cfg.Store.PutChannel(storage.Channel{ID: cr.Channel, TokenHash: sum[:], CreatedAt: s.cfg.Now().UTC()}); err != nil {
		return Credentials{}, fmt.Errorf("open channel: %w", err)
	}
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
		pending:  make(map[string]chan reply),
		inflight: make(map[string]bool),
		done:     make(chan struct{}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	old := s.agents[channel]
	s.agents[channel] = c
	s.wg.Add(1)
	s.mu.Unlock()
	if old != nil {
		s.cfg.Logf("relay: channel %s: a new agent replaces the connected one", channel)
		old.close()
	}
	hello, _ := AppendFrame(nil, &Header{Type: TypeHello, Channel: channel, PublicURL: s.PublicURL(r, channel)}, nil)
	c.write(hello)
	c.kickDrain()
	go func() { defer s.wg.Done(); c.readLoop() }()
}

// pingLoop sends every agent a heartbeat each PingInterval. One goroutine
// for all connections keeps idle agents cheap.
func (s *Server) pingLoop() {
	t := time.NewTicker(s.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		conns := make([]*agentConn, 0, len(s.agents))
		for _, c := range s.agents {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		deadline := time.Now().Add(s.cfg.PingInterval)
		for _, c := range conns {
			// WriteControl may run beside a data write.
			if err := c.ws.WriteControl(websocket.PingMessage, nil, deadline); err != nil {
				c.close()
			}
		}
	}
}

// agent returns the connected agent of channel, or nil.
func (s *Server) agent(channel string) *agentConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agents[channel]
}

func (s *Server) serveIngress(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/c/")
	channel, suffix, _ := strings.Cut(rest, "/")
	suffix = "/" + suffix
	if channel == "" {
		httpError(w, http.StatusNotFound, "no channel in the path; deliveries go to /c/<channel>/...")
		return
	}
	c := s.agent(channel)
	if c != nil {
		// A connected agent proved the channel exists.
	} else if _, err := s.cfg.Store.Channel(channel); devhook.ErrorCode(err) == devhook.ENOTFOUND {
		httpError(w, http.StatusNotFound, "unknown channel "+channel)
		return
	} else if err != nil {
		s.cfg.Logf("relay: read channel %s: %v", channel, err)
		httpError(w, http.StatusInternalServerError, "could not read the channel")
		return
	}
	if r.ContentLength > s.cfg.MaxBody {
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes is over the relay's limit of %d bytes", r.ContentLength, s.cfg.MaxBody))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is over the relay's limit of %d bytes", s.cfg.MaxBody))
			return
		}
		httpError(w, http.StatusBadRequest, "could not read the request body: "+err.Error())
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "could not make a delivery id")
		return
	}
	d := &devhook.Delivery{
		ID: id.String(), Channel: channel, ReceivedAt: s.cfg.Now().UTC(), Method: r.Method,
		Path: suffix, RawQuery: r.URL.RawQuery, Header: EndToEnd(r.Header), Body: body, RemoteAddr: r.RemoteAddr,
	}
	w.Header().Set("Devhook-Delivery", d.ID)
	if c != nil {
		rep, ok := c.deliver(r.Context(), d)
		switch {
		case ok && rep.timeout:
			httpError(w, http.StatusGatewayTimeout, fmt.Sprintf("the devhook agent did not answer within %s", s.cfg.ResponseTimeout))
			return
		case ok:
			h := w.Header()
			for k, v := range EndToEnd(rep.header) {
				h[k] = v
			}
			h.Del("Content-Length")
			w.WriteHeader(rep.status)
			w.Write(rep.body)
			return
		case r.Context().Err() != nil:
			// The sender went away before the answer; the agent records it anyway.
			return
		}
		// The agent went away mid-delivery: keep the delivery for its return.
	}
	s.enqueue(w, d)
}

func (s *Server) enqueue(w http.ResponseWriter, d *devhook.Delivery) {
	d.Queued = true
	if err := s.cfg.Store.Enqueue(d.Channel, d); err != nil {
		s.cfg.Logf("relay: queue delivery %s: %v", d.ID, err)
		httpError(w, http.StatusServiceUnavailable, "no agent is connected and the delivery could not be queued; try again")
		return
	}
	// An agent may have connected after it was looked up.
	if c := s.agent(d.Channel); c != nil {
		c.kickDrain()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, "{\"queued\":true,\"id\":%q}\n", d.ID)
}

// reply is the agent's answer to one delivery.
type reply struct {
	status  int
	header  http.Header
	body    []byte
	timeout bool
}

// agentConn is one connected agent. readLoop is the only reader; write
// serializes writers.
type agentConn struct {
	s       *Server
	ws      *websocket.Conn
	channel string

	wmu sync.Mutex // one writer at a time

	mu       sync.Mutex
	pending  map[string]chan reply // live deliveries waiting for a response
	inflight map[string]bool       // queued deliveries sent, not yet acked
	gone     bool

	draining   bool          // a drain goroutine runs
	drainAgain bool          // the queue may have new work since it started
	done       chan struct{} // closed when the connection ends
	closeOnce  sync.Once
}

func (c *agentConn) close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.gone = true
		c.mu.Unlock()
		close(c.done)
		// WriteControl may run beside a data write.
		c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "relay closing"), time.Now().Add(time.Second))
		c.ws.Close()
		c.s.mu.Lock()
		if c.s.agents[c.channel] == c {
			delete(c.s.agents, c.channel)
		}
		c.s.mu.Unlock()
	})
}

func (c *agentConn) write(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(c.s.cfg.ResponseTimeout))
	err := c.ws.WriteMessage(websocket.BinaryMessage, frame)
	if err != nil {
		c.close() // takes no lock a writer holds
	}
	return err
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

// deliver sends d and waits for the agent's response. ok is false when the
// connection ended (or ctx did) before a response.
func (c *agentConn) deliver(ctx context.Context, d *devhook.Delivery) (reply, bool) {
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return reply{}, false
	}
	c.pending[d.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, d.ID)
		c.mu.Unlock()
	}()
	frame, err := AppendFrame(make([]byte, 0, len(d.Body)+512), deliverHeader(d), d.Body)
	if err != nil || c.write(frame) != nil {
		return reply{}, false
	}
	t := time.NewTimer(c.s.cfg.ResponseTimeout)
	defer t.Stop()
	select {
	case rep := <-ch:
		return rep, true
	case <-t.C:
		return reply{timeout: true}, true
	case <-c.done:
		return reply{}, false
	case <-ctx.Done():
		return reply{}, false
	}
}

func (c *agentConn) readLoop() {
	defer c.close()
	wait := 2 * c.s.cfg.PingInterval
	c.ws.SetReadDeadline(time.Now().Add(wait))
	c.ws.SetPongHandler(func(string) error { return c.ws.SetReadDeadline(time.Now().Add(wait)) })
	for {
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		c.ws.SetReadDeadline(time.Now().Add(wait))
		h, body, err := DecodeFrame(msg)
		if err != nil {
			c.s.cfg.Logf("relay: channel %s: dropping the agent: %v", c.channel, err)
			c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseProtocolError, clip(err.Error())), time.Now().Add(time.Second))
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
				case ch <- reply{status: status, header: h.Header, body: body}:
				default:
				}
			}
		case TypeAck:
			c.mu.Lock()
			queued := c.inflight[h.ID]
			delete(c.inflight, h.ID)
			c.mu.Unlock()
			if queued {
				if err := c.s.cfg.Store.Dequeue(c.channel, h.ID); err != nil {
					c.s.cfg.Logf("relay: channel %s: dequeue %s: %v", c.channel, h.ID, err)
				}
				c.kickDrain()
			}
		}
	}
}

// drainLoop sends queued deliveries, at most Window unacknowledged at once,
// for as long as it is kicked: at connect, after each ack of a queued
// delivery, after each enqueue.
func (c *agentConn) drainLoop() {
	for {
		c.mu.Lock()
		if !c.drainAgain || c.gone {
			c.draining = false
			c.mu.Unlock()
			return
		}
		c.drainAgain = false
		c.mu.Unlock()
		after := ""
		for {
			c.mu.Lock()
			room := c.s.cfg.Window - len(c.inflight)
			c.mu.Unlock()
			if room <= 0 {
				break // an ack will kick again
			}
			batch, err := c.s.cfg.Store.Queued(c.channel, after, room)
			if err != nil {
				c.s.cfg.Logf("relay: channel %s: read queue: %v", c.channel, err)
				break
			}
			for _, d := range batch {
				after = d.ID
				c.mu.Lock()
				skip := c.inflight[d.ID] || c.gone
				if !skip {
					c.inflight[d.ID] = true
				}
				c.mu.Unlock()
				if skip {
					continue
				}
				d.Queued = true
				frame, err := AppendFrame(nil, deliverHeader(d), d.Body)
				if err != nil || c.write(frame) != nil {
					return
				}
			}
			if len(batch) < room {
				break
			}
		}
	}
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
