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
package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
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
	// Forward lists receiver URLs; the first one's answer goes back to the
	// sender, the others get a copy.
	Forward []string
	Store   Store // required

	Secret string // signing secret; SetSecret changes it later
	Verify string // report (default), enforce or off
	Skew   time.Duration

	Concurrency    int           // deliveries forwarded at once
	ForwardTimeout time.Duration // per forward
	MaxResponse    int64         // receiver answers larger than this are cut and flagged
	Client         *http.Client  // nil: a client that follows no redirects and keeps connections
	MinBackoff     time.Duration
	MaxBackoff     time.Duration

	Now func() time.Time
	// OnChange is called after each record, for live views. It must not block.
	OnChange func(devhook.Change)
	// OnResult is called once per delivery handled from the relay.
	OnResult func(Result)
	// OnConnect is called each time a connection to the relay is up.
	OnConnect func(publicURL string)
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
}

// Agent forwards and records deliveries.
type Agent struct {
	cfg     Config
	targets []*url.URL
	client  *http.Client

	secretMu sync.RWMutex
	secret   string
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
	if a.cfg.Now == nil {
		a.cfg.Now = time.Now
	}
	if a.cfg.Logf == nil {
		a.cfg.Logf = func(string, ...any) {}
	}
	a.client = cfg.Client
	if a.client == nil {
		a.client = NewClient(a.cfg.Concurrency)
	}
	return a, nil
}

// NewClient returns the HTTP client the agent forwards with: no redirects
// followed, no transparent decompression, connections kept for reuse.
func NewClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
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
// error only when the relay rejects the credentials (relay.ErrRejected).
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.RelayURL == "" || a.cfg.Credentials.Channel == "" {
		return errors.New("agent: no relay or channel to connect to")
	}
	if len(a.targets) == 0 {
		return errors.New("agent: no --forward target")
	}
	backoff := a.cfg.MinBackoff
	for {
		conn, err := relay.Dial(ctx, relay.DialConfig{RelayURL: a.cfg.RelayURL, Credentials: a.cfg.Credentials})
		switch {
		case ctx.Err() != nil:
			if conn != nil {
				conn.Close()
			}
			return nil
		case errors.Is(err, relay.ErrRejected):
			return err
		case err != nil:
			// Full jitter: a random wait up to the current cap.
			wait := time.Duration(rand.Int64N(int64(backoff))) + backoff/2
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
			a.cfg.OnConnect(conn.PublicURL())
		}
		err = a.serve(ctx, conn)
		if ctx.Err() != nil {
			return nil
		}
		a.cfg.Logf("connection to the relay lost (%v); reconnecting", err)
	}
}

// serve handles one connection until it ends. It waits for the deliveries
// it started.
func (a *Agent) serve(ctx context.Context, conn *relay.Conn) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, a.cfg.Concurrency)
	// Deliveries under way when ctx ends get a grace period to finish, so
	// that stopping devhook does not cut a receiver off mid-request.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		conn.Close()
		time.AfterFunc(ShutdownGrace, cancelWork)
	})
	defer func() {
		stop()
		conn.Close()
		wg.Wait()
		cancelWork()
	}()
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
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			a.handle(work, conn, d)
		}()
	}
}

// responder is the part of a relay connection handle needs.
type responder interface {
	Respond(id string, status int, header http.Header, body []byte) error
	Ack(id string) error
}

func (a *Agent) handle(ctx context.Context, conn responder, d *devhook.Delivery) {
	res := a.process(ctx, d)
	st, h, body := answer(res)
	res.Status, res.Rejected = st, res.rejected != nil
	if res.failure != "" {
		res.Error = res.failure
	}
	if err := conn.Respond(d.ID, st, h, body); err != nil {
		a.cfg.Logf("delivery %s: %v", d.ID, err)
	}
	if res.recorded && d.Queued {
		if err := conn.Ack(d.ID); err != nil {
			a.cfg.Logf("delivery %s: ack: %v", d.ID, err)
		}
	}
	if a.cfg.OnResult != nil {
		a.cfg.OnResult(res.Result)
	}
}

// processed is a Result plus what handle needs to answer.
type processed struct {
	Result
	recorded bool
	answer   *devhook.Attempt // what to send back; nil with failure
	failure  string
	rejected *devhook.Verdict
}

// process verifies, records and forwards d. It does not talk to the relay.
func (a *Agent) process(ctx context.Context, d *devhook.Delivery) processed {
	d.Event = devhook.ParseEvent(d.Body)
	d.Verdict = a.verify(d)
	p := processed{Result: Result{Delivery: d}, recorded: true}
	forward := a.cfg.Verify != VerifyEnforce || d.Verdict.OK()

	// A live delivery is new: record it while the receiver works on it.
	// One that waited in the relay's queue may have been handled before
	// (its ack lost): look at the record before forwarding it.
	var created bool
	var putErr error
	putDone := make(chan struct{})
	if forward && !d.Queued {
		go func() {
			defer close(putDone)
			created, putErr = a.cfg.Store.PutDelivery(d)
		}()
	} else {
		created, putErr = a.cfg.Store.PutDelivery(d)
		close(putDone)
		if putErr != nil {
			a.cfg.Logf("delivery %s: record: %v", d.ID, putErr)
			p.recorded, p.failure = false, "devhook could not record the delivery: "+putErr.Error()
			return p
		}
		if !created {
			// Delivered again: answer from the record if the receiver
			// has already answered it, rather than forward it twice.
			if stored, err := a.cfg.Store.Delivery(d.ID); err == nil {
				if at := answered(stored); at != nil {
					p.Duplicate, p.Delivery = true, stored
					p.answer, p.Attempt = at, at
					return p
				}
			}
		} else {
			a.publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: d.Summarize()})
		}
		if !forward {
			v := d.Verdict
			p.rejected = &v
			return p
		}
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
	wg.Wait()

	<-putDone
	if putErr != nil {
		// The receiver has answered; pass that on, but do not ack.
		a.cfg.Logf("delivery %s: record: %v", d.ID, putErr)
		p.recorded, p.Error = false, "devhook could not record the delivery: "+putErr.Error()
		p.answer, p.Attempt = &ats[0], &ats[0]
		return p
	}
	if created && !d.Queued {
		a.publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: d.Summarize()})
	}
	var primary *devhook.Attempt
	for i := range ats {
		rec := a.record(d, ats[i])
		if i == 0 {
			primary = rec
		}
	}
	p.Attempt, p.answer = primary, primary
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
	text := func(code int, msg string) (int, http.Header, []byte) {
		return code, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, []byte(msg + "\n")
	}
	switch {
	case p.rejected != nil:
		return text(p.rejected.Status, p.rejected.Text)
	case p.failure != "":
		return text(http.StatusServiceUnavailable, p.failure)
	case p.answer == nil:
		return text(http.StatusBadGateway, "devhook: nothing to forward to")
	case p.answer.Status == 0:
		return text(http.StatusBadGateway, "devhook: the local receiver did not answer: "+p.answer.Error)
	}
	return p.answer.Status, p.answer.Header, p.answer.Body
}
