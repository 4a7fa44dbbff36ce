// Package relay is devhook's tunnel: the public relay Server that accepts
// deliveries and streams them to agents, and the agent-side Dial.
//
// # Protocol
//
// HTTP endpoints of the relay:
//
//	POST /v1/channels                    open a channel → 201 Credentials (JSON)
//	                                     (Authorization: Bearer <open token> when the relay requires one)
//	GET  /v1/channels/{id}/connect       WebSocket upgrade for the channel's agent
//	                                     (Authorization: Bearer <agent token>)
//	ANY  /c/{id}/{path...}               ingress: a delivery for the channel
//	GET  /healthz                        200 "ok"
//
// A channel id is 128 random bits in hex; its agent token is 256 random bits
// in base64url. The relay stores only the SHA-256 of the token.
//
// Every WebSocket message is binary and is one frame:
//
//	uint32 big-endian n | n bytes of JSON header | payload bytes
//
// The JSON header has a "type"; the payload is a raw body (never base64).
//
//	relay → agent  hello     {channel, public_url}            sent once, first
//	relay → agent  deliver   {id, method, path, query, header,
//	                          received_at, remote_addr, queued} + request body
//	agent → relay  response  {id, status, header}             + response body
//	agent → relay  ack       {id}                             a queued delivery is recorded
//
// A delivery stays in the relay's queue until its ack arrives. The agent
// answers every deliver with a response (the relay passes it to a waiting
// sender and drops it for a queued delivery); for a queued delivery it then
// acks, once the delivery is recorded. A live delivery needs no ack: its
// sender is still waiting, and gets the response or, if the agent goes
// away first, 202 with the delivery queued.
//
// Heartbeats are WebSocket pings from the relay every PingInterval; each side
// drops a connection that stays silent for twice that long.
package relay

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/devhook/devhook"
)

// Frame types.
const (
	TypeHello    = "hello"
	TypeDeliver  = "deliver"
	TypeResponse = "response"
	TypeAck      = "ack"
)

// MaxHeaderSize bounds a frame's JSON header.
const MaxHeaderSize = 1 << 20

// Header is the JSON part of a frame. Fields are used by the frame types as
// the protocol comment says.
type Header struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`

	// hello
	Channel   string `json:"channel,omitempty"`
	PublicURL string `json:"public_url,omitempty"`

	// deliver
	Method     string      `json:"method,omitempty"`
	Path       string      `json:"path,omitempty"`
	Query      string      `json:"query,omitempty"`
	Header     http.Header `json:"header,omitempty"`
	ReceivedAt time.Time   `json:"received_at,omitzero"`
	RemoteAddr string      `json:"remote_addr,omitempty"`
	Queued     bool        `json:"queued,omitempty"`

	// response
	Status int `json:"status,omitempty"`
}

// Credentials are what an agent needs to connect to its channel.
type Credentials struct {
	Channel   string `json:"channel"`
	Token     string `json:"token"`
	PublicURL string `json:"public_url"`
}

// AppendFrame appends the encoding of h and payload to dst.
func AppendFrame(dst []byte, h *Header, payload []byte) ([]byte, error) {
	js, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode %s frame: %w", h.Type, err)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(js)))
	dst = append(dst, js...)
	return append(dst, payload...), nil
}

// ErrMalformed is wrapped by every frame decoding error.
var ErrMalformed = errors.New("malformed frame")

// DecodeFrame splits a frame into its header and payload. The payload
// aliases msg.
func DecodeFrame(msg []byte) (Header, []byte, error) {
	var h Header
	if len(msg) < 4 {
		return h, nil, fmt.Errorf("%w: %d bytes, shorter than the length prefix", ErrMalformed, len(msg))
	}
	n := binary.BigEndian.Uint32(msg)
	if n > MaxHeaderSize || int(n) > len(msg)-4 {
		return h, nil, fmt.Errorf("%w: header length %d does not fit in %d bytes", ErrMalformed, n, len(msg)-4)
	}
	if err := json.Unmarshal(msg[4:4+n], &h); err != nil {
		return h, nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	switch h.Type {
	case TypeHello:
	case TypeDeliver, TypeResponse, TypeAck:
		if h.ID == "" {
			return h, nil, fmt.Errorf("%w: %s frame without id", ErrMalformed, h.Type)
		}
	default:
		return h, nil, fmt.Errorf("%w: unknown type %q", ErrMalformed, h.Type)
	}
	return h, msg[4+n:], nil
}

// deliverHeader is the frame header of d.
func deliverHeader(d *devhook.Delivery) *Header {
	return &Header{Type: TypeDeliver, ID: d.ID, Method: d.Method, Path: d.Path, Query: d.RawQuery,
		Header: d.Header, ReceivedAt: d.ReceivedAt, RemoteAddr: d.RemoteAddr, Queued: d.Queued}
}

// deliveryOf rebuilds the delivery a deliver frame carries.
func deliveryOf(h *Header, channel string, body []byte) *devhook.Delivery {
	return &devhook.Delivery{ID: h.ID, Channel: channel, ReceivedAt: h.ReceivedAt, Method: h.Method,
		Path: h.Path, RawQuery: h.Query, Header: h.Header, Body: body, RemoteAddr: h.RemoteAddr, Queued: h.Queued}
}

// hopHeaders are dropped when a request or response crosses the tunnel
// (RFC 9110 section 7.6.1), with any header the Connection header names.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// EndToEnd returns h without hop-by-hop headers. The values are not copied.
func EndToEnd(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		out[k] = v
	}
	for _, c := range h.Values("Connection") {
		for _, name := range strings.Split(c, ",") {
			delete(out, http.CanonicalHeaderKey(strings.TrimSpace(name)))
		}
	}
	for _, k := range hopHeaders {
		delete(out, k)
	}
	return out
}
