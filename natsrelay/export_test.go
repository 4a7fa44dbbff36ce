package natsrelay

// SetBeforePart makes s call f before each part of an object is read to
// be written, with the bytes read so far, and g (if not nil) between an
// object and its entry: a test's way of stopping an instance between
// parts.
func (s *Store) SetBeforePart(f func(written int), g func()) { s.beforePart, s.beforeEntry = f, g }

// SetBeforePart makes r call f before it sends part i ≥ 1 of a delivery or
// an answer in parts.
func (r *Router) SetBeforePart(f func(i int)) { r.beforePart = f }

// PartSize is the largest payload of one message on the Store's
// connection.
func (s *Store) PartSize() int { return partSize(s.cfg.Conn) }
