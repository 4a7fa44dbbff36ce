package inspector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/devhook/devhook"
)

// hub fans changes out to the live event streams. Publish never waits for a
// subscriber: one whose buffer is full is dropped, and its stream ends so
// that the browser reconnects and reloads what it missed.
type hub struct {
	buffer int

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
	done   chan struct{} // closed by close
	// changed is closed, and replaced, each time subs changes, so that
	// wait can wake on it.
	changed chan struct{}
}

type subscriber struct {
	ch      chan devhook.Change
	dropped chan struct{} // closed when the hub gives up on this subscriber
}

func newHub(buffer int) *hub {
	return &hub{buffer: buffer, subs: make(map[*subscriber]struct{}), done: make(chan struct{}), changed: make(chan struct{})}
}

// notify wakes the waiters on subs; h.mu is held.
func (h *hub) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// wait returns once n streams are live, or ctx ends.
func (h *hub) wait(ctx context.Context, n int) error {
	for {
		h.mu.Lock()
		got, changed := len(h.subs), h.changed
		h.mu.Unlock()
		if got == n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%d live streams, not %d: %w", got, n, ctx.Err())
		}
	}
}

// subscribe returns a new subscriber, or nil when the hub is closed.
func (h *hub) subscribe() *subscriber {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	s := &subscriber{ch: make(chan devhook.Change, h.buffer), dropped: make(chan struct{})}
	h.subs[s] = struct{}{}
	h.notify()
	return s
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		h.notify()
	}
}

func (h *hub) publish(c devhook.Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- c:
		default:
			delete(h.subs, s)
			close(s.dropped)
			h.notify()
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.done)
	h.subs = make(map[*subscriber]struct{})
	h.notify()
}

// subscribers returns how many streams are live.
func (h *hub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// handleEvents streams changes as Server-Sent Events: a "ready" event when
// the stream opens, then "delivery", "attempt", "retry", "health" and
// "deleted" events
// whose data is a devhook.Change, and a comment line when idle so that proxies and the
// browser keep the connection.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	sub := s.hub.subscribe()
	if sub == nil {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "the inspector is shutting down"})
		return
	}
	defer s.hub.unsubscribe(sub)

	// Each write has its own deadline (a server-wide WriteTimeout would cut
	// the stream): a page that stops reading fills the connection's
	// buffers, and its write then fails instead of blocking for ever.
	rc := http.NewResponseController(w)
	write := func(msg []byte) error {
		if err := rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout)); err != nil {
			return fmt.Errorf("setting the write deadline: %w", err)
		}
		if _, err := w.Write(msg); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout)); err != nil {
		s.cfg.Logf("inspector: the event stream cannot have a write deadline: %v", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "the event stream cannot have a write deadline"})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// retry: how long the browser waits before reconnecting.
	if err := write([]byte("retry: 1000\nevent: ready\ndata: {}\n\n")); err != nil {
		s.cfg.Logf("inspector: the event stream cannot be written: %v", err)
		return
	}

	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	for {
		var msg []byte
		select {
		case <-r.Context().Done():
			return
		case <-s.hub.done:
			return
		case <-sub.dropped:
			s.cfg.Logf("inspector: a page fell behind the live stream and was disconnected; it reloads on reconnect")
			return
		case <-tick.C:
			msg = []byte(": keep-alive\n\n")
		case c := <-sub.ch:
			data, err := json.Marshal(c)
			if err != nil {
				s.cfg.Logf("inspector: encoding a %s change: %v", c.Kind, err)
				continue
			}
			kind := c.Kind
			switch kind {
			case devhook.ChangeDelivery, devhook.ChangeAttempt, devhook.ChangeRetry, devhook.ChangeHealth, devhook.ChangeDeleted:
			default:
				kind = "change"
			}
			msg = make([]byte, 0, len(data)+32)
			msg = append(msg, "event: "+kind+"\ndata: "...)
			msg = append(msg, data...)
			msg = append(msg, "\n\n"...)
		}
		if err := write(msg); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.cfg.Logf("inspector: a page stopped reading the live stream for %s and was disconnected; it reloads on reconnect", s.cfg.StreamWriteTimeout)
			}
			return
		}
	}
}
