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
// 10 bytes, so stalled senders cannot make a channel (429) or the relay
// (503) refuse the deliveries of others by what they promise. What they
// did send they hold for BodyStall, or two BodyRateWindows if they crawl
// (bodyPace), not for the whole BodyTimeout. A
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

// readBody reads r's body within MaxBody and the body's pace (bodyPace:
// BodyTimeout, BodyStall, BodyMinRate), charging the in-flight budgets
// with each byte as it arrives. A declared Content-Length over MaxBody is
// refused by the caller before this reads; a chunked body is refused
// (413) as soon as its total passes MaxBody. held is what the budgets
// were charged, on error too: the caller gives it back (budget.give) when
// the body is no longer used. A non-zero
// code is the status to refuse the delivery with: a body that stalls or
// crawls gets 408, and its bytes are given back as soon as the caller
// answers, not at BodyTimeout.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, channel string) (body []byte, held int64, code int, msg string) {
	cl := r.ContentLength
	rc := http.NewResponseController(w)
	pace := newBodyPace(time.Now(), &s.cfg)
	rc.SetReadDeadline(pace.set)
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
				return nil, held, code, s.busy(code)
			}
			held += int64(n)
			buf = buf[:len(buf)+n]
			// A window that fell short cuts the body, unless it is in.
			if !pace.arrived(time.Now(), n) && err == nil && int64(len(buf)) < limit {
				return nil, held, http.StatusRequestTimeout, pace.crawled(pace.got)
			}
			if d, moved := pace.next(); moved && err == nil {
				rc.SetReadDeadline(d)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &mbe):
				return nil, held, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is over the relay's limit of %d bytes", s.cfg.MaxBody)
			case errors.As(err, &ne) && ne.Timeout():
				return nil, held, http.StatusRequestTimeout, pace.why()
			}
			return nil, held, http.StatusBadRequest, "could not read the request body: " + err.Error()
		}
	}
	// Cleared once the body is in: a deadline left in place would cancel
	// the request's context while the sender waits for the agent.
	rc.SetReadDeadline(time.Time{})
	return buf, held, 0, ""
}

// bodyPace says when the sender of a body is to be cut, from the times
// its bytes arrive: at BodyTimeout from the body's start; when no byte
// arrived for BodyStall; or at the end of a BodyRateWindow, after the
// first, that brought fewer than BodyMinRate bytes a second. The first
// window is a grace (TCP's slow start, a 100 Continue's round trip); a
// stalled or crawling sender holds the bytes it sent for BodyStall, or
// two windows, not for BodyTimeout.
//
// It is kept to the connection's read deadline, the only way a blocked
// read ends, without a goroutine or timer of its own: the deadline in
// place (set) is never before the rule's (rule), and moved past it by
// slack when the rule passes it. A body that streams moves it once per
// slack, not at each read, and is cut at most slack after the rule says.
// The rule's deadline never moves back (arrived only adds bytes and
// starts windows once the last one is judged).
//
// Bytes are counted as the body's reader hands them over: the framing of
// a chunked body (sizes, extensions, trailers) is no progress.
type bodyPace struct {
	stall   time.Duration // 0: none
	window  time.Duration
	need    int64         // bytes each window after the first must bring; 0: none
	timeout time.Duration // BodyTimeout
	hard    time.Time     // BodyTimeout's end
	slack   time.Duration
	last    time.Time // when bytes last arrived, or the body's start
	end     time.Time // the end of the current window
	grace   bool      // the current window is the first one
	got     int64     // bytes the current window brought
	set     time.Time // the read deadline in place
}

func newBodyPace(now time.Time, cfg *Config) bodyPace {
	p := bodyPace{window: cfg.BodyRateWindow, timeout: cfg.BodyTimeout, hard: now.Add(cfg.BodyTimeout), last: now, grace: true}
	p.end = now.Add(p.window)
	p.slack = cfg.BodyTimeout
	if cfg.BodyStall > 0 {
		p.stall = cfg.BodyStall
		p.slack = min(p.slack, p.stall)
	}
	if cfg.BodyMinRate > 0 {
		p.need = max(1, int64(float64(cfg.BodyMinRate)*p.window.Seconds()))
		p.slack = min(p.slack, p.window)
	}
	p.slack /= 8
	p.set = earlier(p.rule().Add(p.slack), p.hard)
	return p
}

// rule is when the sender is to be cut if no more bytes arrive.
func (p *bodyPace) rule() time.Time {
	stallAt, rateAt := p.terms()
	return earlier(p.hard, earlier(stallAt, rateAt))
}

// terms are when the stall bound and the rate would cut the sender if no
// more bytes arrive: the hard deadline for a bound that is off.
func (p *bodyPace) terms() (stallAt, rateAt time.Time) {
	stallAt, rateAt = p.hard, p.hard
	if p.stall > 0 {
		stallAt = p.last.Add(p.stall)
	}
	if p.need > 0 {
		rateAt = p.end // this window falls short
		if p.grace || p.got >= p.need {
			rateAt = p.end.Add(p.window) // the next one would
		}
	}
	return stallAt, rateAt
}

// arrived counts n bytes that arrived at now; false when a window ended
// short of the minimum. The bytes of a read that ends after a window's end
// count for that window when it is short of the minimum (they may have
// arrived before its end, on a machine slow to read them), for the next
// one otherwise.
func (p *bodyPace) arrived(now time.Time, n int) bool {
	p.last = now
	carry := int64(n)
	for p.need > 0 && !now.Before(p.end) {
		if !p.grace && p.got < p.need {
			p.got += carry
			carry = 0
			if p.got < p.need {
				return false
			}
		}
		p.grace, p.got = false, 0
		p.end = p.end.Add(p.window)
	}
	p.got += carry
	return true
}

// next moves the read deadline past the rule's when the rule passed it,
// and says whether it moved.
func (p *bodyPace) next() (time.Time, bool) {
	r := p.rule()
	if !r.After(p.set) {
		return p.set, false
	}
	p.set = earlier(r.Add(p.slack), p.hard)
	return p.set, true
}

// why is the reason a sender whose read deadline passed is given.
func (p *bodyPace) why() string {
	stallAt, rateAt := p.terms()
	switch {
	case stallAt.Before(p.hard) && !stallAt.After(rateAt):
		return fmt.Sprintf("no byte of the body arrived for %s", p.stall)
	case rateAt.Before(p.hard):
		got := p.got
		if p.grace || p.got >= p.need {
			got = 0 // the window after this one brought nothing
		}
		return p.crawled(got)
	}
	return fmt.Sprintf("the body did not arrive within %s", p.timeout)
}

// crawled is the reason a sender whose window brought got bytes is given.
func (p *bodyPace) crawled(got int64) string {
	rate := func(n int64) int64 { return int64(float64(n) / p.window.Seconds()) }
	return fmt.Sprintf("the body came at %d bytes/s over %s, under the relay's minimum of %d bytes/s", rate(got), p.window, rate(p.need))
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
