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
//     in use (Sweeper.TouchChannel, at most once every touchEvery), so
//     that an agent connected for longer than ChannelIdle keeps its
//     channel;
//   - once every idleEvery, removes the channels no agent opened within
//     ChannelIdle, with their queues (Sweeper.RemoveIdleChannels), logged
//     and counted in devhook_relay_channels_removed_total.
//
// In a cluster every instance sweeps; a delivery or channel is counted by
// the instance that removed it.

// touchEvery is how often the channel of a connected agent is marked in
// use; idleEvery how often idle channels are looked for.
const (
	touchEvery = time.Hour
	idleEvery  = time.Hour
)

// knownFor is how long a Server trusts that a channel exists without
// reading it again: a channel removed elsewhere (another instance) stops
// taking deliveries here within it.
const knownFor = time.Minute

// startSweeper starts the sweeper goroutine, owned by s: Close stops it.
func (s *Server) startSweeper() {
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
// after moving their clock.
func (s *Server) Sweep() {
	sw, ok := s.cfg.Store.(Sweeper)
	if !ok {
		return
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	now := s.cfg.Now()
	expired, err := sw.Expire(now)
	for _, e := range expired {
		s.metrics.expired.Add(float64(e.Deliveries))
		s.metrics.expiredBytes.Add(float64(e.Bytes))
		s.cfg.Logf("relay: channel %s: %d queued deliveries (%d bytes) dropped: older than the queue's maximum age; their agent did not connect in time",
			e.Channel, e.Deliveries, e.Bytes)
	}
	if err != nil {
		s.cfg.Logf("relay: drop expired deliveries: %v (retried in %s)", err, s.cfg.SweepInterval)
	}

	s.mu.Lock()
	channels := make([]string, 0, len(s.conns))
	for c := range s.conns {
		channels = append(channels, c.channel)
	}
	s.mu.Unlock()
	for _, ch := range channels {
		s.touch(ch, false)
	}

	if !s.lastIdleSweep.IsZero() && now.Sub(s.lastIdleSweep) < idleEvery {
		return
	}
	s.lastIdleSweep = now
	removed, err := sw.RemoveIdleChannels(now.Add(-s.cfg.ChannelIdle))
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
	if err != nil {
		s.cfg.Logf("relay: remove idle channels: %v (retried in %s)", err, idleEvery)
		s.lastIdleSweep = time.Time{}
	}
}

// touch records that an agent opened channel now, in the store, unless
// this Server did so within touchEvery (always when force).
func (s *Server) touch(channel string, force bool) {
	sw, ok := s.cfg.Store.(Sweeper)
	if !ok {
		return
	}
	now := s.cfg.Now()
	if at, ok := s.touched.Load(channel); ok && !force && now.Sub(at.(time.Time)) < touchEvery {
		return
	}
	if at, ok := s.touched.Load(channel); ok && force && now.Sub(at.(time.Time)) < time.Minute {
		return // reconnects in a row: once a minute is enough
	}
	if err := sw.TouchChannel(channel, now); err != nil {
		s.cfg.Logf("relay: channel %s: record that its agent connected: %v", channel, err)
		return
	}
	s.touched.Store(channel, now)
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
		s.cfg.Logf("relay: queue delivery %s: %v", d.ID, err)
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
