// Package wire is the protocol between devhook's relay and its agents,
// which the relay's server (package relay) and the agent's side of it
// (package relayclient) share: the HTTP endpoints, the frames on the
// WebSocket and their encoding, the rules for additions without a flag
// day, and the WebSocket writer and reader both sides use (batch.go).
//
// HTTP endpoints of the relay:
//
//	POST /v1/channels                    open a channel → 201 Credentials (JSON)
//	                                     (Authorization: Bearer <open token> when the relay requires one)
//	GET  /v1/channels/{id}               check saved credentials without connecting
//	                                     → 200, or 401/404 (Authorization: Bearer <agent token>)
//	GET  /v1/channels/{id}/connect       WebSocket upgrade for the channel's agent
//	                                     (Authorization: Bearer <agent token>)
//	ANY  /c/{id}/{path...}               ingress: a delivery for the channel
//	GET  /healthz                        200 "ok", then the status of the store's backend
//	                                     (NATS, when clustered); 503 with the reason while it is down
//	GET  /metrics                        Prometheus metrics (not when Config.PrivateMetrics; see metrics.go)
//
// A channel id is 128 random bits in hex; its agent token is 256 random bits
// in base64url. The relay stores only the SHA-256 of the token.
//
// Every WebSocket message is binary and is one frame:
//
//	uint32 big-endian n | n bytes of header | payload bytes
//
// The payload is a raw body (never base64). The header is binary: a
// version byte (1), a type byte, then tagged fields in any order, each a
// tag byte and its value. Strings are a uvarint length and the bytes;
// numbers are varints. A header field (tag 11) is a name and a uvarint
// count of values, each a string, so repeated headers keep every value in
// order. Anything that runs past the header is an error.
//
//	relay → agent  hello     {channel, public_url, status, header} sent once, first
//	relay → agent  deliver   {id, method, path, query, header,
//	                          received_at, remote_addr, queued} + request body
//	agent → relay  response  {id, status, header}             + response body
//	agent → relay  ack       {id}                             a queued delivery is recorded
//
// # Additions without a flag day
//
// Each side ignores what it does not know, so that a newer relay works
// with older agents and a newer agent with an older relay:
//
//   - Tags 1 to 11 are the fields above, with those values, in every
//     frame type. A field added later has a tag of 12 or more, and its
//     value is always a uvarint length and that many bytes (a number is a
//     varint within them, a flag has none). A field whose tag a side does
//     not know, whatever the tag, is skipped by its length.
//   - A frame of a type a side does not know is ignored, whole
//     (DecodeFrame returns it with an empty Type). A new frame type that
//     needs an answer is sent only to a side that said it knows it (a
//     relay in its hello, an agent in its connect request), since an
//     older one answers nothing.
//   - The version byte stays 1. A change an older side could not ignore
//     would take a new version, which the older side refuses, saying to
//     upgrade it.
//
// Devhooks from before this rule refuse a tag or type they do not know:
// what a relay tells every agent goes in a field they know. The hello's
// header field carries the relay's settings, by name, for that reason:
//
//	Devhook-Max-Body       the relay's largest delivery body (--max-body),
//	                       in bytes, in decimal: the agent accepts deliver
//	                       frames that large. An agent of a relay that does
//	                       not say takes DefaultMaxBody (10 MiB).
//	Devhook-Ping-Interval  the relay's heartbeat period (Config.PingInterval),
//	                       in milliseconds, in decimal: the agent drops a
//	                       connection silent for three times that, and at
//	                       least MinPingTimeout (5 s). An agent of a relay
//	                       that does not say drops it after 30 s
//	                       (2 × DefaultPingInterval), as agents from before
//	                       this field always do.
//	Devhook-Response-Timeout  how long the relay lets a live delivery's
//	                       sender wait for the agent's answer
//	                       (Config.ResponseTimeout, --timeout), in
//	                       milliseconds, in decimal, counted from the
//	                       delivery's deliver frame: then the sender gets
//	                       504 and a later answer is dropped. The agent
//	                       answers 504 itself, and records that its sender
//	                       got 504, for a receiver's answer that comes too
//	                       near that end or after it, and warns when it
//	                       waits for its receiver longer. An agent of a
//	                       relay that does not say does not know the wait,
//	                       and passes every answer on as agents from
//	                       before this field always do.
//
// A setting is announced there rather than in a field of its own (a tag
// of 12 or more) because agents from before the rule would refuse the
// hello, and with it every connection.
//
// The hello's status field (tag 10) carries the number of deliveries
// queued for the channel when the agent connected, when the relay's Store
// can count them (QueueCounter); it is left out when 0. An older agent
// decodes it and ignores it, and a newer agent reads 0 from an older
// relay.
//
// A delivery stays in the relay's queue until its ack arrives. The agent
// answers every deliver with a response (the relay passes it to a waiting
// sender and drops it for a queued delivery); for a queued delivery it then
// acks, once the delivery is recorded. A live delivery needs no ack: its
// sender is still waiting, and gets the response or, if the agent goes
// away first, 202 with the delivery queued. A queued delivery is sent at
// most once per connection: it stays in flight until the relay has
// committed its removal from the queue. One that cannot be framed (written
// by an older relay) is parked aside, with a log line, and the queue goes on.
//
// The newest agent of a channel holds it. When a second agent connects,
// the relay closes the first with close code 4001 (CloseReplaced), reason
// "replaced: ..."; its Receive returns an error wrapping ErrReplaced, and
// it should stop rather than reconnect and take the channel back.
//
// Heartbeats are WebSocket pings from the relay every PingInterval, from a
// timer of each connection: a connection that cannot take its ping within
// PingInterval (say, behind a large delivery it reads slowly) is dropped,
// and delays no other. The relay drops a connection that stays silent for
// twice PingInterval; the agent, told the period by the hello
// (Devhook-Ping-Interval), after three times it, so that a relay with a
// long heartbeat keeps its idle agents.
package wire

import (
	"encoding/binary"
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

// Defaults of the relay that the hello does not announce to an older
// agent, which then assumes them: the largest body, and the interval of
// the relay's pings.
const (
	DefaultMaxBody      = 10 << 20
	DefaultPingInterval = 15 * time.Second
)

// MaxHeaderSize bounds a frame's header (the bytes after the length
// prefix, before the payload). The relay refuses at ingress (431) a request
// whose deliver frame header would be longer, so that whatever it accepts
// can be sent.
const MaxHeaderSize = 1 << 20

// MaxAnswerBody is the largest answer body an agent sends in a response
// frame: the receiver's answer, cut there by the agent. A relay reads its
// agents' frames up to this or its own --max-body, whichever is larger.
const MaxAnswerBody = 10 << 20

// ErrHeaderTooLarge is wrapped by AppendFrame's error for a header over
// MaxHeaderSize.
var ErrHeaderTooLarge = errors.New("frame header too large")

// WebSocket close codes of the protocol (RFC 6455's private range).
const (
	// CloseReplaced: another agent connected to the channel and took it
	// over. The agent's Receive returns an error wrapping ErrReplaced.
	CloseReplaced = 4001
)

// Header is a frame's header, encoded in binary as the comment at the top
// of this file describes (the json tags name its fields, not its
// encoding). Fields are used by the frame types as that comment says.
type Header struct {
	// Type is empty for a frame of a type this devhook does not know.
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

// frameVersion is the first byte of every frame header.
const frameVersion = 1

// typeNames maps the header's type byte to a type; typeCode is its inverse.
var typeNames = [...]string{1: TypeHello, 2: TypeDeliver, 3: TypeResponse, 4: TypeAck}

func typeCode(t string) (byte, bool) {
	for i, name := range typeNames {
		if name != "" && name == t {
			return byte(i), true
		}
	}
	return 0, false
}

// Field tags of the binary header.
const (
	tagID = 1 + iota
	tagChannel
	tagPublicURL
	tagMethod
	tagPath
	tagQuery
	tagRemoteAddr
	tagReceivedAt // varint Unix nanoseconds
	tagQueued     // no value
	tagStatus     // varint
	tagHeader     // name, uvarint count, values
	// Tags from 12 on are fields added later: a uvarint length and the
	// value (see the top of this file).
)

// HelloMaxBody is the hello's header that announces the relay's MaxBody.
const HelloMaxBody = "Devhook-Max-Body"

// HelloPingInterval is the hello's header that announces the relay's
// heartbeat period, in milliseconds.
const HelloPingInterval = "Devhook-Ping-Interval"

// HelloResponseTimeout is the hello's header that announces how long the
// relay lets a live delivery's sender wait for the agent's answer, in
// milliseconds.
const HelloResponseTimeout = "Devhook-Response-Timeout"

// AppendFrame appends the encoding of h and payload to dst.
func AppendFrame(dst []byte, h *Header, payload []byte) ([]byte, error) {
	code, ok := typeCode(h.Type)
	if !ok {
		return nil, fmt.Errorf("encode frame: unknown type %q", h.Type)
	}
	n := FrameHeaderLen(h)
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("encode %s frame: %w: %d bytes, over %d", h.Type, ErrHeaderTooLarge, n, MaxHeaderSize)
	}
	if need := 4 + n + len(payload); cap(dst)-len(dst) < need {
		dst = append(make([]byte, 0, len(dst)+need), dst...) // grown once, to the size
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, frameVersion, code)
	dst = appendField(dst, tagID, h.ID)
	dst = appendField(dst, tagChannel, h.Channel)
	dst = appendField(dst, tagPublicURL, h.PublicURL)
	dst = appendField(dst, tagMethod, h.Method)
	dst = appendField(dst, tagPath, h.Path)
	dst = appendField(dst, tagQuery, h.Query)
	dst = appendField(dst, tagRemoteAddr, h.RemoteAddr)
	if !h.ReceivedAt.IsZero() {
		dst = binary.AppendVarint(append(dst, tagReceivedAt), h.ReceivedAt.UnixNano())
	}
	if h.Queued {
		dst = append(dst, tagQueued)
	}
	if h.Status != 0 {
		dst = binary.AppendVarint(append(dst, tagStatus), int64(h.Status))
	}
	for k, vs := range h.Header {
		if k == "" {
			return nil, fmt.Errorf("encode %s frame: empty header name", h.Type)
		}
		dst = appendField(dst, tagHeader, k)
		dst = binary.AppendUvarint(dst, uint64(len(vs)))
		for _, v := range vs {
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return append(dst, payload...), nil
}

// appendField appends a string field; an empty one is left out.
func appendField(dst []byte, tag byte, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// FrameHeaderLen is the length of h's encoding by AppendFrame, without the
// length prefix, computed without encoding it.
func FrameHeaderLen(h *Header) int {
	n := 2 // version, type
	str := func(v string) {
		if v != "" {
			n += 1 + uvarintLen(uint64(len(v))) + len(v)
		}
	}
	str(h.ID)
	str(h.Channel)
	str(h.PublicURL)
	str(h.Method)
	str(h.Path)
	str(h.Query)
	str(h.RemoteAddr)
	if !h.ReceivedAt.IsZero() {
		n += 1 + varintLen(h.ReceivedAt.UnixNano())
	}
	if h.Queued {
		n++
	}
	if h.Status != 0 {
		n += 1 + varintLen(int64(h.Status))
	}
	for k, vs := range h.Header {
		str(k)
		n += uvarintLen(uint64(len(vs)))
		for _, v := range vs {
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

// ErrMalformed is wrapped by every frame decoding error.
var ErrMalformed = errors.New("malformed frame")

// headerReader reads the fields of a binary frame header. Its strings
// are substrings of one copy of the whole header (all), made once: a
// deliver frame has a dozen strings and more, each its own allocation
// otherwise.
type headerReader struct {
	b   []byte
	all string // the header's bytes, as a string
	off int    // of b within all
	err error
}

func (r *headerReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
	r.b = nil
}

func (r *headerReader) skip(n int) {
	r.b = r.b[n:]
	r.off += n
}

func (r *headerReader) byte() byte {
	c := r.b[0]
	r.skip(1)
	return c
}

func (r *headerReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad length")
		return 0
	}
	r.skip(n)
	return v
}

func (r *headerReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad number")
		return 0
	}
	r.skip(n)
	return v
}

func (r *headerReader) str() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("string runs past the header")
		return ""
	}
	s := r.all[r.off : r.off+int(n)]
	r.skip(int(n))
	return s
}

// skipField skips the value of a field this devhook does not know: a
// uvarint length and that many bytes.
func (r *headerReader) skipField(tag byte) {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail(fmt.Sprintf("field %d runs past the header", tag))
		return
	}
	r.skip(int(n))
}

// DecodeFrame splits a frame into its header and payload. The payload
// aliases msg. Fields this devhook does not know are skipped; a frame of
// a type it does not know is returned with an empty Type and no fields,
// for the caller to ignore (see the top of this file).
func DecodeFrame(msg []byte) (Header, []byte, error) {
	var h Header
	if len(msg) < 4 {
		return h, nil, fmt.Errorf("%w: %d bytes, shorter than the length prefix", ErrMalformed, len(msg))
	}
	n := binary.BigEndian.Uint32(msg)
	if n > MaxHeaderSize || int(n) > len(msg)-4 || n < 2 {
		return h, nil, fmt.Errorf("%w: header length %d does not fit in %d bytes", ErrMalformed, n, len(msg)-4)
	}
	hdr := msg[4 : 4+n]
	if hdr[0] != frameVersion {
		return h, nil, fmt.Errorf("%w: version %d, this devhook speaks %d (upgrade the older side)", ErrMalformed, hdr[0], frameVersion)
	}
	if int(hdr[1]) >= len(typeNames) || typeNames[hdr[1]] == "" {
		return h, msg[4+n:], nil // a type added after this devhook: ignored
	}
	h.Type = typeNames[hdr[1]]
	r := headerReader{b: hdr[2:], all: string(hdr[2:])}
	var values []string // backing array of every header's values
	for len(r.b) > 0 && r.err == nil {
		switch tag := r.byte(); tag {
		case tagID:
			h.ID = r.str()
		case tagChannel:
			h.Channel = r.str()
		case tagPublicURL:
			h.PublicURL = r.str()
		case tagMethod:
			h.Method = r.str()
		case tagPath:
			h.Path = r.str()
		case tagQuery:
			h.Query = r.str()
		case tagRemoteAddr:
			h.RemoteAddr = r.str()
		case tagReceivedAt:
			h.ReceivedAt = time.Unix(0, r.varint()).UTC()
		case tagQueued:
			h.Queued = true
		case tagStatus:
			h.Status = int(r.varint())
		case tagHeader:
			k := r.str()
			count := r.uvarint()
			if count > uint64(len(r.b)) { // each value takes at least a byte
				r.fail("header value count runs past the header")
				break
			}
			if k == "" {
				r.fail("empty header name")
				break
			}
			if h.Header == nil {
				h.Header = make(http.Header, 8)
			}
			if cap(values)-len(values) < int(count) {
				values = make([]string, 0, max(16, int(count)))
			}
			start := len(values)
			for range count {
				values = append(values, r.str())
			}
			// Capped, so that an append to one header's values never
			// writes over the next one's.
			vs := values[start:len(values):len(values)]
			if prev, ok := h.Header[k]; ok {
				vs = append(prev[:len(prev):len(prev)], vs...)
			}
			h.Header[k] = vs
		default:
			r.skipField(tag) // a field added after this devhook
		}
	}
	if r.err != nil {
		return Header{}, nil, r.err
	}
	switch h.Type {
	case TypeDeliver, TypeResponse, TypeAck:
		if h.ID == "" {
			return h, nil, fmt.Errorf("%w: %s frame without id", ErrMalformed, h.Type)
		}
	}
	return h, msg[4+n:], nil
}

// DeliverHeader is the frame header of d.
func DeliverHeader(d *devhook.Delivery) *Header {
	return &Header{Type: TypeDeliver, ID: d.ID, Method: d.Method, Path: d.Path, Query: d.RawQuery,
		Header: d.Header, ReceivedAt: d.ReceivedAt, RemoteAddr: d.RemoteAddr, Queued: d.Queued}
}

// DeliveryOf rebuilds the delivery a deliver frame carries.
func DeliveryOf(h *Header, channel string, body []byte) *devhook.Delivery {
	return &devhook.Delivery{ID: h.ID, Channel: channel, ReceivedAt: h.ReceivedAt, Method: h.Method,
		Path: h.Path, RawQuery: h.Query, Header: h.Header, Body: body, RemoteAddr: h.RemoteAddr, Queued: h.Queued}
}

// hopHeaders are dropped when a request or response crosses the tunnel
// (RFC 9110 section 7.6.1), with any header the Connection header names.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// HasHopByHop reports whether h has a hop-by-hop header, one EndToEnd
// drops. Without one (the Connection header is one, so no other name
// can be listed in it), h is already end to end.
func HasHopByHop(h http.Header) bool {
	for _, k := range hopHeaders {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// EndToEndShared is EndToEnd(h), but h itself when it has no hop-by-hop
// header (the common case: no copy), for a caller that owns h and does
// not change what it returns.
func EndToEndShared(h http.Header) http.Header {
	if HasHopByHop(h) {
		return EndToEnd(h)
	}
	return h
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

// ClipReason keeps a close reason within the 123 bytes a control frame
// allows.
func ClipReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
