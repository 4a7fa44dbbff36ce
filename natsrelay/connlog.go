package natsrelay

import (
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnLog logs a relay's NATS connection for the operator: its loss, its
// return, and the errors nats.go reports apart from any call (its
// ErrorHandler: a watch whose heartbeats stopped, "consumer not
// active", a slow consumer). While NATS is away such an error comes again
// and again (a watch's every 10 s): each is logged once, when it first
// comes, and once more when NATS is back, with how many times it came
// meanwhile. One that keeps coming while the connection holds (JetStream
// without its quorum) is said again with its count when it comes Every
// after it was last said. At most maxErrs different texts are counted
// apart (a refused subscription names its subject); the others together.
// Its zero value needs Logf.
type ConnLog struct {
	// Logf writes a line of the relay's log.
	Logf func(format string, args ...any)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Every is how often an error that keeps coming is said again, with
	// its count; 0 is 10 minutes.
	Every time.Duration

	mu   sync.Mutex
	errs map[string]*repeated // by the error's text, since NATS was last back
}

// maxErrs bounds the different errors a ConnLog counts apart; the others
// are counted together under otherErrs.
const maxErrs = 32

const otherErrs = "other errors"

// repeated is an error that came n times since since, when it was last
// said.
type repeated struct {
	n     int
	since time.Time
}

func (l *ConnLog) every() time.Duration {
	if l.Every > 0 {
		return l.Every
	}
	return 10 * time.Minute
}

// Options are the nats.go options that make l log the connection's
// events. Given to nats.Connect after others, they take the place of
// their handlers.
func (l *ConnLog) Options() []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { l.lost(err) }),
		nats.ReconnectHandler(l.back),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { l.failed(err) }),
	}
}

func (l *ConnLog) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *ConnLog) lost(err error) {
	l.Logf("relay: NATS connection lost (%v); reconnecting. Meanwhile deliveries can be neither queued nor passed to other relays", err)
}

// failed logs err the first time it comes since NATS was last back, and
// counts it after.
func (l *ConnLog) failed(err error) {
	if err == nil {
		return
	}
	key, now := err.Error(), l.now()
	l.mu.Lock()
	if _, ok := l.errs[key]; !ok && len(l.errs) >= maxErrs {
		key = otherErrs
	}
	if r := l.errs[key]; r != nil {
		r.n++
		if now.Sub(r.since) < l.every() {
			l.mu.Unlock()
			return
		}
		n, since := r.n, r.since
		r.n, r.since = 0, now
		l.mu.Unlock()
		l.Logf("relay: NATS: %s: %d times in %s, and still coming (said again every %s while it lasts)", key, n, now.Sub(since).Round(time.Second), l.every())
		return
	}
	if l.errs == nil {
		l.errs = make(map[string]*repeated)
	}
	l.errs[key] = &repeated{n: 1, since: now}
	l.mu.Unlock()
	if key == otherErrs {
		l.Logf("relay: NATS: %v (said once: this and other errors, too many different ones to say apart, counted together until the connection is back)", err)
		return
	}
	l.Logf("relay: NATS: %v (said once: counted until the connection is back)", err)
}

// back logs the connection's return, and the errors counted meanwhile.
func (l *ConnLog) back(nc *nats.Conn) {
	l.mu.Lock()
	errs := l.errs
	l.errs = nil
	l.mu.Unlock()
	l.Logf("relay: NATS connection back: %s", nc.ConnectedUrlRedacted())
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	now := l.now()
	for _, k := range keys {
		r := errs[k]
		if r.n == 0 {
			continue // said with its count already, and not come since
		}
		l.Logf("relay: NATS: %s: %d times in %s, until the connection was back", k, r.n, now.Sub(r.since).Round(time.Second))
	}
}
