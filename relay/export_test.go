package relay

// FrameHeaderLen exposes frameHeaderLen to the tests.
var FrameHeaderLen = frameHeaderLen

// Inflight returns the body bytes held for channel, and for all channels.
func (s *Server) Inflight(channel string) (ofChannel, total int64) {
	s.budget.mu.Lock()
	defer s.budget.mu.Unlock()
	return s.budget.channels[channel], s.budget.total
}
