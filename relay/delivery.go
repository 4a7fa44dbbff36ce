package relay

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// serveIngress answers a delivery, the request to /c/{channel}/{path...}:
// it reads the body within the relay's bounds, sends the delivery to the
// agent holding the channel (through the Router) and answers with the
// agent's answer, or queues it (202) when no agent takes it. The answers
// a sender can get are listed under Ingress in the package comment
// (protocol.go). It serves behind net/http's server and behind an
// IngressListener alike.
func (s *Server) serveIngress(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/c/")
	channel, suffix := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		channel, suffix = rest[:i], rest[i:] // the slash and what follows
	}
	if channel == "" {
		httpError(w, http.StatusNotFound, "no channel in the path; deliveries go to /c/<channel>/...")
		return
	}
	if code, msg := s.channelExists(channel); code != 0 {
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		}
		httpError(w, code, msg)
		return
	}
	if devhook.HasDotSegment(suffix) {
		// A receiver, or a proxy in front of it, that resolves dot
		// segments would be reached outside the agent's --forward path.
		refuse(w, http.StatusBadRequest, "the path has a dot segment (. or .., raw or percent-encoded); deliveries take a path without one")
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "could not make a delivery id")
		return
	}
	d := &devhook.Delivery{
		ID: id.String(), Channel: channel, ReceivedAt: s.cfg.Now().UTC(), Method: r.Method,
		Path: suffix, RawQuery: r.URL.RawQuery, Header: wire.EndToEndShared(r.Header), RemoteAddr: r.RemoteAddr,
		Queued: true, // the larger of its two frame headers
	}
	// Refuse what could never be framed, before reading the body.
	if n := wire.FrameHeaderLen(wire.DeliverHeader(d)); n > wire.MaxHeaderSize {
		refuse(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf(
			"the request's method, path, query and headers take %d bytes in the relay's frame, over its limit of %d; send smaller headers", n, wire.MaxHeaderSize))
		return
	}
	if r.ContentLength > s.cfg.MaxBody {
		refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes is over the relay's limit of %d bytes", r.ContentLength, s.cfg.MaxBody))
		return
	}
	body, held, code, msg := s.readBody(w, r, channel)
	defer s.budget.give(channel, held)
	if code != 0 {
		refuse(w, code, msg)
		return
	}
	d.Body, d.Queued = body, false
	setDeliveryID(w, d.ID)
	ans, err := s.router.Deliver(r.Context(), d)
	switch {
	case err == nil:
		answeredByAgent(w)
		h := w.Header()
		for k, v := range wire.EndToEndShared(ans.Header) {
			h[k] = v
		}
		h.Del("Content-Length")
		if _, ok := h["Content-Type"]; !ok {
			// The receiver's answer had none: net/http would guess one
			// from the body, and the sender would see a header the
			// receiver never sent.
			h["Content-Type"] = nil
		}
		w.WriteHeader(ans.Status)
		w.Write(ans.Body)
		return
	case errors.Is(err, ErrTimeout):
		httpError(w, http.StatusGatewayTimeout, fmt.Sprintf("the devhook agent did not answer within %s", s.cfg.ResponseTimeout))
		return
	case r.Context().Err() != nil:
		// The sender went away before the answer; the agent records it anyway.
		return
	case errors.Is(err, wire.ErrHeaderTooLarge): // cannot happen after the check above
		httpError(w, http.StatusRequestHeaderFieldsTooLarge, err.Error())
		return
	case !errors.Is(err, ErrNoAgent):
		s.cfg.Logf("relay: channel %s: deliver %s: %v; queuing it", channel, d.ID, err)
	}
	// No agent, or it went away mid-delivery: keep the delivery for its return.
	s.enqueue(w, d)
}

// channelExists answers 0 when channel exists, or the status and message
// to refuse a delivery with.
func (s *Server) channelExists(channel string) (int, string) {
	if at, ok := s.known.Load(channel); ok && s.cfg.Now().Sub(at.(time.Time)) < knownFor {
		return 0, ""
	}
	_, err := s.cfg.Store.Channel(channel)
	if devhook.ErrorCode(err) == devhook.ENOTFOUND {
		return http.StatusNotFound, "unknown channel " + channel
	} else if err != nil {
		// The store's failure (a cluster's NATS away) passes: the
		// sender is told to send again, as for a delivery it could not
		// queue.
		s.logStore("relay: read channel %s: %v; its sender got 503 with Retry-After: %d", channel, err, int(RetryAfter/time.Second))
		return http.StatusServiceUnavailable, "the relay cannot read this channel now; retry later"
	}
	s.known.Store(channel, s.cfg.Now())
	return 0, ""
}

// refuse answers a delivery with an error and ends the connection without
// reading the rest of its body: net/http would otherwise wait for up to
// 256 KiB more of it, from a sender that may trickle.
func refuse(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	}
	w.Header().Set("Connection", "close")
	http.NewResponseController(w).SetReadDeadline(time.Now())
	httpError(w, code, msg)
}

func (s *Server) busy(code int) string {
	if code == http.StatusTooManyRequests {
		return fmt.Sprintf("this channel already has %d bytes of deliveries in flight; retry later", s.cfg.MaxChannelInflight)
	}
	return "the relay is busy; retry later"
}

func (s *Server) enqueue(w http.ResponseWriter, d *devhook.Delivery) {
	d.Queued = true
	if err := s.cfg.Store.Enqueue(d.Channel, d); err != nil {
		s.refuseQueue(w, d, err)
		return
	}
	// An agent may have connected after the delivery was routed.
	s.kick(d)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, "{\"queued\":true,\"id\":%q}\n", d.ID)
}
