package devhook

import (
	"encoding/binary"
	"encoding/json"
	"unsafe"
)

// ParseEvent extracts the fields devhook indexes from a run.status body:
// event_type, and data.run_id, data.status and data.status_v2.
//
// A body that is not one valid JSON object (as json.Valid judges it, with
// no space before the opening brace) yields the zero Event. Keys match
// exactly; of repeated keys the last counts, as when decoding into a map.
// A field whose value is not a string is empty, as are the data fields
// when data is not an object.
//
// Why a scanner of its own instead of encoding/json: it runs for every
// delivery, on the agent's path to the receiver, so it scans the body once
// without building anything, eight bytes at a time inside strings, and
// makes the four strings in one allocation. On a 1.5 KB body
// (BenchmarkParseEvent*): this 0.8 µs and 1 allocation; encoding/json with
// the same behaviour (json.Valid and a map, parseEventRef in the tests)
// 13 µs and 55; encoding/json into a struct 5.8 µs and 11, but that one
// matches keys case-insensitively and keeps the first of repeated keys
// whose later value is not a string. A delivery's tunnel costs about 80 µs of
// CPU end to end at concurrency 32 (go run ./bench), so the saving is
// about 14% of it: kept.
// TestParseEvent_MatchesReference and FuzzParseEvent hold it to
// parseEventRef.
func ParseEvent(body []byte) Event {
	if len(body) == 0 || body[0] != '{' {
		return Event{}
	}
	s := scanner{b: body}
	// The values as found: Type, RunID, Status, StatusV2.
	var vals [4]eventValue
	ok := s.object(func(key []byte, plain bool) bool {
		switch keyIs(key, plain) {
		case "event_type":
			return s.stringValue(&vals[0])
		case "data":
			vals[1], vals[2], vals[3] = eventValue{}, eventValue{}, eventValue{}
			if s.i >= len(s.b) || s.b[s.i] != '{' {
				return s.value()
			}
			return s.object(func(key []byte, plain bool) bool {
				var dst *eventValue
				switch keyIs(key, plain) {
				case "run_id":
					dst = &vals[1]
				case "status":
					dst = &vals[2]
				case "status_v2":
					dst = &vals[3]
				default:
					return s.value()
				}
				return s.stringValue(dst)
			})
		}
		return s.value()
	})
	s.space()
	if !ok || s.i != len(s.b) {
		return Event{}
	}
	v := eventStrings(&vals)
	return Event{Type: v[0], RunID: v[1], Status: v[2], StatusV2: v[3]}
}

// eventValue is a string value ParseEvent keeps: raw when it is plain (a
// slice of the body), else decoded.
type eventValue struct {
	raw     []byte
	decoded string
}

// eventStrings returns the values of vals, the plain ones copied out of the
// body in one allocation.
func eventStrings(vals *[4]eventValue) (out [4]string) {
	n := 0
	for i := range vals {
		n += len(vals[i].raw)
	}
	var all string
	if n > 0 {
		b := make([]byte, 0, n)
		for i := range vals {
			b = append(b, vals[i].raw...)
		}
		all = unsafe.String(&b[0], n) // b is not used again
	}
	for i := range vals {
		if len(vals[i].raw) > 0 {
			out[i], all = all[:len(vals[i].raw)], all[len(vals[i].raw):]
		} else {
			out[i] = vals[i].decoded
		}
	}
	return out
}

// keyIs returns the key when it is one ParseEvent looks for, else "".
func keyIs(raw []byte, plain bool) string {
	if !plain {
		var k string
		if json.Unmarshal(quote(raw), &k) != nil {
			return ""
		}
		raw = []byte(k)
	}
	// Constants: no string is made of raw.
	switch string(raw) {
	case "event_type":
		return "event_type"
	case "data":
		return "data"
	case "run_id":
		return "run_id"
	case "status":
		return "status"
	case "status_v2":
		return "status_v2"
	}
	return ""
}

func quote(raw []byte) []byte {
	q := make([]byte, 0, len(raw)+2)
	return append(append(append(q, '"'), raw...), '"')
}

// maxDepth is encoding/json's nesting limit: deeper input is not valid.
const maxDepth = 10000

// scanner validates JSON as encoding/json's scanner does.
type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object scans the object at s.i. For each member it calls member with the
// raw key and whether the key needs no unescaping, with s.i at the value,
// which member must scan.
func (s *scanner) object(member func(key []byte, plain bool) bool) bool {
	if s.depth++; s.depth > maxDepth {
		return false
	}
	s.i++ // '{'
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		key, plain, ok := s.str()
		if !ok {
			return false
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.space()
		if !member(key, plain) {
			return false
		}
		s.space()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

func (s *scanner) array() bool {
	return s.elements(func(int) bool { return s.value() })
}

// value scans any value at s.i.
func (s *scanner) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(func([]byte, bool) bool { return s.value() })
	case c == '[':
		return s.array()
	case c == '"':
		_, _, ok := s.str()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

// stringValue scans the value at s.i into dst if it is a string, and
// empties dst if it is not.
func (s *scanner) stringValue(dst *eventValue) bool {
	*dst = eventValue{}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.value()
	}
	raw, plain, ok := s.str()
	if !ok {
		return false
	}
	if plain {
		dst.raw = raw
		return true
	}
	var v string // not &dst.decoded: that would put dst on the heap
	if json.Unmarshal(quote(raw), &v) != nil {
		return false
	}
	dst.decoded = v
	return true
}

// str scans the string at s.i and returns what is between the quotes, and
// whether that is plain ASCII without escapes (the string itself).
func (s *scanner) str() (raw []byte, plain, ok bool) {
	s.i++ // '"'
	start := s.i
	plain = true
	for s.i < len(s.b) {
		// Eight bytes at a time while none is a quote, a backslash, a
		// control character or non-ASCII: most of a body is such text.
		for s.i+8 <= len(s.b) {
			x := binary.LittleEndian.Uint64(s.b[s.i:])
			q, bs := x^(ones*'"'), x^(ones*'\\')
			if ((q-ones)&^q|(bs-ones)&^bs|(x-ones*0x20)&^x|x)&highs != 0 {
				break
			}
			s.i += 8
		}
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, plain, true
		case c < 0x20:
			return nil, false, false
		case c == '\\':
			plain = false
			s.i++
			if s.i >= len(s.b) {
				return nil, false, false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return nil, false, false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				s.i += 5
			default:
				return nil, false, false
			}
		case c >= 0x80:
			plain = false
			s.i++
		default:
			s.i++
		}
	}
	return nil, false, false
}

// For str's eight bytes at a time: (x-ones*c)&^x&highs is not 0 when a
// byte of x is under c; with x^(ones*c) for x, when one is c.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func (s *scanner) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// elements scans the array at s.i, calling element with the index of each
// element, with s.i at it; element must scan it.
func (s *scanner) elements(element func(n int) bool) bool {
	if s.depth++; s.depth > maxDepth {
		return false
	}
	s.i++ // '['
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return true
	}
	for n := 0; ; n++ {
		if !element(n) {
			return false
		}
		s.space()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case ']':
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}
