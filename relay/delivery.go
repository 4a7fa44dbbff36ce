package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
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
	channel, suffix, _ := strings.Cut(rest, "/")
	suffix = "/" + suffix
	if channel == "" {
		httpError(w, http.StatusNotFound, "no channel in the path; deliveries go to /c/<channel>/...")
		return
	}
	if code, msg := s.channelExists(channel); code != 0 {
		httpError(w, code, msg)
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "could not make a delivery id")
		return
	}
	d := &devhook.Delivery{
		ID: id.String(), Channel: channel, ReceivedAt: s.cfg.Now().UTC(), Method: r.Method,
		Path: suffix, RawQuery: r.URL.RawQuery, Header: endToEndShared(r.Header), RemoteAddr: r.RemoteAddr,
		Queued: true, // the larger of its two frame headers
	}
	// Refuse what could never be framed, before reading the body.
	if n := frameHeaderLen(deliverHeader(d)); n > MaxHeaderSize {
		refuse(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf(
			"the request's method, path, query and headers take %d bytes in the relay's frame, over its limit of %d; send smaller headers", n, MaxHeaderSize))
		return
	}
	if r.ContentLength > s.cfg.MaxBody {
		refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes is over the relay's limit of %d bytes", r.ContentLength, s.cfg.MaxBody))
		return
	}
	body, release, code, msg := s.readBody(w, r, channel)
	defer release()
	if code != 0 {
		refuse(w, code, msg)
		return
	}
	d.Body, d.Queued = body, false
	w.Header().Set("Devhook-Delivery", d.ID)
	ans, err := s.router.Deliver(r.Context(), d)
	switch {
	case err == nil:
		answeredByAgent(w)
		h := w.Header()
		for k, v := range endToEndShared(ans.Header) {
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
	case errors.Is(err, ErrHeaderTooLarge): // cannot happen after the check above
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
		s.cfg.Logf("relay: read channel %s: %v", channel, err)
		return http.StatusInternalServerError, "could not read the channel"
	}
	s.known.Store(channel, s.cfg.Now())
	return 0, ""
}

// readBody reads r's body within MaxBody and BodyTimeout, holding in-flight
// bytes for it: its Content-Length from the start, or as it arrives when
// chunked. The buffer grows as bytes arrive, so that a sender trickling a
// large body costs what it has sent. release gives the bytes back; it must
// be called when the body is no longer used. A non-zero code is the status
// to refuse the delivery with.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, channel string) (body []byte, release func(), code int, msg string) {
	var held int64
	release = func() { s.budget.give(channel, held) }
	take := func(n int64) int {
		code := s.budget.take(channel, n)
		if code == 0 {
			held += n
		}
		return code
	}
	cl := r.ContentLength
	if cl > 0 {
		if code := take(cl); code != 0 {
			return nil, release, code, s.busy(code)
		}
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	src := http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	buf := make([]byte, 0, max(0, min(cl, 64<<10)))
	for {
		if len(buf) == cap(buf) {
			if cl >= 0 && int64(len(buf)) >= cl {
				break // the server's body reader stops at Content-Length
			}
			size := max(int64(cap(buf))*2, 64<<10)
			if cl >= 0 {
				size = min(size, cl)
			} else {
				size = min(size, s.cfg.MaxBody+1) // one more byte to see it is over
				if code := take(size - held); code != 0 {
					return nil, release, code, s.busy(code)
				}
			}
			buf = append(make([]byte, 0, size), buf...)
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
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
	s.router.Kick(d.Channel)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, "{\"queued\":true,\"id\":%q}\n", d.ID)
}
