// Package agent is devhook's listen loop: it receives deliveries from the
// relay, verifies their signature, records them, forwards them byte-exact to
// the local receiver, passes the receiver's answer back and acknowledges.
//
// For each delivery, in this order:
//
//	verify → record delivery → forward → record attempt → respond → ack
//
// The ack comes only after the delivery is recorded, so the relay keeps a
// delivery until it is on disk here. A delivery that arrives again (same id)
// and already has an attempt is answered from the record, not forwarded twice.
//
// A delivery that cannot be recorded (a full disk) is not forwarded: a live
// one is answered 503, so that whatever a sender saw answered 200 is on
// disk; a queued one is held in memory and its record retried until it
// succeeds, then handled and acknowledged, so that the relay's queue moves
// again by itself once there is room. See health.go.
//
// A queued delivery whose forward got no answer, or 408, 429 or 5xx, is
// owed to the receiver: its retry state is recorded, the relay is
// acknowledged, and the agent retries it with backoff until the receiver
// takes it or Config.RetryFor has passed, when it gives up loudly. See
// retry.go.
package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/signature"
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
	DefaultMaxResponse    = 10 << 20
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
	Credentials relay.Credentials
	// RelayFallbacks are other URLs of the same relay cluster (instances
	// sharing channels through NATS). When the relay in use cannot be
	// reached, Run tries the next one at once, and backs off only after
	// every one failed.
	RelayFallbacks []string
	// Forward lists receiver URLs; the first one's answer goes back to the
	// sender, the others get a copy.
	Forward []string
	Store   Store // required

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
	// it (Retry > 0) or the agent gives up on it (GaveUp), and once per
	// replay (Replay).
	OnResult func(Result)
	// OnConnect is called each time a connection to the relay is up.
	OnConnect func(Connection)
	Logf      func(format string, args ...any)
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
	// Retry is set on the result of a retry that delivered an owed
	// delivery: how many retries it took.
	Retry int
	// GaveUp: the agent stopped retrying; Error says why ("gave up after
	// N attempts over 1h: ...").
	GaveUp bool
	// Since is when the first forward of an owed delivery failed (with
	// Retry and GaveUp).
	Since time.Time
	// Replay: Attempt is a replay (Agent.Replay), asked for from the
	// inspector or devhook replay.
	Replay bool
}

// Agent forwards and records deliveries.
type Agent struct {
	cfg     Config
	targets []*url.URL
	client  *http.Client
	conns   connPool // kept-alive connections of the agent's own client (httpclient.go)

	secretMu sync.RWMutex
	secret   string

	health health  // see health.go
	owed   retrier // see retry.go

	// slots is the current connection's semaphore of deliveries under
	// way: its length is InFlight. Set once per connection.
	slots atomic.Pointer[chan struct{}]
}

// InFlight is how many deliveries from the relay are being handled now:
// what stopping waits for, up to ShutdownGrace.
func (a *Agent) InFlight() int {
	if p := a.slots.Load(); p != nil {
		return len(*p)
	}
	return 0
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
		return nil, fmt.Errorf("agent: --verify must be report, enforce or off, not %q", cfg.Verify)
	}
	a := &Agent{cfg: cfg, secret: cfg.Secret}
	for _, f := range cfg.Forward {
		u, err := ParseTarget(f)
		if err != nil {
			return nil, err
		}
		a.targets = append(a.targets, u)
	}
	if a.cfg.Concurrency <= 0 {
		a.cfg.Concurrency = DefaultConcurrency
	}
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

// ParseTarget turns a --forward value (localhost:8080, :8080, 8080,
// http://host:port/base) into a URL.
func ParseTarget(s string) (*url.URL, error) {
	raw := strings.TrimSpace(s)
	switch {
	case raw == "":
		return nil, errors.New("empty --forward target; give one such as localhost:8080")
	case strings.Trim(raw, "0123456789") == "":
		raw = "http://localhost:" + raw
	case strings.HasPrefix(raw, ":"):
		raw = "http://localhost" + raw
	case !strings.Contains(raw, "://"):
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--forward %q is not a receiver address; use host:port or an http(s) URL", s)
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
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

// Run connects to the relay and handles deliveries until ctx ends,
// reconnecting with capped, jittered exponential backoff. It returns an
// error only when the relay rejects the credentials (relay.ErrRejected) or
// another agent took the channel over (relay.ErrReplaced): reconnecting
// would not help, or would take the channel back and forth.
//
// Run also retries the deliveries owed to the receiver, those recorded by
// an earlier Run included, and waits for those retries before it returns.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.RelayURL == "" || a.cfg.Credentials.Channel == "" {
		return errors.New("agent: no relay or channel to connect to")
	}
	if len(a.targets) == 0 {
		return errors.New("agent: no --forward target")
	}
	defer a.CloseIdleConnections() // the receiver's kept-alive connections
	a.resume()
	retryCtx, stopRetries := context.WithCancel(ctx)
	retriesDone := make(chan struct{})
	go func() {
		defer close(retriesDone)
		a.retryLoop(retryCtx)
	}()
	defer func() {
		stopRetries()
		<-retriesDone
	}()

	backoff := a.cfg.MinBackoff
	var lost time.Time // when the last connection ended; zero before the first
	relays := append([]string{a.cfg.RelayURL}, a.cfg.RelayFallbacks...)
	at := 0 // the relay tried next
	for {
		conn, err := relay.Dial(ctx, relay.DialConfig{RelayURL: relays[at], Credentials: a.cfg.Credentials})
		switch {
		case ctx.Err() != nil:
			if conn != nil {
				conn.Close()
			}
			return nil
		case errors.Is(err, relay.ErrRejected):
			return err
		case err != nil && len(relays) > 1:
			if at = (at + 1) % len(relays); at != 0 {
				a.cfg.Logf("relay %s unreachable (%v); trying %s", relays[(at+len(relays)-1)%len(relays)], err, relays[at])
				continue
			}
			fallthrough
		case err != nil:
			wait := a.jitter(backoff)
			a.cfg.Logf("relay unreachable (%v); retrying in %s", err, wait.Round(time.Millisecond))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			backoff = min(backoff*2, a.cfg.MaxBackoff)
			continue
		}
		backoff = a.cfg.MinBackoff
		if a.cfg.OnConnect != nil {
			c := Connection{PublicURL: conn.PublicURL(), Queued: conn.Queued()}
			if !lost.IsZero() {
				c.Reconnect, c.Down = true, a.cfg.Now().Sub(lost)
			}
			a.cfg.OnConnect(c)
		}
		err = a.serve(ctx, conn)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, relay.ErrReplaced) {
			return err
		}
		lost = a.cfg.Now()
		a.cfg.Logf("connection to the relay lost (%v); reconnecting", err)
	}
}

// jitter returns a random wait between d/2 and 3d/2.
func (a *Agent) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(a.cfg.Rand(int64(d))) + d/2
}

// serve handles one connection until it ends. It waits for the deliveries
// it started.
//
// Deliveries run on workers that outlive them: a worker that finished one
// waits for the next, so that its stack, grown by the first delivery, is
// not grown again (a goroutine per delivery copied its stack once per
// delivery). There are at most Concurrency workers; one that must hold a
// queued delivery until the disk takes it leaves the pool.
func (a *Agent) serve(ctx context.Context, conn *relay.Conn) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, a.cfg.Concurrency)
	a.slots.Store(&sem)
	// Deliveries under way when ctx ends get a grace period to finish, so
	// that stopping devhook does not cut a receiver off mid-request.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	// Queued deliveries held because they could not be recorded belong to
	// this connection: when it ends, the relay sends them again on the
	// next one, so they are dropped here.
	held, dropHeld := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() {
		conn.Close()
		time.AfterFunc(ShutdownGrace, cancelWork)
	})
	next := make(chan *devhook.Delivery) // to an idle worker
	quit := make(chan struct{})          // idle workers leave
	var pooled atomic.Int32              // workers in the pool
	defer func() {
		stop()
		conn.Close()
		dropHeld()
		close(quit)
		wg.Wait()
		cancelWork()
	}()
	// handle runs d, whose slot of sem is taken, and frees the slot. It
	// returns false when the worker left the pool to hold d.
	handle := func(d *devhook.Delivery) bool {
		res := a.process(work, d)
		if res.hold != 0 {
			// Waiting for the disk must not take a slot from live
			// deliveries, which are answered 503 meanwhile; nor a
			// worker, which the slot would wait for.
			pooled.Add(-1)
			<-sem
			if a.hold(work, held, d, &res) {
				a.finish(conn, d, &res)
			}
			return false
		}
		a.finish(conn, d, &res)
		<-sem
		return true
	}
	worker := func(d *devhook.Delivery) {
		defer wg.Done()
		for handle(d) {
			select {
			case d = <-next:
			case <-quit:
				pooled.Add(-1)
				return
			}
		}
	}
	for {
		d, err := conn.Receive()
		if err != nil {
			return err
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case next <- d:
			continue
		default:
		}
		if pooled.Load() < int32(a.cfg.Concurrency) {
			pooled.Add(1)
			wg.Add(1)
			go worker(d)
			continue
		}
		// Every worker is taken, and one of them freed the slot just
		// taken: it is on its way back.
		select {
		case next <- d:
		case <-ctx.Done():
			<-sem
			return ctx.Err()
		}
	}
}

// responder is the part of a relay connection handle needs.
type responder interface {
	Respond(id string, status int, header http.Header, body []byte) error
	Ack(id string) error
}

// finish answers the relay for d and reports the result.
func (a *Agent) finish(conn responder, d *devhook.Delivery, res *processed) {
	st, h, body := answer(*res)
	res.Status, res.Rejected = st, res.rejected != nil
	if err := conn.Respond(d.ID, st, h, body); err != nil {
		if reason := unframable(d.ID, st, h); reason != "" {
			// The answer itself cannot be framed: say so at once rather
			// than leave the sender waiting for the relay's timeout.
			a.cfg.Logf("delivery %s: %s", d.ID, reason)
			st, h, body = text(http.StatusBadGateway, "devhook: "+reason)
			res.Status, res.Error = st, reason
			err = conn.Respond(d.ID, st, h, body)
		}
		if err != nil && !d.Queued {
			// The relay queues it (its sender gets 202) and sends it
			// again: the printed line says so.
			res.Cut = true
		}
	}
	if res.recorded && d.Queued {
		if err := conn.Ack(d.ID); err != nil {
			res.Cut = true // not acknowledged: the relay keeps it
		}
	}
	if a.cfg.OnResult != nil {
		a.cfg.OnResult(res.Result)
	}
}

// Hold reasons of a queued delivery: a write that failed and must succeed
// before the relay is acknowledged.
const (
	holdRecord  = 1 + iota // PutDelivery
	holdAttempt            // AddAttempt of its forward, Result.Attempt
	holdOwed               // PutRetry of its owed state
)

// processed is a Result plus what handle needs to answer.
type processed struct {
	Result
	recorded bool
	answer   *devhook.Attempt // what to send back; nil with failure
	failure  string           // d is not recorded: 503
	unframed string           // the receiver's answer cannot go back through the relay: 502
	rejected *devhook.Verdict
	hold     int                 // a queued delivery waits for a write: holdRecord, holdAttempt or holdOwed
	owe      *devhook.RetryState // with holdOwed: the state to write
}

// process verifies, records and forwards d. It does not talk to the relay.
func (a *Agent) process(ctx context.Context, d *devhook.Delivery) processed {
	d.Event = devhook.ParseEvent(d.Body)
	d.Verdict = a.verify(d)
	// Record first: a delivery that cannot be recorded is not forwarded,
	// so that no sender sees the receiver's 200 for a delivery that is
	// not on disk. The journal makes this one write(2).
	created, err := a.cfg.Store.PutDelivery(d)
	if err != nil {
		a.storeFailed(err)
		p := processed{Result: Result{Delivery: d}}
		if d.Queued {
			p.hold = holdRecord
			return p
		}
		p.failure = "devhook could not record the delivery: " + shortCause(err) + "; not forwarded"
		p.Error = "could not record the delivery: " + err.Error() + "; answered 503, not forwarded"
		return p
	}
	a.storeOK()
	return a.forwardRecorded(ctx, d, created)
}

// forwardRecorded forwards d, which is recorded (created says whether by
// this call), and records the attempts.
func (a *Agent) forwardRecorded(ctx context.Context, d *devhook.Delivery, created bool) processed {
	p := processed{Result: Result{Delivery: d}, recorded: true}
	if !created {
		// Delivered again (its ack was lost): answer from the record if
		// the receiver has taken it, or if the agent owes it already,
		// rather than forward it twice.
		if stored, err := a.cfg.Store.Delivery(d.ID); err == nil {
			if at := answered(stored); at != nil && !retryable(at) || a.hasRetryState(d.ID) {
				p.Duplicate, p.Delivery = true, stored
				p.answer = cmp.Or(at, stored.LastAttempt())
				p.Attempt = p.answer
				return p
			}
		}
	} else {
		a.publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: d.Summarize()})
	}
	if a.cfg.Verify == VerifyEnforce && !d.Verdict.OK() {
		v := d.Verdict
		p.rejected = &v
		return p
	}

	kind := devhook.AttemptForward
	var resign bool
	if d.Queued {
		kind = devhook.AttemptRedelivery
		// It waited: the receiver's 5-minute window may have closed on it.
		resign = d.Verdict.OK() && a.getSecret() != ""
	}
	// The first target answers the sender; the others get a copy at the
	// same time.
	ats := make([]devhook.Attempt, len(a.targets))
	var wg sync.WaitGroup
	for i := 1; i < len(a.targets); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ats[i] = a.forward(ctx, d, a.targets[i], kind, resign, nil, "")
		}()
	}
	ats[0] = a.forward(ctx, d, a.targets[0], kind, resign, nil, "")
	if !d.Queued && ats[0].Status != 0 {
		if reason := unframable(d.ID, ats[0].Status, ats[0].Header); reason != "" {
			ats[0].Error = reason + "; the sender got 502"
			p.unframed = reason
		}
	}
	if ats[0].Status != 0 {
		a.receiverAnswered()
	}
	wg.Wait()

	var primary *devhook.Attempt
	for i := range ats {
		rec := a.record(d, ats[i])
		if i == 0 {
			primary = rec
		} else {
			p.Copies = append(p.Copies, rec)
		}
	}
	p.Attempt, p.answer = primary, primary
	if d.Queued && primary.Seq == 0 {
		// Not recorded: the relay is acknowledged once it is.
		p.hold = holdAttempt
		return p
	}
	return a.oweIfRetryable(d, p)
}

// oweIfRetryable makes queued delivery d owed when its recorded forward
// p.Attempt asks for a retry.
func (a *Agent) oweIfRetryable(d *devhook.Delivery, p processed) processed {
	primary := p.Attempt
	if d.Queued && retryable(primary) {
		p.Owed = true
		st := a.owe(d, primary)
		if err := a.cfg.Store.PutRetry(d.ID, st); err != nil {
			a.storeFailed(err)
			p.hold, p.owe = holdOwed, &st
			return p
		}
		a.storeOK()
		a.owedRecorded(d, primary, st)
	}
	return p
}

// answered returns the last forward of d that the receiver answered, or nil.
func answered(d *devhook.Delivery) *devhook.Attempt {
	for i := len(d.Attempts) - 1; i >= 0; i-- {
		if at := &d.Attempts[i]; at.Status != 0 && at.Kind != devhook.AttemptReplay {
			return at
		}
	}
	return nil
}

func (a *Agent) verify(d *devhook.Delivery) devhook.Verdict {
	if a.cfg.Verify == VerifyOff {
		return devhook.Verdict{Result: devhook.VerdictUnchecked, Reason: "verification is off (--verify off)"}
	}
	now := a.cfg.Now
	if d.Queued && !d.ReceivedAt.IsZero() {
		// Judge a queued delivery at the time the relay received it.
		at := d.ReceivedAt
		now = func() time.Time { return at }
	}
	v := signature.Verifier{Skew: a.cfg.Skew, Now: now}
	return v.Verify(a.getSecret(), d.Header.Get(devhook.SignatureHeader), d.Body)
}

func (a *Agent) publish(c devhook.Change) {
	if a.cfg.OnChange != nil {
		a.cfg.OnChange(c)
	}
}

// answer is what goes back to the sender for p.
func answer(p processed) (int, http.Header, []byte) {
	switch {
	case p.rejected != nil:
		return text(p.rejected.Status, p.rejected.Text)
	case p.failure != "":
		st, h, b := text(http.StatusServiceUnavailable, p.failure)
		h["Retry-After"] = []string{strconv.Itoa(RetryAfter)}
		return st, h, b
	case p.unframed != "":
		return text(http.StatusBadGateway, "devhook: "+p.unframed)
	case p.answer == nil:
		return text(http.StatusBadGateway, "devhook: nothing to forward to")
	case p.answer.Status == 0:
		return text(http.StatusBadGateway, "devhook: the local receiver did not answer: "+p.answer.Error)
	}
	return p.answer.Status, p.answer.Header, p.answer.Body
}

func text(code int, msg string) (int, http.Header, []byte) {
	return code, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, []byte(msg + "\n")
}

// unframable says why an answer with this status and header cannot be
// sent back through the relay, or returns "" when it can. Only a header
// near relay.MaxHeaderSize is encoded to find out.
func unframable(id string, status int, h http.Header) string {
	n := 64 + len(id)
	for k, vs := range h {
		n += len(k) + 10
		for _, v := range vs {
			n += len(v) + 10
		}
	}
	if n < relay.MaxHeaderSize {
		return ""
	}
	if _, err := relay.AppendFrame(nil, &relay.Header{Type: relay.TypeResponse, ID: id, Status: status, Header: h}, nil); err == nil {
		return ""
	}
	size := 0
	for k, vs := range h {
		size += len(k)
		for _, v := range vs {
			size += len(v)
		}
	}
	return fmt.Sprintf("the receiver answered %d with %d bytes of headers, over the %d devhook can pass back to the sender", status, size, relay.MaxHeaderSize)
}

// shortCause names the kind of a storage error for a sender, without the
// local paths the full error carries.
func shortCause(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return "disk full"
	case errors.Is(err, syscall.EDQUOT):
		return "disk quota exceeded"
	case errors.Is(err, syscall.EROFS):
		return "read-only file system"
	case errors.Is(err, syscall.EIO):
		return "I/O error"
	}
	return "storage error"
}
