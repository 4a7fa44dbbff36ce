package natsrelay

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook/relay"
)

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
