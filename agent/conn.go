package agent

// The agent's connection to the relay.
//
// Run keeps one connection up at a time. relay.Dial opens it and reads
// the relay's hello (the public URL, the deliveries queued meanwhile, the
// largest body, which the connection then accepts);
// Config.OnConnect reports it as a Connection, saying how long the
// channel was down when it is a reconnection. When a connection is lost
// the agent dials again: at once to the next of Config.RelayFallbacks
// (which each agent tries in an order of its own, so that the agents of an
// instance that dies spread over the others rather than all landing on the
// next one in a shared list), and once every URL failed, after a jittered wait that doubles from
// Config.MinBackoff to Config.MaxBackoff and is back to MinBackoff after a
// success. The relay rejecting the credentials, or another agent taking
// the channel over, ends Run instead. While the store cannot take a write
// (a full disk), the agent does not connect (health.go: waitWritable). The
// deliveries of a connection are served by workers.go.

import (
	"context"
	"errors"
	"time"

	"github.com/devhook/devhook/relay"
)

// Connection is a connection to the relay that just opened, for output.
type Connection struct {
	PublicURL string
	// Queued is how many deliveries waited in the relay's queue; they
	// follow now. 0 from a relay that does not say.
	Queued int
	// Reconnect: an earlier connection of this Run was lost, Down ago.
	Reconnect bool
	Down      time.Duration
}

// stayConnected connects to the relay and serves each connection until
// ctx ends, reconnecting when it is lost: at once to the next of the
// relay's URLs, with capped, jittered exponential backoff once every one
// failed. It returns what Run returns.
func (a *Agent) stayConnected(ctx context.Context) error {
	backoff := a.cfg.MinBackoff
	var lost time.Time // when the last connection ended; zero before the first
	relays := append([]string{a.cfg.RelayURL}, a.shuffled(a.cfg.RelayFallbacks)...)
	at := 0 // the relay tried next
	for {
		if !a.waitWritable(ctx) {
			return nil
		}
		conn, err := relay.Dial(ctx, relay.DialConfig{RelayURL: relays[at], Credentials: a.cfg.Credentials, Network: a.cfg.RelayNetwork})
		switch {
		case ctx.Err() != nil:
			if conn != nil {
				conn.Close()
			}
			return nil
		case errors.Is(err, relay.ErrRejected):
			return err
		case err != nil && len(relays) > 1:
			if at = (at + 1) % len(relays); at != 0 {
				a.cfg.Logf("relay %s unreachable (%v); trying %s", relays[(at+len(relays)-1)%len(relays)], err, relays[at])
				continue
			}
			fallthrough
		case err != nil:
			wait := a.jitter(backoff)
			var ue *relay.UnreachableError
			if errors.As(err, &ue) { // says which relay and what to check
				a.cfg.Logf("%v; retrying in %s", err, wait.Round(time.Millisecond))
			} else {
				a.cfg.Logf("relay unreachable (%v); retrying in %s", err, wait.Round(time.Millisecond))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			backoff = min(backoff*2, a.cfg.MaxBackoff)
			continue
		}
		backoff = a.cfg.MinBackoff
		if a.cfg.OnConnect != nil {
			c := Connection{PublicURL: conn.PublicURL(), Queued: conn.Queued()}
			if !lost.IsZero() {
				c.Reconnect, c.Down = true, a.cfg.Now().Sub(lost)
			}
			a.cfg.OnConnect(c)
		}
		err = a.serve(ctx, conn)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, relay.ErrReplaced) {
			return err
		}
		lost = a.cfg.Now()
		a.cfg.Logf("connection to the relay lost (%v); reconnecting", err)
	}
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

// jitter returns a random wait between d/2 and 3d/2.
func (a *Agent) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(a.cfg.Rand(int64(d))) + d/2
}
