package relay

import (
	"fmt"
	"time"

	"github.com/devhook/devhook"
)

// Channel is a relay channel: a public URL path and the hash of the token
// its agent connects with.
type Channel struct {
	ID        string    `json:"id"`
	TokenHash []byte    `json:"token_hash"`
	CreatedAt time.Time `json:"created_at"`
}

// Store is what the relay keeps: channels, and the queue of deliveries that
// wait for their agent. storage.RelayStore implements it over bbolt; a
// clustered relay would implement it over a shared log.
//
// Enqueue returns only once the delivery is durable: the sender gets 202 on
// the strength of it. Dequeue likewise. The same id enqueued twice is kept
// once; dequeuing an id not in the queue is not an error.
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
	Dequeue(channel, id string) error
	// Park moves delivery id out of channel's queue into a place kept for
	// deliveries the relay can never send (see the relay's log for why),
	// so that it no longer holds up the ones behind it.
	Park(channel, id, reason string) error
}

// QueueCounter is a Store that can count a channel's queue cheaply. The
// relay then tells a connecting agent how many queued deliveries follow
// (the hello's status field). Optional: a Store without it says nothing.
type QueueCounter interface {
	QueueLen(channel string) (int, error)
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
