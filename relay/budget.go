package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// budget counts the body bytes the relay holds, per channel and in all.
//
// A body is charged as its bytes arrive, never by what its Content-Length
// promises: a sender that declares 8 MiB, sends 10 bytes and stalls holds
// 10 bytes until --body-timeout ends it, so stalled senders cannot make a
// channel (429) or the relay (503) refuse the deliveries of others. A
// chunked body is charged as the chunked reader hands its bytes over,
// which it does once the buffer is full or a chunk ended. The buffer a
// body is read into grows with what arrived (readBody), so the memory a
// body holds is at most twice what it is charged, or minBodyBuffer.
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

// minBodyBuffer is the first buffer of a body whose Content-Length is
// larger, or unknown (chunked): what a sender that stalls at once makes
// the relay allocate.
const minBodyBuffer = 16 << 10

// readBody reads r's body within MaxBody and BodyTimeout, charging the
// in-flight budgets with each byte as it arrives. A declared
// Content-Length over MaxBody is refused by the caller before this reads;
// a chunked body is refused (413) as soon as its total passes MaxBody.
// release gives the bytes back; it must be called when the body is no
// longer used. A non-zero code is the status to refuse the delivery with.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, channel string) (body []byte, release func(), code int, msg string) {
	var held int64
	release = func() { s.budget.give(channel, held) }
	cl := r.ContentLength
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	src := http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	limit := s.cfg.MaxBody + 1 // one more byte to see a chunked body is over
	if cl >= 0 {
		limit = cl
	}
	buf := make([]byte, 0, min(limit, minBodyBuffer))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= limit {
				break // the server's body reader stops at Content-Length
			}
			// Grown by what arrived: doubled, never past the limit.
			buf = append(make([]byte, 0, min(2*int64(cap(buf)), limit)), buf...)
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		if n > 0 {
			if code := s.budget.take(channel, int64(n)); code != 0 {
				return nil, release, code, s.busy(code)
			}
			held += int64(n)
			buf = buf[:len(buf)+n]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &mbe):
				return nil, release, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is over the relay's limit of %d bytes", s.cfg.MaxBody)
			case errors.As(err, &ne) && ne.Timeout():
				return nil, release, http.StatusRequestTimeout, fmt.Sprintf("the body did not arrive within %s", s.cfg.BodyTimeout)
			}
			return nil, release, http.StatusBadRequest, "could not read the request body: " + err.Error()
		}
	}
	// Cleared once the body is in: a deadline left in place would cancel
	// the request's context while the sender waits for the agent.
	rc.SetReadDeadline(time.Time{})
	return buf, release, 0, ""
}
