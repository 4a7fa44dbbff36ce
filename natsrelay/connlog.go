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
// meanwhile. Its zero value needs Logf.
type ConnLog struct {
	// Logf writes a line of the relay's log.
	Logf func(format string, args ...any)
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	mu   sync.Mutex
	errs map[string]*repeated // by the error's text, since NATS was last back
}

// repeated is an error that came n times since since.
type repeated struct {
	n     int
	since time.Time
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
	key := err.Error()
	l.mu.Lock()
	if r := l.errs[key]; r != nil {
		r.n++
		l.mu.Unlock()
		return
	}
	if l.errs == nil {
		l.errs = make(map[string]*repeated)
	}
	l.errs[key] = &repeated{n: 1, since: l.now()}
	l.mu.Unlock()
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
		l.Logf("relay: NATS: %s: %d times in %s, until the connection was back", k, r.n, now.Sub(r.since).Round(time.Second))
	}
}
