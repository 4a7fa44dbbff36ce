package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// Errors of Router.Deliver and Endpoint.Deliver.
var (
	// ErrNoAgent: no agent holds the channel, or it went away before it
	// answered. The relay queues the delivery.
	ErrNoAgent = errors.New("no agent connected to the channel")
	// ErrTimeout: the agent did not answer within the relay's
	// ResponseTimeout. The sender gets 504; the agent has the delivery.
	ErrTimeout = errors.New("the agent did not answer in time")
	// ErrQueueFirst: the channel's queue holds deliveries not yet sent to
	// its agent; the relay queues a run.status delivery behind them (202),
	// so that it cannot overtake an earlier one of its run. It wraps
	// ErrNoAgent.
	ErrQueueFirst = fmt.Errorf("%w yet: its queue is being sent first", ErrNoAgent)
)

// Router knows which agent holds each channel, delivers to it and waits
// for its answer. Hub is the implementation for a single relay process; a
// cluster of relays would implement it with request/reply over a message
// bus, its Attach announcing the holder to the other nodes.
type Router interface {
	// Attach makes e the agent holding channel. An agent that held it
	// before, anywhere, is replaced: its Replace is called.
	Attach(channel string, e Endpoint)
	// Detach forgets e if it still holds channel.
	Detach(channel string, e Endpoint)
	// Deliver sends d to the agent holding d.Channel and returns its
	// answer. Errors: ErrNoAgent (queue d), ErrTimeout, ctx's error (the
	// sender went away), or another error when d cannot be sent at all.
	Deliver(ctx context.Context, d *devhook.Delivery) (*wire.Answer, error)
	// Kick tells the agent holding channel, if any, that its queue has
	// new deliveries.
	Kick(channel string)
}

// AgentLocator is a Router that can tell whether an agent holds a
// channel, on this relay or (in a cluster) on any: the sweeper never
// removes such a channel as idle, however long ago it was opened. Hub
// implements it, and so does the cluster's router. An error means it
// cannot be told: the channel is kept.
type AgentLocator interface {
	HasAgent(channel string) (bool, error)
}

// Endpoint is an agent connection as a Router sees it. The relay Server's
// WebSocket connections are Endpoints.
type Endpoint interface {
	Deliver(ctx context.Context, d *devhook.Delivery) (*wire.Answer, error)
	Kick()
	// Replace disconnects the agent because another one took its channel.
	Replace()
}

// Hub is the in-process Router: a map from channel to the connection
// holding it.
type Hub struct {
	mu sync.Mutex
	m  map[string]Endpoint
}

// NewHub returns an empty Hub.
func NewHub() *Hub { return &Hub{m: make(map[string]Endpoint)} }

// Attach implements Router.
func (h *Hub) Attach(channel string, e Endpoint) {
	h.mu.Lock()
	old := h.m[channel]
	h.m[channel] = e
	h.mu.Unlock()
	if old != nil && old != e {
		old.Replace()
	}
}

// Detach implements Router.
func (h *Hub) Detach(channel string, e Endpoint) {
	h.mu.Lock()
	if h.m[channel] == e {
		delete(h.m, channel)
	}
	h.mu.Unlock()
}

func (h *Hub) holder(channel string) Endpoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[channel]
}

// Deliver implements Router.
func (h *Hub) Deliver(ctx context.Context, d *devhook.Delivery) (*wire.Answer, error) {
	e := h.holder(d.Channel)
	if e == nil {
		return nil, ErrNoAgent
	}
	return e.Deliver(ctx, d)
}

// HasAgent implements AgentLocator.
func (h *Hub) HasAgent(channel string) (bool, error) { return h.holder(channel) != nil, nil }

// Kick implements Router.
func (h *Hub) Kick(channel string) {
	if e := h.holder(channel); e != nil {
		e.Kick()
	}
}

// KickRun implements RunKicker.
func (h *Hub) KickRun(channel, id, run string) {
	switch e := h.holder(channel).(type) {
	case RunEndpoint:
		e.KickRun(id, run)
	case Endpoint:
		e.Kick()
	}
}
