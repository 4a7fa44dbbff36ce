package relay

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// OpenChannel creates a channel and returns its credentials. r, when not
// nil, supplies the Host for the public URL.
func (s *Server) OpenChannel(r *http.Request) (wire.Credentials, error) {
	var id [16]byte
	var tok [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return wire.Credentials{}, fmt.Errorf("open channel: %w", err)
	}
	if _, err := rand.Read(tok[:]); err != nil {
		return wire.Credentials{}, fmt.Errorf("open channel: %w", err)
	}
	cr := wire.Credentials{Channel: hex.EncodeToString(id[:]), Token: base64.RawURLEncoding.EncodeToString(tok[:])}
	sum := sha256.Sum256([]byte(cr.Token))
	if err := s.cfg.Store.PutChannel(Channel{ID: cr.Channel, TokenHash: sum[:], CreatedAt: s.cfg.Now().UTC()}); err != nil {
		return wire.Credentials{}, fmt.Errorf("open channel: %w", err)
	}
	s.known.Store(cr.Channel, s.cfg.Now())
	cr.PublicURL = s.PublicURL(r, cr.Channel)
	return cr, nil
}

// PublicURL is the URL senders use for channel.
func (s *Server) PublicURL(r *http.Request, channel string) string {
	base := s.cfg.PublicURL
	if base == "" && r != nil {
		scheme := "http"
		if overTLS(r) {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	return base + "/c/" + channel
}

func (s *Server) serveOpen(w http.ResponseWriter, r *http.Request) {
	if s.cfg.OpenToken != "" && !tokenEqual(bearer(r), s.cfg.OpenToken) {
		httpError(w, http.StatusUnauthorized, "this relay requires a token to open channels (Authorization: Bearer <token>)")
		return
	}
	cr, err := s.OpenChannel(r)
	if err != nil {
		s.logStore("relay: %v", err)
		httpError(w, http.StatusInternalServerError, "could not open a channel")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(cr)
}

// serveCheck tells an agent whether its saved credentials are still good,
// without connecting: a connection would take the channel over.
func (s *Server) serveCheck(w http.ResponseWriter, r *http.Request, channel string) {
	if code, msg := s.authorize(channel, bearer(r)); code != 0 {
		httpError(w, code, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(wire.Credentials{Channel: channel, PublicURL: s.PublicURL(r, channel)})
}

// authorize checks the agent token of channel.
func (s *Server) authorize(channel, token string) (int, string) {
	ch, err := s.cfg.Store.Channel(channel)
	if devhook.ErrorCode(err) == devhook.ENOTFOUND {
		return http.StatusNotFound, "unknown channel " + channel + "; open a new one"
	} else if err != nil {
		s.logStore("relay: read channel %s: %v", channel, err)
		return http.StatusInternalServerError, "could not read the channel"
	}
	sum := sha256.Sum256([]byte(token))
	if token == "" || subtle.ConstantTimeCompare(sum[:], ch.TokenHash) != 1 {
		return http.StatusUnauthorized, "wrong agent token for channel " + channel
	}
	return 0, ""
}

func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

func tokenEqual(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}
