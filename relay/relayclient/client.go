// Package relayclient is the agent's side of devhook's relay: it opens and
// checks a channel, connects to it over a WebSocket (Dial) and speaks the
// protocol of package wire on it; network.go reaches the relay through the
// environment's proxy or a private CA, and says what to check when it
// cannot (UnreachableError).
package relayclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// ErrRejected wraps errors where the relay refused the credentials: the
// channel is unknown or the token is wrong. Retrying will not help; open a
// new channel.
var ErrRejected = errors.New("relay rejected the channel credentials")

// ErrOpenRefused is wrapped by Open's error when the relay refuses to
// open a channel with the open token given (401 or 403): none, or a
// wrong one.
var ErrOpenRefused = errors.New("the relay refused the open token")

// ErrReplaced is returned by Receive when the relay closed the connection
// because another agent connected to the same channel and took it over.
// Reconnecting would take it back and forth: the agent should stop.
var ErrReplaced = errors.New("another agent connected to this channel and took it over")

// Open asks the relay at relayURL for a new channel. openToken is sent when
// not empty. client should come from Network.HTTPClient, so that it
// reaches the relay as Dial does; when it cannot, the error wraps an
// *UnreachableError.
func Open(ctx context.Context, client *http.Client, relayURL, openToken string) (wire.Credentials, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(relayURL, "/")+"/v1/channels", nil)
	if err != nil {
		return wire.Credentials{}, fmt.Errorf("open a channel on %s: %w", relayURL, err)
	}
	if openToken != "" {
		req.Header.Set("Authorization", "Bearer "+openToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		if ue := unreachable(relayURL, err); ue != err {
			return wire.Credentials{}, fmt.Errorf("open a channel: %w", ue)
		}
		return wire.Credentials{}, fmt.Errorf("open a channel on %s: %w", relayURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		// The connection was cut in the answer (a proxy, a relay that
		// died): not an answer to judge by the half of it that came.
		return wire.Credentials{}, fmt.Errorf("open a channel on %s: read the answer (%s): %w", relayURL, resp.Status, err)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return wire.Credentials{}, fmt.Errorf("open a channel on %s: %w: %s: %s", relayURL, ErrOpenRefused, resp.Status, bytes.TrimSpace(body))
	}
	if resp.StatusCode != http.StatusCreated {
		return wire.Credentials{}, fmt.Errorf("open a channel on %s: %s: %s", relayURL, resp.Status, bytes.TrimSpace(body))
	}
	var cr wire.Credentials
	if err := json.Unmarshal(body, &cr); err != nil || cr.Channel == "" || cr.Token == "" {
		return wire.Credentials{}, fmt.Errorf("open a channel on %s: unexpected answer %q", relayURL, wire.ClipReason(string(body)))
	}
	return cr, nil
}

// Check asks the relay whether cr is still a channel it knows, without
// connecting to it (a connection would take the channel over from its
// agent). It returns an error wrapping ErrRejected when the relay refuses
// the credentials; any other error says the relay could not be asked.
func Check(ctx context.Context, client *http.Client, relayURL string, cr wire.Credentials) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimRight(relayURL, "/")+"/v1/channels/"+url.PathEscape(cr.Channel), nil)
	if err != nil {
		return fmt.Errorf("check channel %s on %s: %w", cr.Channel, relayURL, err)
	}
	req.Header.Set("Authorization", "Bearer "+cr.Token)
	resp, err := client.Do(req)
	if err != nil {
		if ue := unreachable(relayURL, err); ue != err {
			return fmt.Errorf("check channel %s: %w", cr.Channel, ue)
		}
		return fmt.Errorf("check channel %s on %s: %w", cr.Channel, relayURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusNotFound, http.StatusUnauthorized:
		return fmt.Errorf("%w: %s", ErrRejected, bytes.TrimSpace(body))
	}
	return fmt.Errorf("check channel %s on %s: %s: %s", cr.Channel, relayURL, resp.Status, bytes.TrimSpace(body))
}

// Conn is an agent's connection to its channel. Receive must be called from
// one goroutine; Respond and Ack from any.
type Conn struct {
	ws      *websocket.Conn
	channel string
	hello   wire.Header
	maxBody int64
	ping    time.Duration // the relay's heartbeat period
	answer  time.Duration // the relay's wait for an answer; 0: not said
	wait    time.Duration // silence after which the connection is dropped

	out       *wire.Writer
	in        wire.Reader // Receive's
	closeOnce sync.Once
}

// DialConfig configures Dial.
type DialConfig struct {
	RelayURL    string // http(s) base URL of the relay
	Credentials wire.Credentials
	// PingTimeout: the connection is dropped when the relay has sent
	// nothing (not even a ping) for this long. Default: three times the
	// heartbeat period the relay's hello announces (HelloPingInterval), at
	// least MinPingTimeout; 2×DefaultPingInterval from a relay that does
	// not say, and while waiting for the hello.
	PingTimeout time.Duration
	// MaxBody bounds the body of a delivery from the relay. Default: what
	// the relay's hello announces (HelloMaxBody), or DefaultMaxBody from
	// a relay that does not say.
	MaxBody int64
	// Network says how to reach the relay: proxy, TLS, dialer. It should
	// be the one of the client given to Open and Check.
	Network Network
}

// Dial connects to the channel and reads the relay's hello. When the
// relay cannot be reached, the error wraps an *UnreachableError.
func Dial(ctx context.Context, cfg DialConfig) (*Conn, error) {
	u, err := url.Parse(strings.TrimRight(cfg.RelayURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("relay URL %q must be an absolute http or https URL", cfg.RelayURL)
	}
	scheme := u.Scheme
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += "/v1/channels/" + url.PathEscape(cfg.Credentials.Channel) + "/connect"
	var tlsConfig *tls.Config
	if scheme == "https" {
		tlsConfig = cfg.Network.tlsConfig(u.Hostname())
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10,
		TLSClientConfig: tlsConfig,
		// Under the TLS of a wss relay: the responses and acks of many
		// deliveries leave in one write(2) (see Writer).
		NetDialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := cfg.Network.dial(ctx, scheme, addr)
			if err != nil {
				return nil, err
			}
			return wire.NewCorkConn(c), nil
		}}
	ws, resp, err := d.DialContext(ctx, u.String(), http.Header{"Authorization": {"Bearer " + cfg.Credentials.Token}})
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusUnauthorized {
				return nil, fmt.Errorf("%w: %s", ErrRejected, bytes.TrimSpace(body))
			}
			return nil, fmt.Errorf("connect to relay %s: %s: %s", cfg.RelayURL, resp.Status, bytes.TrimSpace(body))
		}
		if ue := unreachable(cfg.RelayURL, err); ue != err {
			return nil, fmt.Errorf("connect to the channel: %w", ue)
		}
		return nil, fmt.Errorf("connect to relay %s: %w", cfg.RelayURL, err)
	}
	ws.SetReadLimit(4 + wire.MaxHeaderSize) // the hello; deliveries once it says how large
	c := &Conn{ws: ws, channel: cfg.Credentials.Channel, wait: cfg.PingTimeout}
	if c.wait <= 0 {
		c.wait = 2 * wire.DefaultPingInterval // until the hello says
	}
	c.out = wire.NewWriter(ws, 30*time.Second, nil)
	ws.SetPingHandler(func(data string) error {
		ws.SetReadDeadline(time.Now().Add(c.wait))
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(5*time.Second))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	stop := context.AfterFunc(ctx, func() { ws.Close() })
	defer stop()
	ws.SetReadDeadline(time.Now().Add(c.wait))
	_, msg, err := ws.ReadMessage()
	if err != nil {
		ws.Close()
		return nil, fmt.Errorf("connect to relay %s: waiting for hello: %w", cfg.RelayURL, err)
	}
	h, _, err := wire.DecodeFrame(msg)
	if err != nil || h.Type != wire.TypeHello {
		ws.Close()
		return nil, fmt.Errorf("connect to relay %s: expected hello, got %q (%w)", cfg.RelayURL, h.Type, err)
	}
	c.hello = h
	c.maxBody = cfg.MaxBody
	if c.maxBody <= 0 {
		c.maxBody = announcedMaxBody(&h)
	}
	ws.SetReadLimit(4 + wire.MaxHeaderSize + c.maxBody)
	c.answer = announcedDuration(&h, wire.HelloResponseTimeout)
	c.ping = wire.DefaultPingInterval
	if p, ok := announcedPingInterval(&h); ok {
		c.ping = p
		if cfg.PingTimeout <= 0 {
			c.wait = max(3*p, MinPingTimeout)
		}
	}
	return c, nil
}

// MinPingTimeout is the shortest silence after which an agent drops its
// connection, whatever heartbeat the relay announces: a relay that pings
// every few milliseconds must not have its agents dropped by a busy
// machine's scheduler.
const MinPingTimeout = 5 * time.Second

// maxAnnouncedPing bounds what a hello may announce as its heartbeat,
// or as any other duration.
const maxAnnouncedPing = 24 * time.Hour

// announcedPingInterval is the heartbeat period a relay's hello
// announces, and whether it announces a usable one.
func announcedPingInterval(h *wire.Header) (time.Duration, bool) {
	d := announcedDuration(h, wire.HelloPingInterval)
	return d, d > 0
}

// announcedDuration is the duration a relay's hello announces in the
// header name, in milliseconds, at most maxAnnouncedPing; 0 when it says
// nothing (an older relay) or nothing usable.
func announcedDuration(h *wire.Header, name string) time.Duration {
	vs := h.Header[name]
	if len(vs) == 0 {
		return 0
	}
	ms, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return time.Duration(min(ms, maxAnnouncedPing.Milliseconds())) * time.Millisecond
}

// maxAnnouncedBody bounds what a hello may announce, so that the read
// limit cannot overflow.
const maxAnnouncedBody = 1 << 40

// announcedMaxBody is the largest body a relay's hello announces, or
// DefaultMaxBody when it says nothing (an older relay) or nothing usable.
func announcedMaxBody(h *wire.Header) int64 {
	vs := h.Header[wire.HelloMaxBody]
	if len(vs) == 0 {
		return wire.DefaultMaxBody
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || n <= 0 {
		return wire.DefaultMaxBody
	}
	return min(n, maxAnnouncedBody)
}

// PingInterval is the relay's heartbeat period, as its hello announced
// it (DefaultPingInterval from a relay that does not say).
func (c *Conn) PingInterval() time.Duration { return c.ping }

// ResponseTimeout is how long the relay lets a live delivery's sender
// wait for the answer, from the delivery's frame, as its hello announced
// it (wire.HelloResponseTimeout); 0 from a relay that does not say.
func (c *Conn) ResponseTimeout() time.Duration { return c.answer }

// PingTimeout is how long the connection may stay silent before it is
// dropped (see DialConfig.PingTimeout).
func (c *Conn) PingTimeout() time.Duration { return c.wait }

// MaxBody is the largest delivery body this connection accepts: the
// relay's, as its hello announced it (see DialConfig.MaxBody).
func (c *Conn) MaxBody() int64 { return c.maxBody }

// PublicURL is the URL senders post to, as the relay announced it.
func (c *Conn) PublicURL() string { return c.hello.PublicURL }

// Queued is how many deliveries waited in the relay's queue for this
// channel when the connection opened, as the hello said (0 from a relay
// that does not say).
func (c *Conn) Queued() int { return max(c.hello.Status, 0) }

// Receive returns the next delivery. It fails when the connection ends;
// Close from another goroutine makes it return. When another agent took
// the channel over, the error wraps ErrReplaced.
func (c *Conn) Receive() (*devhook.Delivery, error) {
	for {
		c.ws.SetReadDeadline(time.Now().Add(c.wait))
		msg, err := c.in.Read(c.ws)
		if err != nil {
			if websocket.IsCloseError(err, wire.CloseReplaced) {
				return nil, fmt.Errorf("read from relay: %w (%w)", ErrReplaced, err)
			}
			return nil, fmt.Errorf("read from relay: %w", err)
		}
		h, body, err := wire.DecodeFrame(msg)
		if err != nil {
			return nil, fmt.Errorf("read from relay: %w", err)
		}
		if h.Type != wire.TypeDeliver {
			continue
		}
		return wire.DeliveryOf(&h, c.channel, body), nil
	}
}

// Respond sends the answer to delivery id: the frame's header, then body
// as it is, not copied behind it (as the relay sends a delivery).
func (c *Conn) Respond(id string, status int, header http.Header, body []byte) error {
	hdr, err := wire.AppendFrame(nil, &wire.Header{Type: wire.TypeResponse, ID: id, Status: status, Header: header}, nil)
	if err != nil {
		return err
	}
	return c.write(hdr, body)
}

// Ack tells the relay that delivery id is recorded.
func (c *Conn) Ack(id string) error {
	frame, err := wire.AppendFrame(nil, &wire.Header{Type: wire.TypeAck, ID: id}, nil)
	if err != nil {
		return err
	}
	return c.write(frame, nil)
}

// write sends one frame, hdr followed by payload; frames of concurrent
// callers leave together (see wire.Writer).
func (c *Conn) write(hdr, payload []byte) error {
	if err := c.out.Write(hdr, payload); err != nil {
		return fmt.Errorf("write to relay: %w", err)
	}
	return nil
}

// Close ends the connection.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	})
	return c.ws.Close()
}
