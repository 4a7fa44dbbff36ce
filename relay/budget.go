package relay

import (
	"net/http"
	"sync"
)

// budget counts the body bytes the relay holds, per channel and in all.
type budget struct {
	maxChannel, maxTotal int64

	mu       sync.Mutex
	total    int64
	channels map[string]int64
}

// take holds n more bytes for channel, or answers the status that refuses
// them: 429 over the channel's bound, 503 over the relay's.
func (b *budget) take(channel string, n int64) int {
	if n <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.channels[channel]+n > b.maxChannel:
		return http.StatusTooManyRequests
	case b.total+n > b.maxTotal:
		return http.StatusServiceUnavailable
	}
	b.channels[channel] += n
	b.total += n
	return 0
}

func (b *budget) give(channel string, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if b.channels[channel] -= n; b.channels[channel] <= 0 {
		delete(b.channels, channel)
	}
}
