package relay

import (
	"errors"
	"fmt"
	"time"
)

// Quotas of the queue. Every Store keeps its queue within a Quota, the
// same for the single relay (bbolt) and a cluster (NATS):
//
//   - a channel's queue holds at most ChannelBytes and ChannelDeliveries:
//     beyond, Enqueue fails with ErrChannelFull and the sender gets 429
//     with Retry-After;
//   - the queues of all channels hold at most TotalBytes: beyond, Enqueue
//     fails with ErrQueueFull and the sender gets 503 with Retry-After;
//   - a queued delivery older than MaxAge is dropped by the store's
//     Expire, which the Server calls every SweepInterval, counting what
//     it drops in /metrics and saying so in its log.
//
// A refused delivery changes nothing that is queued, and other channels
// go on. The bytes of a delivery are those of its queue entry: body, head
// (method, path, query, headers) and ids. A disk (or JetStream) that is
// full makes Enqueue fail with ErrStorageFull: 503 with Retry-After,
// nothing acknowledged lost, and the next Enqueue after space returns
// succeeds.

// Defaults of Quota and of the channels' lifetime.
const (
	DefaultChannelQueueBytes      = 64 << 20
	DefaultChannelQueueDeliveries = 10000
	DefaultQueueBytes             = 1 << 30
	DefaultQueueMaxAge            = 7 * 24 * time.Hour
	DefaultChannelIdle            = 30 * 24 * time.Hour
	DefaultSweepInterval          = time.Minute
)

// Quota bounds a Store's queue. Zero values mean defaults.
type Quota struct {
	// ChannelBytes bounds the bytes queued for one channel.
	ChannelBytes int64
	// ChannelDeliveries bounds the deliveries queued for one channel.
	ChannelDeliveries int
	// TotalBytes bounds the bytes queued for all channels together.
	TotalBytes int64
	// MaxAge is how long a queued delivery waits for its agent.
	MaxAge time.Duration
}

// WithDefaults returns q with its zero values set to the defaults, or an
// error for a negative value or a channel's bound above the relay's.
func (q Quota) WithDefaults() (Quota, error) {
	if q.ChannelBytes < 0 || q.ChannelDeliveries < 0 || q.TotalBytes < 0 || q.MaxAge < 0 {
		return q, errors.New("relay: a queue quota is negative")
	}
	if q.TotalBytes == 0 {
		q.TotalBytes = DefaultQueueBytes
	}
	if q.ChannelBytes == 0 {
		q.ChannelBytes = min(DefaultChannelQueueBytes, q.TotalBytes)
	}
	if q.ChannelDeliveries == 0 {
		q.ChannelDeliveries = DefaultChannelQueueDeliveries
	}
	if q.MaxAge == 0 {
		q.MaxAge = DefaultQueueMaxAge
	}
	if q.ChannelBytes > q.TotalBytes {
		return q, fmt.Errorf("relay: the bytes queued per channel (%d) may not exceed the bytes queued in all (%d)", q.ChannelBytes, q.TotalBytes)
	}
	return q, nil
}

// Errors of Store.Enqueue, wrapped: the Server answers the sender by them.
var (
	// ErrChannelFull: the channel's queue is at its quota (429).
	ErrChannelFull = errors.New("the channel's queue is full")
	// ErrQueueFull: the queues of all channels are at the relay's quota (503).
	ErrQueueFull = errors.New("the relay's queue is full")
	// ErrStorageFull: the disk (or JetStream's storage) has no room (503).
	ErrStorageFull = errors.New("the relay's storage is full")
)

// Expired is what Store.Expire dropped of one channel's queue.
type Expired struct {
	Channel    string
	Deliveries int
	Bytes      int64
}

// RemovedChannel is a channel Store.RemoveIdleChannels removed, with what
// its queue (and parked deliveries) held. LastOpened is zero for a queue
// whose channel was gone already: deliveries queued as it was removed.
type RemovedChannel struct {
	ID         string
	Deliveries int
	Bytes      int64
	LastOpened time.Time
}

// Sweeper is the part of a Store that removes what outlived its time: the
// Server calls it every SweepInterval. Both stores implement it.
type Sweeper interface {
	// Expire drops the queued deliveries older than the quota's MaxAge
	// at now and returns what it dropped, by channel.
	Expire(now time.Time) ([]Expired, error)
	// TouchChannel records that an agent opened channel at t.
	TouchChannel(id string, t time.Time) error
	// RemoveIdleChannels removes the channels no agent opened (nor was
	// created) since before, with their queued and parked deliveries,
	// except those for which inUse (when not nil) reports true: an agent
	// holds them now. inUse is asked only of channels idle since before,
	// outside any transaction of the store.
	RemoveIdleChannels(before time.Time, inUse func(channel string) bool) ([]RemovedChannel, error)
}

// lastOpened is the last time an agent opened ch, or its creation.
func (ch Channel) lastOpened() time.Time {
	if ch.LastOpened.After(ch.CreatedAt) {
		return ch.LastOpened
	}
	return ch.CreatedAt
}

// IdleSince reports whether no agent opened ch (nor was it created) since
// before: a channel RemoveIdleChannels removes.
func (ch Channel) IdleSince(before time.Time) bool { return ch.lastOpened().Before(before) }
