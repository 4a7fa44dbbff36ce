package relay

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
)

// Channel is a relay channel: a public URL path and the hash of the token
// its agent connects with.
type Channel struct {
	ID        string    `json:"id"`
	TokenHash []byte    `json:"token_hash"`
	CreatedAt time.Time `json:"created_at"`
	// LastOpened is when an agent last opened the channel (connected to
	// it); zero when none has since it was created. A channel idle for
	// Config.ChannelIdle is removed with its queue.
	LastOpened time.Time `json:"last_opened,omitzero"`
}

// Store is what the relay keeps: channels, and the queue of deliveries that
// wait for their agent. boltrelay.Store implements it over bbolt; a
// clustered relay would implement it over a shared log.
//
// Enqueue returns only once the delivery is durable: the sender gets 202 on
// the strength of it. Dequeue likewise. The same id enqueued twice is kept
// once; dequeuing an id not in the queue is not an error.
//
// Dequeue removes many deliveries in one call, the acknowledgements the
// relay gathered while the previous removal was being made: a store makes
// them one write where it can (bbolt: one transaction, one fsync; NATS:
// the purges sent together, the channel's usage counted down once), so
// that a queue drains at many deliveries per fsync or round trip. An
// error means that any of them may or may not have been removed: the
// relay counts none of them removed and tries them all again after a
// backoff, which removes no delivery twice (an id no longer queued is
// skipped, and counted down nowhere).
type Store interface {
	PutChannel(ch Channel) error
	// Channel returns an error with code devhook.ENOTFOUND for an unknown id.
	Channel(id string) (Channel, error)
	Enqueue(channel string, d *devhook.Delivery) error
	// Queued returns up to limit deliveries with ids after after ("" = from
	// the start), in id order, bodies included. (A clustered store returns
	// them in the order they were queued, and after is an id it returned.)
	// An entry that cannot be read ends the batch: the deliveries before it
	// are returned with an error wrapping *UnreadableError, so that the
	// relay can park it and go on.
	Queued(channel string, after string, limit int) ([]*devhook.Delivery, error)
	Dequeue(channel string, ids ...string) error
	// Park moves delivery id out of channel's queue into a place kept for
	// deliveries the relay can never send, with the reason, so that it no
	// longer holds up the ones behind it. There it waits for an operator
	// (devhook relay parked), who may put it back in the queue or drop it.
	Park(channel, id, reason string) error
}

// Parked is a delivery the relay set aside because it can never be sent
// to its agent (Store.Park).
type Parked struct {
	Channel string `json:"channel"`
	ID      string `json:"id"`
	Reason  string `json:"reason"`
	// ReceivedAt is when the relay received the delivery: the delivery's
	// own time, or its id's when it cannot be decoded.
	ReceivedAt time.Time `json:"received_at"`
	// ParkedAt is when it was parked; zero when the store does not say.
	ParkedAt time.Time `json:"parked_at,omitzero"`
	// Size is the body's length in bytes; -1 when the delivery cannot be
	// decoded.
	Size int `json:"size"`
	// Delivery is the delivery as it was queued; nil when it cannot be
	// decoded. A list of parked deliveries leaves the body out.
	Delivery *devhook.Delivery `json:"delivery,omitempty"`
}

// IDTime is the time of a delivery id, a UUIDv7 as the relay makes them;
// zero for an id that is not one.
func IDTime(id string) time.Time {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return time.Time{}
	}
	sec, nsec := u.Time().UnixTime()
	return time.Unix(sec, nsec).UTC()
}

// QueueCounter is a Store that can count a channel's queue cheaply. The
// relay then tells a connecting agent how many queued deliveries follow
// (the hello's status field). Optional: a Store without it says nothing.
type QueueCounter interface {
	QueueLen(channel string) (int, error)
}

// QueueRunCounter is a Store that can list the run (the run_id of a
// run.status body) of each delivery in a channel's queue, by delivery id
// (deliveries that are not a run's left out). The relay then knows, from
// an agent's connect, which runs the queue holds, and queues only their
// live run.status deliveries behind it (behind.go). Optional: with a
// Store without it, every run.status delivery of the channel waits until
// the queue is sent. An entry that cannot be read is left out.
type QueueRunCounter interface {
	QueuedRuns(channel string) (map[string]string, error)
}

// UnreadableError names a queued entry that cannot be decoded.
type UnreadableError struct {
	ID  string
	Err error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("queued delivery %s cannot be read: %v", e.ID, e.Err)
}

func (e *UnreadableError) Unwrap() error { return e.Err }
