package agent

// Shares: no receiver holds every worker. When the agent forwards to more
// than one receiver (routes, or several --forward targets), a receiver
// that takes requests and never answers would otherwise hold a worker for
// each delivery sent to it, until --timeout ends each forward: once it
// held all of them, the agent read nothing more from the relay, and the
// deliveries of every other receiver waited behind it.
//
// So each receiver (a scheme and host: two routes to one server share its
// share) may have at most three quarters of the workers' forwards under
// way, and of the retrier's. A forward over its receiver's share is not
// sent: its attempt is recorded as not sent and why, a live delivery's
// sender gets 503 with Retry-After (the service sends it again), a queued
// one is owed and retried later, and a retry over the share waits for its
// next turn without counting as a try. With a single receiver there is no
// other to keep workers for, and no share.

import (
	"fmt"
	"net/url"
	"sync"
)

// shares counts the forwards under way to each receiver, against a limit.
type shares struct {
	limit int // under way at most per receiver; 0: no limit
	mu    sync.Mutex
	n     map[string]int
}

// newShares returns the shares of receivers, each at most limit of the
// n forwards the agent makes at once when there are several receivers.
func newShares(receivers, n int) *shares {
	s := &shares{n: make(map[string]int)}
	if receivers > 1 && n > 1 {
		s.limit = max(1, n-max(1, n/4))
	}
	return s
}

// receiverOf names target's receiver: its scheme and host.
func receiverOf(target *url.URL) string {
	return target.Scheme + "://" + target.Host
}

// receiverCount is how many receivers targets name.
func receiverCount(targets []*url.URL) int {
	seen := make(map[string]bool, len(targets))
	for _, t := range targets {
		seen[receiverOf(t)] = true
	}
	return len(seen)
}

// take takes a place in target's share. It returns false, and why, when
// the share is full: the forward is not to be sent.
func (s *shares) take(target *url.URL) (ok bool, why string) {
	if s == nil || s.limit == 0 {
		return true, ""
	}
	k := receiverOf(target)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[k] >= s.limit {
		return false, fmt.Sprintf("not sent: %d requests to %s are under way, none answered yet; devhook keeps its other workers for the other receivers", s.n[k], k)
	}
	s.n[k]++
	return true, ""
}

// full reports whether target's share is full now: a take would fail.
func (s *shares) full(target *url.URL) bool {
	if s == nil || s.limit == 0 {
		return false
	}
	k := receiverOf(target)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[k] >= s.limit
}

// give gives back a place take took in target's share.
func (s *shares) give(target *url.URL) {
	if s == nil || s.limit == 0 {
		return
	}
	k := receiverOf(target)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[k]--; s.n[k] <= 0 {
		delete(s.n, k)
	}
}
