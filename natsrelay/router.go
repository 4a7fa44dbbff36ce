package natsrelay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// Router is the cluster's relay.Router: local agents in a map, as
// relay.Hub, and the agents of other instances through NATS.
type Router struct {
	cfg    Config
	id     string // this instance
	link   *link
	agents jetstream.KeyValue
	ctx    context.Context // canceled by Close: deliveries for local agents from other instances
	cancel context.CancelFunc
	wg     sync.WaitGroup // watcher, and deliveries from other instances

	announce  chan struct{} // a holder is pending, or NATS is back: announceLoop goes
	resyncDue atomic.Bool   // NATS is back: the watch of the agents bucket is made anew
	rewatched chan struct{} // resync replaced watch

	mu      sync.Mutex
	local   map[string]*holder
	waiting map[string]map[*waiter]struct{} // deliveries passed to another instance, by channel
	nonce   uint64
	closed  bool
	watch   jetstream.KeyWatcher

	// Tests only (export_test.go): called before part i ≥ 1 of a
	// delivery or answer in parts is sent; called by the watch with
	// each put of the agents bucket, and the function acting on it.
	beforePart func(i int)
	watched    func(channel string, seen func())
}

// waiter is a delivery passed to the instance holding its channel's agent,
// waiting for the answer. When the channel's agent attaches anew on another
// instance (a put in the agents bucket newer than at), the waiter is
// canceled with errAgentMoved: the instance it waits on may have died with
// the delivery, and nothing would answer it before the relay's timeout
// (35 s by default). Deliver then has it queued, and the agent gets it
// where it is now.
//
// at is the channel's entry read before the delivery was sent: the agent
// it went to. The watch of the bucket runs behind (under load, by a second
// or more): the put of that very agent, or of an older one, may come after
// the delivery left, and is no new attachment. Nor is an agent attached
// anew on the instance the delivery went to: that instance is alive, and
// answers, from its new agent (which took over the subscription) or with
// no-agent. With no entry when it was sent, the delivery found a
// responder only if an agent was announced since (Attach announces before
// it subscribes): the first one announced is taken for the agent it went
// to.
type waiter struct {
	cancel context.CancelCauseFunc
	at     agentEntry
}

// agentEntry is an entry of the agents bucket: the revision at which an
// agent was announced, and the instance holding it. The zero agentEntry
// is none.
type agentEntry struct {
	rev      uint64
	instance string
}

func entryOf(value string, rev uint64) agentEntry {
	instance, _, _ := strings.Cut(value, "/")
	return agentEntry{rev: rev, instance: instance}
}

// supersedes reports whether e is an agent attached after at, on another
// instance.
func (e agentEntry) supersedes(at agentEntry) bool {
	return e.rev > at.rev && e.instance != at.instance
}

var errAgentMoved = errors.New("the channel's agent attached anew while the delivery was with another relay")

// holder is the local agent of a channel.
type holder struct {
	e     relay.Endpoint
	value string // its agents-bucket value: instance/nonce
	rev   uint64 // its revision in the bucket; 0 until Put returned
	newer uint64 // the highest revision of another agent seen before rev was known
	sub   *nats.Subscription
	// pending: its Put failed (NATS away), announceLoop tries again;
	// at is when it attached, to tell whether an agent announced
	// meanwhile elsewhere is newer.
	pending bool
	at      time.Time
}

var _ relay.Router = (*Router)(nil)

// Reply headers of a delivery passed to another instance.
const (
	hdrError    = "Devhook-Error"
	errNoAgent  = "no-agent"
	errTimeout  = "timeout"
	errInternal = "internal"
)

// OpenRouter creates or updates the agents bucket, starts watching it and
// returns the Router. Close stops it.
func OpenRouter(ctx context.Context, cfg Config) (*Router, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("natsrelay: %w", err)
	}
	var b [8]byte
	rand.Read(b[:])
	r := &Router{cfg: cfg, id: hex.EncodeToString(b[:]), local: make(map[string]*holder), waiting: make(map[string]map[*waiter]struct{}),
		announce: make(chan struct{}, 1), rewatched: make(chan struct{}, 1)}
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	r.agents, err = js.CreateOrUpdateKeyValue(cctx, jetstream.KeyValueConfig{
		Bucket: cfg.Prefix + "_agents", Description: "devhook relay: the newest agent of each channel, by instance", History: 1,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, TTL: cfg.Quota.MaxAge,
	})
	if err != nil {
		return nil, jsError("create the agents bucket", err)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.watch, err = r.agents.WatchAll(r.ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		r.cancel()
		return nil, fmt.Errorf("natsrelay: watch the agents bucket: %w", err)
	}
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.watchLoop() }()
	go func() { defer r.wg.Done(); r.announceLoop() }()
	// Kicks published by other instances while this one was cut off from
	// NATS are lost: after a reconnect, every local agent's queue is read
	// again, so that what was queued meanwhile goes out without waiting
	// for the next kick; and the agents that attached meanwhile are
	// announced.
	r.link = newLink(cfg.Conn, cfg.LostWait, func() {
		r.kickAll()
		r.resyncDue.Store(true)
		r.wake()
	})
	return r, nil
}

// wake makes announceLoop look for pending holders.
func (r *Router) wake() {
	select {
	case r.announce <- struct{}{}:
	default:
	}
}

// Catching up after NATS comes back: the watch of the agents bucket is
// made anew (the one under way would notice the loss only when its
// heartbeats fail, seconds later) and the entries of the local agents'
// channels read, for agents that attached elsewhere meanwhile (resync);
// an agent that attached while NATS was away (its Put failed) is
// announced, so that a newer agent elsewhere replaces it, and it replaces
// older ones. Tried at each reconnect, and between, after a backoff
// (retry.go) while it fails.
const (
	announceMin = 100 * time.Millisecond
	announceMax = 30 * time.Second
)

// announceLoop announces the pending holders, as wake asks, until Close.
func (r *Router) announceLoop() {
	b := backoff{Min: announceMin, Max: announceMax}
	log := repeatLog{every: 10 * time.Minute}
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.announce:
		}
		for {
			var n int
			err := r.resync()
			if err == nil {
				n, err = r.announcePending()
			}
			if err == nil {
				log.ok(r.cfg.Logf, time.Now(), fmt.Sprintf("relay: caught up with the agents of other relays (%d announced)", n))
				b.reset()
				break
			}
			wait := b.next()
			log.fail(r.cfg.Logf, time.Now(), "relay: catch up with the agents of other relays after NATS was away: %v (tried again in %s, and when NATS is back)", err, wait.Round(time.Millisecond))
			if !r.backoff(wait) {
				return
			}
		}
	}
}

// backoff waits d, or less if NATS comes back meanwhile; it reports
// false if the Router is closed. An agent attaching waits its turn.
func (r *Router) backoff(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return false
		case <-r.announce:
			if r.resyncDue.Load() {
				return true // NATS is back: at once
			}
		case <-t.C:
			return true
		}
	}
}

// resync, when NATS came back since the last, watches the agents bucket
// anew and replaces the local agents whose channel another agent took
// meanwhile.
func (r *Router) resync() error {
	if !r.resyncDue.Swap(false) {
		return nil
	}
	err := r.rewatch()
	if err != nil {
		r.resyncDue.Store(true)
	}
	return err
}

func (r *Router) rewatch() error {
	_, cancel, err := r.link.ctx(r.ctx, r.cfg.Timeout)
	if err != nil {
		return err // not back after all
	}
	cancel()
	// The watch lives as long as the Router (r.ctx); its calls have
	// JetStream's own timeouts.
	w, err := r.agents.WatchAll(r.ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("watch the agents bucket: %w", err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		w.Stop()
		return nil
	}
	old := r.watch
	r.watch = w
	var held []string
	for ch, h := range r.local {
		if h.rev != 0 {
			held = append(held, ch)
		}
	}
	r.mu.Unlock()
	old.Stop()
	select {
	case r.rewatched <- struct{}{}:
	default:
	}
	// What the new watch cannot tell: puts while NATS was away.
	for _, ch := range held {
		if err := r.readAgent(ch); err != nil {
			return err
		}
	}
	return nil
}

// readAgent reads the agents bucket's entry of channel, and acts on it
// (seen).
func (r *Router) readAgent(channel string) error {
	ctx, cancel, err := r.link.ctx(r.ctx, r.cfg.Timeout)
	if err != nil {
		return err
	}
	defer cancel()
	e, err := r.agents.Get(ctx, channel)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("channel %s: read its agent: %w", channel, why(ctx, err))
	default:
		r.seen(channel, string(e.Value()), e.Revision(), false)
	}
	return nil
}

// announcePending announces the pending holders and returns how many it
// announced, stopping at the first failure.
func (r *Router) announcePending() (int, error) {
	r.mu.Lock()
	pending := map[string]*holder{}
	for ch, h := range r.local {
		if h.pending {
			pending[ch] = h
		}
	}
	r.mu.Unlock()
	n := 0
	for ch, h := range pending {
		if err := r.announceAgain(ch, h); err != nil {
			return n, fmt.Errorf("channel %s: %w", ch, err)
		}
		n++
	}
	return n, nil
}

// announceAgain announces h, pending holder of channel: unless an agent
// that attached after it is in the bucket (then h is replaced), it takes
// the bucket's entry with a compare-and-set.
func (r *Router) announceAgain(channel string, h *holder) error {
	ctx, cancel, err := r.link.ctx(r.ctx, r.cfg.Timeout)
	if err != nil {
		return err
	}
	defer cancel()
	var rev uint64
	e, err := r.agents.Get(ctx, channel)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err = r.agents.Create(ctx, channel, []byte(h.value))
	case err != nil:
	case string(e.Value()) == h.value:
		rev = e.Revision() // the failed Put was stored after all
	case e.Created().After(h.at):
		// Another agent attached after this one, elsewhere.
		r.mu.Lock()
		mine := r.local[channel] == h
		if mine {
			r.dropLocked(channel, h)
		}
		r.mu.Unlock()
		if mine {
			h.e.Replace()
		}
		return nil
	default:
		rev, err = r.agents.Update(ctx, channel, []byte(h.value), e.Revision())
	}
	if err != nil {
		return why(ctx, err) // a conflict too: read again on the next try
	}
	r.announced(channel, h, rev)
	return nil
}

// announced records that h, holder of channel, was put in the agents
// bucket at revision rev, and replaces it if a newer agent was seen.
func (r *Router) announced(channel string, h *holder, rev uint64) {
	r.mu.Lock()
	h.rev, h.pending = rev, false
	replace := r.local[channel] == h && h.newer > rev
	if replace {
		r.dropLocked(channel, h)
	}
	r.mu.Unlock()
	if replace {
		h.e.Replace()
	}
}

// kickAll kicks every local agent.
func (r *Router) kickAll() {
	r.mu.Lock()
	es := make([]relay.Endpoint, 0, len(r.local))
	for _, h := range r.local {
		es = append(es, h.e)
	}
	r.mu.Unlock()
	for _, e := range es {
		e.Kick()
	}
}

// ID is this instance's id in the cluster.
func (r *Router) ID() string { return r.id }

// Close stops watching, unsubscribes, and waits for deliveries passed by
// other instances to end (their agents are closed by the relay Server).
func (r *Router) Close() error {
	r.mu.Lock()
	r.closed = true
	for ch, h := range r.local {
		if h.sub != nil {
			r.unsubscribe(h.sub)
		}
		delete(r.local, ch)
	}
	w := r.watch
	r.mu.Unlock()
	w.Stop()
	r.cancel()
	r.wg.Wait()
	return nil
}

func (r *Router) subject(channel, what string) string {
	return r.cfg.Prefix + ".agent." + channel + "." + what
}

// Attach implements relay.Router: e holds channel here and everywhere. The
// agent it replaces, on this instance or another, is closed.
func (r *Router) Attach(channel string, e relay.Endpoint) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		e.Replace()
		return
	}
	old := r.local[channel]
	r.nonce++
	h := &holder{e: e, value: r.id + "/" + strconv.FormatUint(r.nonce, 10), at: time.Now()}
	if old != nil {
		h.sub = old.sub
	}
	r.local[channel] = h
	r.mu.Unlock()
	if old != nil && old.e != e {
		old.e.Replace()
	}
	// Announced first, then subscribed: a delivery another instance
	// passes on reaches this agent only once the agents bucket says where
	// it is, so that the announcement, seen late by that instance's
	// watch, is not taken for a newer agent (wait). Meanwhile it finds no
	// responder and is queued, for the queue read after Attach.
	r.announceFirst(channel, h)
	r.subscribe(channel, h)
}

// announceFirst puts h, new holder of channel, in the agents bucket; if
// that fails, announceLoop tries again.
func (r *Router) announceFirst(channel string, h *holder) {
	ctx, cancel, err := r.link.ctx(r.ctx, r.cfg.Timeout)
	var rev uint64
	if err == nil {
		rev, err = r.agents.Put(ctx, channel, []byte(h.value))
		err = why(ctx, err)
		cancel()
	}
	if err != nil {
		// Announced when NATS is back (announceLoop).
		r.cfg.Logf("relay: channel %s: announce the agent to other relays: %v; tried again when NATS is back", channel, err)
		r.mu.Lock()
		h.pending = true
		r.mu.Unlock()
		r.wake()
		return
	}
	r.announced(channel, h, rev)
}

// subscribe makes the subscription of h, holder of channel, for deliveries
// and kicks from other instances, unless it has one already (from the
// agent it replaced here).
func (r *Router) subscribe(channel string, h *holder) {
	r.mu.Lock()
	has := h.sub != nil || r.local[channel] != h
	r.mu.Unlock()
	if has || !validToken(channel) {
		return
	}
	sub, err := r.cfg.Conn.QueueSubscribe(r.subject(channel, "*"), r.cfg.Prefix, func(m *nats.Msg) { r.serve(channel, m) })
	if err == nil && r.cfg.Conn.IsConnected() {
		// Kicks published after the queue is read must find the
		// subscription in place. (While NATS is away, nats.go
		// makes it when the connection is back.)
		err = r.cfg.Conn.Flush()
	}
	if err != nil {
		r.cfg.Logf("relay: channel %s: subscribe for deliveries from other relays: %v", channel, err)
	}
	r.mu.Lock()
	if r.local[channel] == h && h.sub == nil {
		h.sub = sub
	} else if sub != nil {
		r.unsubscribe(sub) // detached or replaced meanwhile
	}
	r.mu.Unlock()
}

// dropLocked forgets h, the local holder of channel.
func (r *Router) dropLocked(channel string, h *holder) {
	if h.sub != nil {
		r.unsubscribe(h.sub)
	}
	delete(r.local, channel)
}

// unsubscribe ends sub, a subscription for a channel's deliveries, by
// draining it: the messages already on their way to it are served (serve
// answers no-agent if the channel has no agent here any more). Dropped
// unserved, a delivery would wait for the sender's timeout (35 s by
// default) before being queued.
//
// Not while NATS is away: nats.go would not send the drain's unsubscribe,
// and would subscribe again at the reconnect a subscription still
// draining, whose end then forgets it here only, leaving the NATS server
// sending deliveries to nothing. Unsubscribed at once, it is not
// subscribed again.
func (r *Router) unsubscribe(sub *nats.Subscription) {
	if r.cfg.Conn.IsConnected() && sub.Drain() == nil {
		return
	}
	sub.Unsubscribe()
}

// Detach implements relay.Router.
func (r *Router) Detach(channel string, e relay.Endpoint) {
	r.mu.Lock()
	h := r.local[channel]
	if h == nil || h.e != e {
		r.mu.Unlock()
		return
	}
	r.dropLocked(channel, h)
	rev := h.rev
	r.mu.Unlock()
	if rev == 0 {
		return
	}
	// Only if no agent took the channel since, anywhere. Left in place
	// when NATS is away: the next agent's Attach overwrites it.
	ctx, cancel, err := r.link.ctx(r.ctx, r.cfg.Timeout)
	if err != nil {
		return
	}
	defer cancel()
	r.agents.Delete(ctx, channel, jetstream.LastRevision(rev))
}

// wait registers a delivery of channel passed to another instance, whose
// agent is at in the agents bucket: the context it returns is canceled with
// errAgentMoved when the channel's agent attaches anew elsewhere
// (supersedes). stop unregisters it.
func (r *Router) wait(ctx context.Context, channel string, at agentEntry) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &waiter{cancel: cancel, at: at}
	r.mu.Lock()
	if r.waiting[channel] == nil {
		r.waiting[channel] = make(map[*waiter]struct{})
	}
	r.waiting[channel][w] = struct{}{}
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		delete(r.waiting[channel], w)
		if len(r.waiting[channel]) == 0 {
			delete(r.waiting, channel)
		}
		r.mu.Unlock()
		cancel(nil)
	}
}

// watchLoop replaces a local agent when a newer one attached elsewhere,
// and lets deliveries waiting on another instance for the channel go, with
// the watch of the moment: resync replaces it after a reconnect.
func (r *Router) watchLoop() {
	for {
		r.mu.Lock()
		w := r.watch
		r.mu.Unlock()
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			seen := func() { r.seen(e.Key(), string(e.Value()), e.Revision(), true) }
			r.mu.Lock()
			hook := r.watched
			r.mu.Unlock()
			if hook != nil {
				hook(e.Key(), seen)
			} else {
				seen()
			}
		}
		r.mu.Lock()
		closed, same := r.closed, r.watch == w
		r.mu.Unlock()
		switch {
		case closed:
			return
		case same:
			// Ended by itself (its subscription closed): resync
			// makes another.
			select {
			case <-r.ctx.Done():
				return
			case <-r.rewatched:
			}
		}
	}
}

// seen acts on the agents bucket's entry of channel at revision rev: the
// agent value attached there. With release, deliveries waiting on another
// instance for an agent it supersedes go (it is a put just made).
func (r *Router) seen(channel, value string, rev uint64, release bool) {
	r.mu.Lock()
	if release {
		e := entryOf(value, rev)
		for w := range r.waiting[channel] {
			switch {
			case w.at.instance == "" && e.rev > w.at.rev:
				w.at = e // the agent it went to, announced since
			case e.supersedes(w.at):
				w.cancel(errAgentMoved)
			}
		}
	}
	h := r.local[channel]
	var replaced relay.Endpoint
	switch {
	case h == nil || h.value == value:
	case h.rev == 0:
		h.newer = max(h.newer, rev) // Attach decides when its Put returns
	case rev > h.rev:
		r.dropLocked(channel, h)
		replaced = h.e
	}
	r.mu.Unlock()
	if replaced != nil {
		replaced.Replace()
	}
}

func (r *Router) holder(channel string) relay.Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.local[channel]; h != nil {
		return h.e
	}
	return nil
}

// Deliver implements relay.Router: to the local agent, or by request to
// the instance holding the channel (in parts when large, parts.go).
func (r *Router) Deliver(ctx context.Context, d *devhook.Delivery) (*wire.Answer, error) {
	if e := r.holder(d.Channel); e != nil {
		return e.Deliver(ctx, d)
	}
	if !validToken(d.Channel) {
		return nil, relay.ErrNoAgent
	}
	data, err := wire.EncodeDelivery(d)
	if err != nil {
		return nil, err
	}
	// The other instance enforces ResponseTimeout; the margin is for
	// the answer's way back.
	rctx, cancel, err := r.link.ctx(ctx, r.cfg.ResponseTimeout+min(5*time.Second, r.cfg.ResponseTimeout))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Queued, if the Store can (it cannot either, but says so to
		// the sender: 503).
		return nil, fmt.Errorf("%w: %w", relay.ErrNoAgent, err)
	}
	defer cancel()
	rctx, stop := r.wait(rctx, d.Channel, r.agentOf(rctx, d.Channel))
	defer stop()
	subject := r.subject(d.Channel, "deliver")
	var reply *nats.Msg
	answer := data
	if len(data) <= partSize(r.cfg.Conn) {
		reply, err = r.cfg.Conn.RequestMsgWithContext(rctx, &nats.Msg{Subject: subject, Data: data})
		if err == nil {
			answer = reply.Data
		}
	} else {
		reply, answer, err = r.requestInParts(rctx, subject, data)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, relay.ErrNoAgent
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(context.Cause(rctx), errAgentMoved):
		// Queued, the delivery reaches the agent where it attached now
		// (perhaps twice, if the instance it was with is alive after
		// all and passed it on: at least once).
		r.cfg.Logf("relay: channel %s: its agent attached anew while delivery %s was with another relay; queuing it", d.Channel, d.ID)
		return nil, relay.ErrNoAgent
	case errors.Is(context.Cause(rctx), ErrNATSAway):
		// The connection was lost with the request: the other relay
		// may have passed the delivery on, or not. Queued, it reaches
		// the agent (perhaps twice: at least once); or the Store cannot
		// queue it either, and the sender gets 503 and sends again.
		return nil, fmt.Errorf("%w: %w", relay.ErrNoAgent, why(rctx, err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		// No reply at all, not even the other relay's "timeout": it
		// died with the delivery, or never had it. Queued, the delivery
		// reaches the agent where it reconnects (perhaps twice: at least
		// once).
		r.cfg.Logf("relay: channel %s: the relay holding the agent did not answer delivery %s; queuing it", d.Channel, d.ID)
		return nil, relay.ErrNoAgent
	case err != nil:
		return nil, fmt.Errorf("natsrelay: pass delivery %s to the relay holding channel %s: %w", d.ID, d.Channel, err)
	}
	switch reply.Header.Get(hdrError) {
	case "":
	case errNoAgent:
		return nil, relay.ErrNoAgent
	case errTimeout:
		return nil, relay.ErrTimeout
	default:
		return nil, fmt.Errorf("natsrelay: the relay holding channel %s: %s", d.Channel, reply.Header.Get(hdrError))
	}
	a, err := wire.DecodeAnswer(answer)
	if err != nil {
		return nil, fmt.Errorf("natsrelay: answer to delivery %s from another relay: %w", d.ID, err)
	}
	return a, nil
}

// agentOf is channel's entry in the agents bucket, read from the bucket:
// the watch may not have seen it yet. None when there is none or it cannot
// be read.
func (r *Router) agentOf(ctx context.Context, channel string) agentEntry {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	e, err := r.agents.Get(ctx, channel)
	if err != nil {
		return agentEntry{}
	}
	return entryOf(string(e.Value()), e.Revision())
}

// Kick implements relay.Router.
func (r *Router) Kick(channel string) {
	if e := r.holder(channel); e != nil {
		e.Kick()
		return
	}
	// Not while NATS is away (nats.go would keep it for the
	// reconnect): the agent's instance reads its queues again then.
	if validToken(channel) && r.cfg.Conn.IsConnected() {
		r.cfg.Conn.Publish(r.subject(channel, "kick"), nil)
	}
}

// serve handles a message for a local agent from another instance.
func (r *Router) serve(channel string, m *nats.Msg) {
	if strings.HasSuffix(m.Subject, ".kick") {
		if e := r.holder(channel); e != nil {
			e.Kick()
		}
		return
	}
	if strings.HasSuffix(m.Subject, ".held") {
		m.Respond(nil) // HasAgent: this instance holds the channel's agent
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		replyError(m, errNoAgent)
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	// The agent's answer may take ResponseTimeout: not on the
	// subscription's goroutine, which would hold up the next.
	go func() {
		defer r.wg.Done()
		e := r.holder(channel)
		if e == nil {
			replyError(m, errNoAgent)
			return
		}
		data := m.Data
		if m.Header.Get(hdrParts) != "" {
			var err error
			if data, err = r.receiveParts(m); err != nil {
				// Not handed to the agent: the sender's relay
				// queues it, if it is still there.
				r.cfg.Logf("relay: channel %s: a delivery from another relay did not come whole: %v", channel, err)
				replyError(m, errInternal+": "+err.Error())
				return
			}
		}
		d, err := wire.DecodeDelivery(channel, data)
		if err != nil {
			replyError(m, errInternal+": "+err.Error())
			return
		}
		a, err := e.Deliver(r.ctx, d)
		switch {
		case errors.Is(err, relay.ErrTimeout):
			replyError(m, errTimeout)
			return
		case err != nil:
			// The agent went away (or this relay is closing): the
			// sender's relay queues the delivery.
			replyError(m, errNoAgent)
			return
		}
		data, err = wire.EncodeAnswer(d.ID, a)
		if err != nil {
			replyError(m, errInternal+": "+err.Error())
			return
		}
		if err := r.respond(m, data); err != nil {
			r.cfg.Logf("relay: channel %s: pass the answer to delivery %s back: %v", channel, d.ID, err)
		}
	}()
}

func replyError(m *nats.Msg, what string) {
	rm := &nats.Msg{Header: nats.Header{}}
	rm.Header.Set(hdrError, what)
	m.RespondMsg(rm)
}

// HasAgent implements relay.AgentLocator, for the sweeper of idle
// channels: whether an agent holds channel on any instance. Here; else by
// the agents bucket (a key left by an instance that died keeps the
// channel until the key's TTL); else, for an agent whose key is gone (an
// agent connected for longer than the TTL, or whose announcement failed),
// by a request to the instance subscribed for its deliveries: no
// responders means none holds it. An error (NATS away, no answer) means
// it cannot be told.
func (r *Router) HasAgent(channel string) (bool, error) {
	if r.holder(channel) != nil {
		return true, nil
	}
	if !validToken(channel) {
		return false, nil
	}
	ctx, cancel, err := r.link.ctx(r.ctx, r.cfg.Timeout)
	if err != nil {
		return false, fmt.Errorf("natsrelay: whether channel %s has an agent: %w", channel, err)
	}
	defer cancel()
	_, err = r.agents.Get(ctx, channel)
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return false, fmt.Errorf("natsrelay: whether channel %s has an agent: %w", channel, why(ctx, err))
	}
	_, err = r.cfg.Conn.RequestWithContext(ctx, r.subject(channel, "held"), nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("natsrelay: whether channel %s has an agent: %w", channel, why(ctx, err))
	}
	return true, nil
}
