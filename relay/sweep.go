package relay

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/devhook/devhook"
)

// The sweeper: one goroutine of the Server, started by NewServer and
// stopped by Close, that every SweepInterval
//
//   - has the store drop queued deliveries older than its quota's MaxAge
//     (Sweeper.Expire), each channel's count and bytes logged and counted
//     in devhook_relay_queue_expired_total;
//   - records that the channels of the agents connected here are still
//     in use (Sweeper.TouchChannel, at most once every touchEvery), and
//     that the agent of a channel was connected until it went (at the
//     first sweep after), so that a channel's idle time counts from when
//     its last agent went, not from when it connected;
//   - once every idleEvery, or ChannelIdle when shorter, removes the
//     channels no agent opened within ChannelIdle, with their queues
//     (Sweeper.RemoveIdleChannels), logged and counted in
//     devhook_relay_channels_removed_total. A channel an agent holds now
//     is never removed, whatever ChannelIdle: on this relay, or on any
//     instance of a cluster when the Router is an AgentLocator.
//
// A step that fails is tried again at a later sweep, after a backoff from
// SweepInterval doubling to SweepRetryMax (retry.go), counted in
// devhook_relay_sweep_errors_total and logged once with a count.
//
// In a cluster every instance sweeps; a delivery or channel is counted by
// the instance that removed it.

// touchEvery is how often the channel of a connected agent is marked in
// use; idleEvery how often idle channels are looked for (at most).
const (
	touchEvery = time.Hour
	idleEvery  = time.Hour
)

// knownFor is how long a Server trusts that a channel exists without
// reading it again: a channel removed elsewhere (another instance) stops
// taking deliveries here within it.
const knownFor = time.Minute

// sweepState is what the sweeper keeps between sweeps, under sweepMu.
type sweepState struct {
	expire, touch, idle                retry
	expireAfter, touchAfter, idleAfter time.Time // a failed step is not tried before (wall clock)
	lastIdle                           time.Time // the last idle sweep, by Config.Now
	connected                          map[string]bool
	// gone: channels whose agent went since a sweep saw it connected,
	// to be marked opened (touched) now.
	gone map[string]bool
}

// startSweeper starts the sweeper goroutine, owned by s: Close stops it.
func (s *Server) startSweeper() {
	retries := retry{min: s.cfg.SweepInterval, max: max(SweepRetryMax, s.cfg.SweepInterval)}
	s.sw.expire, s.sw.touch, s.sw.idle = retries, retries, retries
	if _, ok := s.cfg.Store.(Sweeper); !ok {
		close(s.sweepDone)
		return
	}
	go func() {
		defer close(s.sweepDone)
		t := time.NewTicker(s.cfg.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-s.sweepStop:
				return
			case <-t.C:
				s.Sweep()
			}
		}
	}()
}

// stopSweeper stops the sweeper and waits for it.
func (s *Server) stopSweeper() {
	s.sweepOnce.Do(func() { close(s.sweepStop) })
	<-s.sweepDone
}

// Sweep runs the sweeper once, now (by Config.Now): expired deliveries
// dropped, connected agents' channels marked in use, idle channels
// removed when due. It runs by itself every SweepInterval; tests call it
// after moving their clock. A step waiting after a failure is skipped.
func (s *Server) Sweep() {
	sw, ok := s.cfg.Store.(Sweeper)
	if !ok {
		return
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	now := s.cfg.Now()
	s.sweepExpired(sw, now)
	s.sweepTouch(sw, now)
	s.sweepIdle(sw, now)
}

// sweepExpired has the store drop the deliveries older than their age.
func (s *Server) sweepExpired(sw Sweeper, now time.Time) {
	if time.Now().Before(s.sw.expireAfter) {
		return
	}
	expired, err := sw.Expire(now)
	for _, e := range expired {
		s.metrics.expired.Add(float64(e.Deliveries))
		s.metrics.expiredBytes.Add(float64(e.Bytes))
		s.cfg.Logf("relay: channel %s: %d queued deliveries (%d bytes) dropped: older than the queue's maximum age; their agent did not connect in time",
			e.Channel, e.Deliveries, e.Bytes)
	}
	s.sw.expireAfter = s.stepDone("expire", "drop expired deliveries", &s.sw.expire, err)
}

// stepDone counts and logs the outcome of a sweeper step and returns
// when the step may run again: at once after a success, after the
// backoff after a failure.
func (s *Server) stepDone(step, what string, r *retry, err error) time.Time {
	now := time.Now()
	if err == nil {
		if fails, since := r.ok(); fails > 0 {
			s.cfg.Logf("relay: %s: works again after %d failures in %s", what, fails, now.Sub(since).Round(time.Second))
		}
		return time.Time{}
	}
	s.metrics.sweepErrors.WithLabelValues(step).Inc()
	wait, log := r.fail(now)
	switch {
	case !log:
	case r.failing() == 1:
		s.cfg.Logf("relay: %s: %v; trying again in %s, then less and less often (at most every %s) until it works", what, err, wait.Round(time.Millisecond), max(r.max, r.min))
	default:
		s.cfg.Logf("relay: %s: still failing: %d failures in %s: %v", what, r.failing(), now.Sub(r.since).Round(time.Second), err)
	}
	return now.Add(wait)
}

// sweepTouch marks in use the channels of the agents connected here (at
// most once every touchEvery each), and those whose agent went since the
// last sweep. A failure ends the step: the rest wait for the next try.
func (s *Server) sweepTouch(sw Sweeper, now time.Time) {
	connected := make(map[string]bool)
	s.mu.Lock()
	for c := range s.conns {
		connected[c.channel] = true
	}
	s.mu.Unlock()
	for ch := range s.sw.connected {
		if !connected[ch] {
			if s.sw.gone == nil {
				s.sw.gone = make(map[string]bool)
			}
			s.sw.gone[ch] = true
		}
	}
	s.sw.connected = connected
	if time.Now().Before(s.sw.touchAfter) {
		return
	}
	var err error
	for ch := range s.sw.gone {
		if err = s.storeTouch(sw, ch, now); err != nil {
			break
		}
		delete(s.sw.gone, ch)
	}
	for ch := range connected {
		if err != nil {
			break
		}
		if at, ok := s.touched.Load(ch); !ok || now.Sub(at.(time.Time)) >= touchEvery {
			err = s.storeTouch(sw, ch, now)
		}
	}
	s.sw.touchAfter = s.stepDone("touch", "record that agents are connected", &s.sw.touch, err)
}

// storeTouch records in the store that an agent held channel at now.
func (s *Server) storeTouch(sw Sweeper, channel string, now time.Time) error {
	if err := sw.TouchChannel(channel, now); err != nil {
		return err
	}
	s.touched.Store(channel, now)
	return nil
}

// sweepIdle removes the channels idle for ChannelIdle, when due, but
// those an agent holds.
func (s *Server) sweepIdle(sw Sweeper, now time.Time) {
	every := min(idleEvery, s.cfg.ChannelIdle)
	if !s.sw.lastIdle.IsZero() && now.Sub(s.sw.lastIdle) < every && !now.Before(s.sw.lastIdle) {
		return
	}
	if time.Now().Before(s.sw.idleAfter) {
		return
	}
	s.sw.lastIdle = now
	inUse, unsure := s.inUse()
	removed, err := sw.RemoveIdleChannels(now.Add(-s.cfg.ChannelIdle), inUse)
	for _, rc := range removed {
		s.known.Delete(rc.ID)
		s.touched.Delete(rc.ID)
		s.metrics.expired.Add(float64(rc.Deliveries))
		s.metrics.expiredBytes.Add(float64(rc.Bytes))
		if rc.LastOpened.IsZero() {
			// A queue left without its channel: deliveries taken as
			// the channel was removed (by another instance).
			s.cfg.Logf("relay: channel %s was removed: %d deliveries (%d bytes) queued for it since removed", rc.ID, rc.Deliveries, rc.Bytes)
			continue
		}
		s.metrics.channelsRemoved.Inc()
		s.cfg.Logf("relay: channel %s removed: no agent opened it since %s (idle for more than %s); %d deliveries (%d bytes) removed with it",
			rc.ID, rc.LastOpened.UTC().Format(time.RFC3339), s.cfg.ChannelIdle, rc.Deliveries, rc.Bytes)
	}
	if n, uerr := unsure(); n > 0 {
		s.logStore("relay: remove idle channels: %d kept, as whether an agent holds them could not be told: %v", n, uerr)
	}
	if err != nil {
		s.sw.lastIdle = time.Time{}
	}
	s.sw.idleAfter = s.stepDone("idle", "remove idle channels", &s.sw.idle, err)
}

// inUse returns the sweeper's test of whether an agent holds a channel
// now: one connected here, or one the Router knows of (when it is an
// AgentLocator). A channel the Router cannot tell about is in use;
// unsure returns how many there were, and the last error.
func (s *Server) inUse() (inUse func(string) bool, unsure func() (int, error)) {
	local := make(map[string]bool)
	s.mu.Lock()
	for c := range s.conns {
		local[c.channel] = true
	}
	s.mu.Unlock()
	al, _ := s.router.(AgentLocator)
	var mu sync.Mutex
	var n int
	var last error
	inUse = func(channel string) bool {
		if local[channel] {
			return true
		}
		if al == nil {
			return false
		}
		held, err := al.HasAgent(channel)
		if err != nil {
			mu.Lock()
			n, last = n+1, err
			mu.Unlock()
			return true
		}
		return held
	}
	return inUse, func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return n, last
	}
}

// touch records that an agent opened channel now, in the store, unless
// this Server did so within touchEvery, or within touchAgain when force
// (an agent connected). A failure is logged (at most once every 10
// seconds with the count left out): the sweeper touches the channel again.
func (s *Server) touch(channel string, force bool) {
	sw, ok := s.cfg.Store.(Sweeper)
	if !ok {
		return
	}
	now := s.cfg.Now()
	if at, ok := s.touched.Load(channel); ok && !force && now.Sub(at.(time.Time)) < touchEvery {
		return
	}
	// Reconnects in a row: once a minute is enough (a quarter of
	// ChannelIdle when shorter).
	if at, ok := s.touched.Load(channel); ok && force && now.Sub(at.(time.Time)) < min(time.Minute, s.cfg.ChannelIdle/4) {
		return
	}
	if err := s.storeTouch(sw, channel, now); err != nil {
		s.logStore("relay: channel %s: record that its agent connected: %v", channel, err)
	}
}

// refuseQueue answers a delivery the store could not queue: 429 when its
// channel's queue is full, 503 when the relay's is or the disk is full, or
// for any other failure; always with Retry-After, and nothing queued is
// touched.
func (s *Server) refuseQueue(w http.ResponseWriter, d *devhook.Delivery, err error) {
	w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	switch {
	case errors.Is(err, ErrChannelFull):
		httpError(w, http.StatusTooManyRequests, "no agent is connected and this channel's queue is full; retry later")
	case errors.Is(err, ErrQueueFull):
		if n := s.fullLog.skip(s.cfg.Now()); n >= 0 {
			s.cfg.Logf("relay: queue delivery %s of channel %s: %v (%d more refused since the last line): raise --queue-max-bytes, or wait for agents to drain their queues", d.ID, d.Channel, err, n)
		}
		httpError(w, http.StatusServiceUnavailable, "no agent is connected and the relay's queue is full; retry later")
	case errors.Is(err, ErrStorageFull):
		if n := s.fullLog.skip(s.cfg.Now()); n >= 0 {
			s.cfg.Logf("relay: queue delivery %s of channel %s: %v (%d more refused since the last line): free disk space; the relay takes deliveries again once there is room", d.ID, d.Channel, err, n)
		}
		httpError(w, http.StatusServiceUnavailable, "no agent is connected and the relay's storage is full; retry later")
	default:
		s.logStore("relay: queue delivery %s of channel %s: %v; its sender got 503 with Retry-After: %d", d.ID, d.Channel, err, int(RetryAfter/time.Second))
		httpError(w, http.StatusServiceUnavailable, "no agent is connected and the delivery could not be queued; try again")
	}
}

// logEvery bounds the log of a flood of refusals: one line at most every
// logEvery, saying how many it left out.
type logEvery struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// skip returns -1 to leave a line out, or the number of lines left out
// since the last one, which is to be written now.
func (l *logEvery) skip(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < 10*time.Second && !now.Before(l.last) {
		l.skipped++
		return -1
	}
	n := l.skipped
	l.last, l.skipped = now, 0
	return n
}

// checkOpenToken refuses an open token too short to resist guessing.
func checkOpenToken(tok string) error {
	if tok != "" && len(tok) < MinOpenToken {
		return fmt.Errorf("relay: the token to open channels is %d bytes long; it must be at least %d (make one with: openssl rand -hex 16)", len(tok), MinOpenToken)
	}
	return nil
}

// MinOpenToken is the shortest Config.OpenToken a Server accepts, in bytes.
const MinOpenToken = 16
