// Package scenario keeps recorded webhook deliveries as a file that is
// played back as a test: Build and Export make one from recorded
// deliveries (redacting what JSON paths name), Play sends its deliveries
// to a handler and compares each answer with an expectation, and the
// JUnit types carry the outcome, and that of devhook check, to a CI.
//
// # The file, version 1
//
// A scenario is one JSON object in UTF-8, written with two-space indents
// and a final newline. The same deliveries and options give the same
// bytes: fields in the order below, header names sorted, no time of
// saving.
//
//	{
//	  "devhook_scenario": 1,                 // the format's version; first
//	  "about": "…",                          // optional: a line for a reader
//	  "redacted": ["$.data.run_id"],         // optional: the JSON paths redacted
//	  "deliveries": [                        // in the order received; at least one
//	    {
//	      "offset_ms": 0,                    // ms after the first delivery was received
//	      "method": "POST",
//	      "path": "/hook",                   // as received, escaped, starting with "/"
//	      "query": "a=1",                    // optional: as received, without "?"
//	      "headers": {                       // every value, repeated ones in order
//	        "Content-Type": ["application/json"],
//	        "User-Agent": ["service-webhooks/1"]
//	      },
//	      "body_encoding": "base64",         // only for a body that is not UTF-8
//	      "body": "{\"event_type\":…}",      // the body: its text, or base64 with the marker
//	      "signature": "invalid",            // version 2, optional: see below
//	      "recorded": {                      // optional: the receiver's answer then
//	        "status": 200,
//	        "body": "…"                      // the same two forms as the request's
//	      }
//	    }
//	  ]
//	}
//
// A body that is valid UTF-8 is a JSON string, and decodes to the exact
// bytes received; any other body is standard base64 (padded) with
// "body_encoding": "base64". "utf-8" is accepted as an explicit marker of
// the first form. Content-Length is not kept: the sender frames the body,
// so an edited body needs no edited header.
//
// The service-signature header is not kept either: a delivery whose
// signature was valid when recorded is signed afresh when played. One
// whose signature failed keeps what it was, so that play reproduces it
// and the handler's recorded refusal is expected again:
//
//	"signature": "invalid"    // signed with another secret: played signed with a key that is not the secret
//	"signature": "missing"    // no header: played without one
//	"signature": "malformed"  // the header as recorded is in "headers", and played as it is
//	"signature": "expired"    // t outside the window: played with a t 10 minutes old
//
// Absent means valid (or not verified when recorded): signed afresh. A
// file that has a "signature" is version 2, so that a devhook that reads
// only version 1 says to upgrade; one without is version 1, as before.
//
// "recorded" is the last answer the receiver gave to the delivery as
// received (replays left out): absent when it never answered.
//
// Reading is strict, so that a mistake is not played as a test: another
// version, a field this version does not have, a body that is not what
// its encoding says, a header that cannot be sent are errors that name
// the file and the delivery (1-based).
package scenario

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/internal/atomicfile"
)

// Version is the newest version of the file format this package reads;
// it writes version 1 unless a delivery has a Signature (see above).
const Version = 2

// What a delivery's signature was when recorded, when it was not valid.
const (
	SignatureInvalid   = "invalid"
	SignatureMissing   = "missing"
	SignatureMalformed = "malformed"
	SignatureExpired   = "expired"
)

// signatureKinds are the values of an entry's "signature".
func signatureKinds() []string {
	return []string{SignatureInvalid, SignatureMissing, SignatureMalformed, SignatureExpired}
}

// About is the line Build puts in a scenario for a reader who finds the file.
const About = "devhook scenario: recorded webhook deliveries, played back with `devhook scenario play`; format: docs/SCENARIOS.md"

// Body encodings.
const (
	EncodingText   = "utf-8"
	EncodingBase64 = "base64"
)

// Scenario is a parsed scenario file.
type Scenario struct {
	// Version is the file's version when read; Marshal writes the lowest
	// version that holds the deliveries.
	Version    int
	About      string
	Redacted   []string // the JSON paths redacted when it was saved
	Deliveries []Entry
}

// Entry is one delivery of a scenario.
type Entry struct {
	OffsetMS int64
	Method   string
	Path     string
	Query    string
	Header   http.Header
	Body     []byte
	Recorded *Answer
	// Signature is what the delivery's signature was when recorded: ""
	// (valid, or not verified) or one of the Signature* kinds. A
	// malformed one keeps its header in Header.
	Signature string
}

// Answer is a receiver's answer as recorded.
type Answer struct {
	Status int
	Body   []byte
}

// fileJSON and the types below are the file's form.
type fileJSON struct {
	Version    *int              `json:"devhook_scenario"`
	About      string            `json:"about,omitempty"`
	Redacted   []string          `json:"redacted,omitempty"`
	Deliveries []json.RawMessage `json:"deliveries"`
}

type entryJSON struct {
	OffsetMS     *int64              `json:"offset_ms"`
	Method       string              `json:"method"`
	Path         string              `json:"path"`
	Query        string              `json:"query,omitempty"`
	Headers      map[string][]string `json:"headers"`
	BodyEncoding string              `json:"body_encoding,omitempty"`
	Body         json.RawMessage     `json:"body"`
	Signature    string              `json:"signature,omitempty"`
	Recorded     *answerJSON         `json:"recorded,omitempty"`
}

type answerJSON struct {
	Status       int             `json:"status"`
	BodyEncoding string          `json:"body_encoding,omitempty"`
	Body         json.RawMessage `json:"body"`
}

// Marshal writes s in the file format.
func (s *Scenario) Marshal() ([]byte, error) {
	v := 1
	for i := range s.Deliveries {
		if s.Deliveries[i].Signature != "" {
			v = 2
		}
	}
	f := fileJSON{Version: &v, About: s.About, Redacted: s.Redacted, Deliveries: make([]json.RawMessage, 0, len(s.Deliveries))}
	for i := range s.Deliveries {
		e := &s.Deliveries[i]
		off := e.OffsetMS
		w := entryJSON{OffsetMS: &off, Method: e.Method, Path: e.Path, Query: e.Query, Headers: e.Header, Signature: e.Signature}
		if w.Headers == nil {
			w.Headers = map[string][]string{}
		}
		var err error
		if w.Body, w.BodyEncoding, err = encodeBody(e.Body); err != nil {
			return nil, err
		}
		if a := e.Recorded; a != nil {
			w.Recorded = &answerJSON{Status: a.Status}
			if w.Recorded.Body, w.Recorded.BodyEncoding, err = encodeBody(a.Body); err != nil {
				return nil, err
			}
		}
		raw, err := marshal(w)
		if err != nil {
			return nil, err
		}
		f.Deliveries = append(f.Deliveries, raw)
	}
	raw, err := marshal(f)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping: a body with < or & stays
// readable.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encodeBody is a body's JSON value and its encoding marker ("" for text).
func encodeBody(b []byte) (json.RawMessage, string, error) {
	if utf8.Valid(b) {
		raw, err := marshal(string(b))
		return raw, "", err
	}
	raw, err := marshal(base64.StdEncoding.EncodeToString(b))
	return raw, EncodingBase64, err
}

// WriteFile writes the scenario to path, replacing the file whole.
func (s *Scenario) WriteFile(path string) error {
	b, err := s.Marshal()
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// FormatError is a scenario file that cannot be read. Entry is the
// 1-based delivery the problem is in, 0 for the file as a whole.
type FormatError struct {
	File  string
	Entry int
	Err   error
}

func (e *FormatError) Error() string {
	if e.Entry > 0 {
		return fmt.Sprintf("scenario %s: delivery %d: %v", e.File, e.Entry, e.Err)
	}
	return fmt.Sprintf("scenario %s: %v", e.File, e.Err)
}

func (e *FormatError) Unwrap() error { return e.Err }

// ReadFile reads and checks the scenario at path.
func ReadFile(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &FormatError{File: path, Err: err}
	}
	return Parse(path, b)
}

// Parse reads and checks a scenario; name is the file's name, for errors.
func Parse(name string, data []byte) (*Scenario, error) {
	fail := func(entry int, format string, args ...any) error {
		return &FormatError{File: name, Entry: entry, Err: fmt.Errorf(format, args...)}
	}
	var probe any
	if err := json.Unmarshal(data, &probe); err != nil {
		var syn *json.SyntaxError
		switch {
		case len(bytes.TrimSpace(data)) == 0:
			return nil, fail(0, "the file is empty; a scenario is JSON that devhook scenario save writes")
		case errors.As(err, &syn) && syn.Offset >= int64(len(data)) || strings.Contains(err.Error(), "unexpected end"):
			return nil, fail(0, "the JSON ends early (a truncated file?): %w", err)
		case errors.As(err, &syn):
			return nil, fail(0, "not valid JSON at byte %d: %w", syn.Offset, err)
		}
		return nil, fail(0, "not valid JSON: %w", err)
	}
	if _, ok := probe.(map[string]any); !ok {
		return nil, fail(0, "not a devhook scenario: the file is not a JSON object")
	}
	var version struct {
		Version *json.RawMessage `json:"devhook_scenario"`
	}
	json.Unmarshal(data, &version)
	if version.Version == nil {
		return nil, fail(0, "not a devhook scenario: it has no \"devhook_scenario\" field")
	}
	var v int
	if err := json.Unmarshal(*version.Version, &v); err != nil {
		return nil, fail(0, "\"devhook_scenario\" is %s, not a version number", *version.Version)
	}
	if v < 1 || v > Version {
		msg := fmt.Sprintf("it is version %d of the scenario format; this devhook reads versions 1 to %d", v, Version)
		if v > Version {
			msg += ": a newer devhook wrote it, upgrade devhook to play it"
		}
		return nil, fail(0, "%s", msg)
	}
	var f fileJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fail(0, "%w", inFileTerms(err))
	}
	if len(f.Deliveries) == 0 {
		return nil, fail(0, "it has no deliveries")
	}
	s := &Scenario{Version: v, About: f.About, Redacted: f.Redacted}
	for i, raw := range f.Deliveries {
		e, err := parseEntry(raw)
		if err != nil {
			return nil, fail(i+1, "%w", err)
		}
		if e.Signature != "" && v < 2 {
			return nil, fail(i+1, "\"signature\" is a field of version 2; the file says version %d", v)
		}
		s.Deliveries = append(s.Deliveries, *e)
	}
	return s, nil
}

func parseEntry(raw json.RawMessage) (*Entry, error) {
	var w entryJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, inFileTerms(err)
	}
	switch {
	case w.OffsetMS == nil:
		return nil, errors.New(`no "offset_ms"`)
	case *w.OffsetMS < 0:
		return nil, fmt.Errorf(`"offset_ms" is %d; it is the time after the first delivery, 0 or more`, *w.OffsetMS)
	case !isToken(w.Method):
		return nil, fmt.Errorf(`"method" %q is not an HTTP method`, w.Method)
	case !strings.HasPrefix(w.Path, "/") || !sendable(w.Path, " #?"):
		return nil, fmt.Errorf(`"path" %q is not a request path (it starts with "/", without spaces, "?" or "#")`, w.Path)
	case !sendable(w.Query, " #"):
		return nil, fmt.Errorf(`"query" %q cannot be sent (no spaces, "#" or control characters)`, w.Query)
	case w.Headers == nil:
		return nil, errors.New(`no "headers" (an empty object when there are none)`)
	}
	for name, values := range w.Headers {
		if !isToken(name) {
			return nil, fmt.Errorf("header name %q is not a valid HTTP header name", name)
		}
		for _, v := range values {
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, fmt.Errorf("header %s has a value with a line break or NUL, which cannot be sent", name)
			}
		}
	}
	body, err := decodeBody(w.Body, w.BodyEncoding)
	if err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	e := &Entry{OffsetMS: *w.OffsetMS, Method: w.Method, Path: w.Path, Query: w.Query, Header: http.Header(w.Headers), Body: body, Signature: w.Signature}
	hasSig := false
	for name := range w.Headers {
		hasSig = hasSig || strings.EqualFold(name, devhook.SignatureHeader)
	}
	switch {
	case w.Signature != "" && !slices.Contains(signatureKinds(), w.Signature):
		return nil, fmt.Errorf("\"signature\" %q is unknown; it is one of %s, or absent (valid)", w.Signature, strings.Join(signatureKinds(), ", "))
	case w.Signature == SignatureMalformed && !hasSig:
		return nil, fmt.Errorf("\"signature\" is malformed but the headers have no %s to send as recorded", devhook.SignatureHeader)
	}
	if a := w.Recorded; a != nil {
		if a.Status < 100 || a.Status > 999 {
			return nil, fmt.Errorf("recorded status %d is not an HTTP status", a.Status)
		}
		b, err := decodeBody(a.Body, a.BodyEncoding)
		if err != nil {
			return nil, fmt.Errorf("recorded body: %w", err)
		}
		e.Recorded = &Answer{Status: a.Status, Body: b}
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("it is not valid UTF-8 (a body that is not UTF-8 is written in base64, with \"body_encoding\": \"base64\")")
	}
	return e, nil
}

// decodeBody returns the bytes of a body value, checking that it is what
// its encoding says.
func decodeBody(raw json.RawMessage, encoding string) ([]byte, error) {
	if len(raw) == 0 || raw[0] != '"' {
		if len(raw) == 0 {
			return nil, errors.New(`no "body" (an empty string for an empty body)`)
		}
		return nil, fmt.Errorf("it is %s, not a JSON string", clip(string(raw)))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	switch encoding {
	case "", EncodingText:
		if !utf8.Valid(raw) {
			return nil, errors.New("it is declared text (UTF-8) but holds bytes that are not UTF-8; write such a body in base64 with \"body_encoding\": \"base64\"")
		}
		if err := pairedSurrogates(raw); err != nil {
			return nil, fmt.Errorf("it is declared text (UTF-8) but %w; write such a body in base64 with \"body_encoding\": \"base64\"", err)
		}
		return []byte(s), nil
	case EncodingBase64:
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("\"body_encoding\" is base64 but the body is not standard padded base64: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("\"body_encoding\" %q is unknown; it is %q or absent (text)", encoding, EncodingBase64)
}

// pairedSurrogates checks the \u escapes of a JSON string: a surrogate
// half without its other half decodes to U+FFFD, not to the bytes meant.
func pairedSurrogates(raw []byte) error {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' || i+4 >= len(raw) {
			continue
		}
		r := hexRune(raw[i+1 : i+5])
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("it has a lone \\u%04x escape", r)
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return fmt.Errorf("it has a lone \\u%04x escape", r)
			}
			if lo := hexRune(raw[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
				return fmt.Errorf("it has a lone \\u%04x escape", r)
			}
			i += 6
		}
	}
	return nil
}

func hexRune(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return -1
		}
	}
	return r
}

// isToken reports an RFC 9110 token: a method or a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// sendable reports a string with no control characters and none of bad.
func sendable(s, bad string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return false
		}
	}
	return !strings.ContainsAny(s, bad)
}

// clip cuts s to 40 characters.
func clip(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}
