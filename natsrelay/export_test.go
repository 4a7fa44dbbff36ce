package natsrelay

import "strings"

// SetBeforePart makes s call f before each part of an object is read to
// be written, with the bytes read so far, and g (if not nil) before each
// entry is written, with the name of its object ("" for none): a test's
// way of stopping an instance between parts.
func (s *Store) SetBeforePart(f func(written int), g func(object string)) {
	s.beforePart, s.beforeEntry = f, g
}

// SetBeforePart makes r call f before it sends part i ≥ 1 of a delivery or
// an answer in parts.
func (r *Router) SetBeforePart(f func(i int)) { r.beforePart = f }

// PartSize is the largest payload of one message on the Store's
// connection.
func (s *Store) PartSize() int { return partSize(s.cfg.Conn) }

// SetWatched makes r's watch of the agents bucket call f with each put it
// gets, in place of acting on it: f calls seen to act. A test's way of
// holding the watch behind.
func (r *Router) SetWatched(f func(channel string, seen func())) {
	r.mu.Lock()
	r.watched = f
	r.mu.Unlock()
}

// Seen is how many times errors whose text holds part came since NATS
// was last back.
func (l *ConnLog) Seen(part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, r := range l.errs {
		if strings.Contains(k, part) {
			n += r.n
		}
	}
	return n
}

// Kept is how many different errors l counts.
func (l *ConnLog) Kept() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

// SetBeforeRunsFetch makes QueuedRuns call f once its consumer is made,
// before it reads the entries: a test's way of removing entries in
// between, a window too short to hit otherwise.
func (s *Store) SetBeforeRunsFetch(f func()) { s.beforeRunsFetch = f }

// Why is why: the error of a call whose context ctx was, said as what
// happened.
var Why = why
