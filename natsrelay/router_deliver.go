package natsrelay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

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

var _ relay.RunKicker = (*Router)(nil)

var errAgentMoved = errors.New("the channel's agent attached anew while the delivery was with another relay")

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
		return nil, fmt.Errorf("natsrelay: pass delivery %s to the relay holding channel %s: %w", d.ID, d.Channel, why(rctx, err))
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

// KickRun implements relay.RunKicker: Kick, saying which delivery was
// queued and of which run, to the agent's instance too (in the kick's
// headers), so that its connection holds only that run's live
// deliveries behind the queue.
func (r *Router) KickRun(channel, id, run string) {
	if e := r.holder(channel); e != nil {
		kickRun(e, id, run)
		return
	}
	v, ok := headerRun(run)
	if !ok {
		r.Kick(channel) // too long for a header: every run waits until the queue is sent
		return
	}
	if validToken(channel) && r.cfg.Conn.IsConnected() {
		r.cfg.Conn.PublishMsg(&nats.Msg{Subject: r.subject(channel, "kick"),
			Header: nats.Header{hdrKickID: {id}, hdrKickRun: {v}}})
	}
}

// Headers of a kick from KickRun.
const (
	hdrKickID  = "Devhook-Delivery"
	hdrKickRun = "Devhook-Run"
)

// kickRun kicks e for delivery id of run, or only kicks it when it cannot
// be told the run.
func kickRun(e relay.Endpoint, id, run string) {
	if re, ok := e.(relay.RunEndpoint); ok {
		re.KickRun(id, run)
		return
	}
	e.Kick()
}

// serve handles a message for a local agent from another instance.
func (r *Router) serve(channel string, m *nats.Msg) {
	if strings.HasSuffix(m.Subject, ".kick") {
		e := r.holder(channel)
		switch id := m.Header.Get(hdrKickID); {
		case e == nil:
		case id != "":
			if run, ok := runOfHeader(m.Header.Get(hdrKickRun)); ok {
				kickRun(e, id, run)
			} else {
				e.Kick()
			}
		default:
			e.Kick() // from Kick, or an instance of an earlier devhook
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
