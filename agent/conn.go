package agent

// The agent's connection to the relay.
//
// Run keeps one connection up at a time. relayclient.Dial opens it and reads
// the relay's hello (the public URL, the deliveries queued meanwhile, the
// largest body, which the connection then accepts, and the relay's
// heartbeat, which sets how long a silent connection is kept);
// Config.OnConnect reports it as a Connection, saying how long the
// channel was down when it is a reconnection. The relay rejecting the
// credentials, or another agent taking the channel over, ends Run. While
// the store cannot take a write (a full disk), the agent does not connect
// (health.go: health.waitWritable). The deliveries of a connection are served by
// workers.go.
//
// A connection holds once it has lived Config.HealthyAfter (by default
// the relay's heartbeat period, between 1 s and 5 s). When one that held
// is lost, the agent dials again at once. Everything else is a failed
// try: a dial that failed, and a connection that ended before it held (a
// relay, proxy or load balancer that accepts and then closes). After a
// failed try the agent dials the next of Config.RelayFallbacks at once
// (each agent tries them in an order of its own, so that the agents of an
// instance that dies spread over the others rather than all landing on
// the next one in a shared list); once every URL failed, it waits a
// jittered backoff that doubles from Config.MinBackoff to
// Config.MaxBackoff, back to MinBackoff once a connection holds. So
// nothing dials faster than the backoff, whatever the relay path does.
//
// What the user reads: each kind of failure is said once, in full (an
// unreachable relay with what to check); the same failure again is
// counted, and said again only as a short line at most once every
// repeatEvery; the count is said when a connection opens again (in the
// Connection given to OnConnect, with the time waited to record, for its
// caller to say in one line; logged without OnConnect). After a
// connection that ended before it held, the next ones are reported
// (OnConnect) only once one holds or brings a delivery, so that a relay
// path that cuts every connection does not print "reconnected" at each
// try, and "N queued deliveries follow" still comes before them.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/devhook/devhook/relay/relayclient"
)

// Bounds of the default Config.HealthyAfter, which follows the relay's
// heartbeat.
const (
	minHealthyAfter = time.Second
	maxHealthyAfter = 5 * time.Second
)

// repeatEvery: a failure that repeats is said again, as a short line with
// its count, at most this often.
const repeatEvery = time.Minute

// Run connects to the relay and handles deliveries until ctx ends,
// reconnecting with capped, jittered exponential backoff. It returns an
// error only when the relay rejects the credentials (relayclient.ErrRejected) or
// another agent took the channel over (relayclient.ErrReplaced): reconnecting
// would not help, or would take the channel back and forth. See the top
// of this file.
//
// Run also retries the deliveries owed to the receiver, those recorded by
// an earlier Run included, and waits for those retries before it returns.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.RelayURL == "" || a.cfg.Credentials.Channel == "" {
		return errors.New("agent: no relay or channel to connect to")
	}
	if len(a.targets) == 0 {
		return errors.New("agent: no forward target (Config.Forward is empty)")
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

	return a.stayConnected(ctx)
}

// stayConnected connects to the relay and serves each connection until
// ctx ends, reconnecting when it is lost (see the top of this file). It
// returns what Run returns.
func (a *Agent) stayConnected(ctx context.Context) error {
	relays := append([]string{a.cfg.RelayURL}, a.shuffled(a.cfg.RelayFallbacks)...)
	r := redial{a: a, backoff: a.cfg.MinBackoff}
	at := 0 // the relay tried next
	for {
		waited, ok := a.health.waitWritable(ctx, a.cfg.Store, a.cfg.MinBackoff)
		if !ok {
			return nil
		}
		r.unrecordable += waited
		conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: relays[at], Credentials: a.cfg.Credentials, Network: a.cfg.RelayNetwork})
		switch {
		case ctx.Err() != nil:
			if conn != nil {
				conn.Close()
			}
			return nil
		case errors.Is(err, relayclient.ErrRejected):
			return err
		case err != nil:
			if !r.failedTry(ctx, relays, &at, failureKey(relays[at], err), dialFailure(relays[at], err)) {
				return nil
			}
			continue
		}
		opened := a.cfg.Now()
		r.warnRelayWait(conn)
		held, err := r.use(ctx, conn, opened, a.serve)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, relayclient.ErrReplaced) {
			return err
		}
		if held {
			a.cfg.Logf("connection to the relay lost (%v); reconnecting", err)
			continue
		}
		r.flapping = true
		when := "right after it opened"
		if lived := a.cfg.Now().Sub(opened); lived >= time.Second {
			when = FormatDuration(lived) + " after it opened"
		}
		cut := tryFailure{full: fmt.Sprintf("the connection to the relay %s ended %s (%v)", relays[at], when, err),
			short: "the connection to the relay " + relays[at] + " ends before it holds"}
		if !r.failedTry(ctx, relays, &at, relays[at]+"\x00ended before it held", cut) {
			return nil
		}
	}
}

// redial is stayConnected's state between connections: the backoff, the
// failure under way and what the user was told of it.
type redial struct {
	a       *Agent
	backoff time.Duration // the next wait once every relay failed

	reported bool      // OnConnect was called for a connection of this Run
	lost     time.Time // when the last connection reported ended; zero before
	// flapping: a connection ended before it held since the last one
	// that held; the next ones are reported only once they hold.
	flapping bool

	// The failed tries since the last connection opened (or held, when
	// flapping): how many, since when, the kinds said in full, when the
	// last line was said and how many tries since.
	fails    int
	since    time.Time
	said     map[string]bool
	lastSaid time.Time
	unsaid   int
	// unrecordable: how long, since the last connection opened, the agent
	// waited for the store to take writes before it dialled.
	unrecordable time.Duration

	warnedWait time.Duration // the relay's wait last warned of (warnRelayWait)
}

// tryFailure is a failed try in words: in full, said the first time, and
// short, for the lines that repeat it.
type tryFailure struct{ full, short string }

// dialFailure says why relayclient.Dial to relayURL failed.
func dialFailure(relayURL string, err error) tryFailure {
	var ue *relayclient.UnreachableError
	if errors.As(err, &ue) { // says which relay and what to check
		return tryFailure{full: err.Error(), short: "cannot reach the relay " + ue.Relay + ": " + ue.Reason}
	}
	return tryFailure{full: fmt.Sprintf("relay %s unreachable (%v)", relayURL, err), short: "relay " + relayURL + ": " + err.Error()}
}

// failedTry notes a failed try of relays[*at] (f, of the kind key), says
// it as the top of conn.go says, and moves *at to the relay to try next:
// at once when there is another one, after the backoff once every one
// failed. It returns false when ctx ended while waiting.
func (r *redial) failedTry(ctx context.Context, relays []string, at *int, key string, f tryFailure) bool {
	a := r.a
	now := a.cfg.Now()
	if r.fails == 0 {
		r.since, r.said, r.unsaid = now, map[string]bool{}, 0
	}
	r.fails++
	*at = (*at + 1) % len(relays)
	var wait time.Duration
	next := "trying " + relays[*at]
	if *at == 0 {
		wait = a.jitter(r.backoff)
		r.backoff = min(r.backoff*2, a.cfg.MaxBackoff)
		next = "retrying in " + FormatDuration(wait)
	}
	switch {
	case !r.said[key] && len(r.said) < 16: // a kind not said yet: in full
		r.said[key] = true
		r.lastSaid = now
		a.cfg.Logf("%s; %s", f.full, next)
	case now.Sub(r.lastSaid) >= repeatEvery:
		a.cfg.Logf("still failing: %s: %d tries in %s; %s", f.short, r.fails, FormatDuration(now.Sub(r.since)), next)
		r.lastSaid, r.unsaid = now, 0
	default:
		r.unsaid++
	}
	if wait == 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// warnRelayWait says once per Run and relay wait when the relay of conn
// lets a sender wait less than the agent waits for its receiver
// (late.go).
func (r *redial) warnRelayWait(conn *relayclient.Conn) {
	wait := conn.ResponseTimeout()
	if wait == r.warnedWait {
		return
	}
	r.warnedWait = wait
	if w := r.a.relayWaitWarning(wait); w != "" {
		r.a.cfg.Logf("%s", w)
	}
}

// recovered ends the failure under way and the wait to record before
// connection c, opened at opened (the failure ends there, not when c is
// reported, which a flapping relay defers until c holds): it puts them in c, for OnConnect to say (in one line with
// the connection's, so that a wait for the disk and one for the relay are
// told apart), or without OnConnect says how many tries it took when some
// were not said.
func (r *redial) recovered(c *Connection, opened time.Time) {
	if r.fails > 0 {
		c.Fails, c.Failing = r.fails, opened.Sub(r.since)
		c.Unsaid = r.unsaid > 0
	}
	c.Unrecordable = r.unrecordable
	if r.a.cfg.OnConnect == nil && r.fails > 1 && r.unsaid > 0 {
		r.a.cfg.Logf("connected after %d failed tries over %s", r.fails, FormatDuration(c.Failing))
	}
	r.fails, r.unrecordable = 0, 0
}

// use serves conn with serve (Agent.serve, workers.go) until it ends,
// reporting it (OnConnect) at once or, while flapping, once it holds or
// brings a delivery, whichever comes first (so that "reconnected, N queued
// deliveries follow" precedes them). It returns whether it held, and why
// it ended.
func (r *redial) use(ctx context.Context, conn *relayclient.Conn, opened time.Time, serve func(context.Context, *relayclient.Conn, func()) error) (held bool, err error) {
	a := r.a
	deferred := r.flapping && r.reported
	// announce and holds run at most once each, from the timer's
	// goroutine or this one; their Onces order what they do before what
	// follows use's return.
	var announceOnce, holdOnce sync.Once
	announced := false
	announce := func() {
		announceOnce.Do(func() {
			announced, r.reported = true, true
			c := Connection{PublicURL: conn.PublicURL(), Queued: conn.Queued()}
			r.recovered(&c, opened)
			if a.cfg.OnConnect == nil {
				return
			}
			if !r.lost.IsZero() {
				c.Reconnect, c.Down = true, opened.Sub(r.lost)
			}
			a.cfg.OnConnect(c)
		})
	}
	if !deferred {
		announce()
	}
	holds := func() {
		holdOnce.Do(func() {
			held = true
			r.backoff = a.cfg.MinBackoff
			r.flapping = false
			announce()
		})
	}
	t := time.AfterFunc(a.healthyAfter(conn), holds)
	err = serve(ctx, conn, announce)
	t.Stop()
	holdOnce.Do(func() {})     // holds ran, or never will
	announceOnce.Do(func() {}) // likewise
	if announced {             // the next one's Down counts from here
		r.lost = a.cfg.Now()
	}
	return held, err
}

// healthyAfter is how long conn must live to hold: Config.HealthyAfter,
// or the relay's heartbeat period between minHealthyAfter and
// maxHealthyAfter.
func (a *Agent) healthyAfter(conn *relayclient.Conn) time.Duration {
	if a.cfg.HealthyAfter > 0 {
		return a.cfg.HealthyAfter
	}
	return min(max(conn.PingInterval(), minHealthyAfter), maxHealthyAfter)
}

// failureKey tells failures of a kind apart from others, without the
// parts that change from one try to the next (a local port).
func failureKey(relayURL string, err error) string {
	var ue *relayclient.UnreachableError
	if errors.As(err, &ue) {
		return ue.Relay + "\x00" + ue.Reason
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return relayURL + "\x00" + op.Op + "\x00" + op.Err.Error()
	}
	return relayURL + "\x00" + err.Error()
}

// shuffled returns urls in a random order (Config.Rand), leaving urls as
// it is.
func (a *Agent) shuffled(urls []string) []string {
	out := append([]string(nil), urls...)
	for i := len(out) - 1; i > 0; i-- {
		j := int(a.cfg.Rand(int64(i + 1)))
		out[i], out[j] = out[j], out[i]
	}
	return out
}
