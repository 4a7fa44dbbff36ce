package relay

// Inflight returns the body bytes held for channel, and for all channels.
func (s *Server) Inflight(channel string) (ofChannel, total int64) {
	s.budget.mu.Lock()
	defer s.budget.mu.Unlock()
	return s.budget.channels[channel], s.budget.total
}

// ScanHead runs a header scan over b as it would arrive in pieces of
// step bytes, and returns where it stopped: the end of the header (done),
// or why it was refused, and the status framingVerdict gives a done one.
func ScanHead(b []byte, step int) (done bool, bad, status string, end int) {
	var h headScan
	for n := min(step, len(b)); ; n = min(n+step, len(b)) {
		h.scan(b[:n])
		if h.done || h.bad != "" || n == len(b) {
			break
		}
	}
	if h.done {
		status, _ = h.framingVerdict()
	}
	return h.done, h.bad, status, h.pos
}
