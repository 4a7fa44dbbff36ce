package natsrelay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook/relay"
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

func (r *Router) holder(channel string) relay.Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.local[channel]; h != nil {
		return h.e
	}
	return nil
}
