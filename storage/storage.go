// Package storage keeps devhook's state in a bbolt file: the agent's
// deliveries, their attempts and an index by run id; and the relay's
// channels and its queue of deliveries waiting for an agent.
package storage

import (
	"time"

	"github.com/devhook/devhook"
)

// Defaults for retention.
const (
	DefaultMaxDeliveries = 100_000
	DefaultMaxAge        = 30 * 24 * time.Hour
)

// Config configures a DB. Zero values mean defaults.
type Config struct {
	MaxDeliveries int           // keep at most this many deliveries; 0 = DefaultMaxDeliveries, <0 = no limit
	MaxAge        time.Duration // drop deliveries older than this; 0 = DefaultMaxAge, <0 = no limit
	// NoSync skips fsync on commit. A killed process loses nothing (the
	// pages are written); a power loss may lose the last commits.
	NoSync bool
	Now    func() time.Time // nil = time.Now
}

// Channel is a relay channel: a public URL path and the hash of the token
// its agent connects with.
type Channel struct {
	ID        string    `json:"id"`
	TokenHash []byte    `json:"token_hash"`
	CreatedAt time.Time `json:"created_at"`
}

var _ = devhook.Delivery{}
