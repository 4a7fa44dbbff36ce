package devhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A dotted path to a field of a JSON body, and the values of several paths
// found in one scan: listen's routes (json:DOTTED.PATH=VALUE) look a
// delivery's body up with them.
//
// A path is keys separated by dots, from the top-level value:
// data.run_id. A key that is a decimal number (0, 12) is also an index
// into an array: items.0.id is the id of the first element of items, and
// of the member "0" of an object. A key cannot hold a dot.
//
// LookupJSON runs the scanner of ParseEvent over the body once, for every
// path at once, building nothing: a value found is a slice of the body.
// It judges the body as ParseEvent does: one valid JSON value (as
// json.Valid says, with space around it allowed here), keys matched
// exactly, and of repeated keys the last one counts, as when decoding into
// a map. Why not encoding/json: a route's JSON matcher runs for every
// delivery while devhook forwards it; decoding a 1.5 KB body into
// map[string]any costs about 12 µs and 55 allocations, this scan about
// 1 µs and none (BenchmarkLookupJSON, BenchmarkLookupJSONRef);
// TestLookupJSON_MatchesReference and FuzzLookupJSON hold it to
// encoding/json.

// MaxJSONPaths is how many paths one LookupJSON call takes.
const MaxJSONPaths = 64

// JSONPath is a parsed dotted path. Its zero value is the top-level value.
type JSONPath struct {
	segs []jsonSeg
}

type jsonSeg struct {
	key   string
	index int // the key as an array index, or -1
}

// ParseJSONPath parses a dotted path such as data.items.0.id.
func ParseJSONPath(s string) (JSONPath, error) {
	if s == "" {
		return JSONPath{}, errors.New("the JSON path is empty; give one such as data.run_id")
	}
	var p JSONPath
	for i, k := range strings.Split(s, ".") {
		if k == "" {
			return JSONPath{}, fmt.Errorf("the JSON path %q has an empty key (key %d): keys are separated by single dots, as in data.items.0.id", s, i+1)
		}
		idx := -1
		if n, err := strconv.Atoi(k); err == nil && n >= 0 && strconv.Itoa(n) == k {
			idx = n
		}
		p.segs = append(p.segs, jsonSeg{key: k, index: idx})
	}
	return p, nil
}

// String is the path as written.
func (p JSONPath) String() string {
	keys := make([]string, len(p.segs))
	for i, s := range p.segs {
		keys[i] = s.key
	}
	return strings.Join(keys, ".")
}

// JSONValue is a value LookupJSON found: its bytes in the body, or none.
type JSONValue struct {
	raw []byte
}

// Found reports whether the path led to a value.
func (v JSONValue) Found() bool { return v.raw != nil }

// Raw is the value as written in the body, or nil.
func (v JSONValue) Raw() []byte { return v.raw }

// TextIs reports whether the value's text is want: a string's value (its
// escapes decoded), or the literal of a number, true, false or null as
// written (1.0 is not 1). With stringOnly, only a string's. An object or
// an array has no text, and a value not found neither.
func (v JSONValue) TextIs(want string, stringOnly bool) bool {
	if len(v.raw) == 0 {
		return false
	}
	switch v.raw[0] {
	case '"':
		if inner := v.raw[1 : len(v.raw)-1]; verbatim(inner) {
			return string(inner) == want
		}
		var s string
		return json.Unmarshal(v.raw, &s) == nil && s == want
	case '{', '[':
		return false
	}
	return !stringOnly && string(v.raw) == want
}

// LookupJSON finds each of paths (at most MaxJSONPaths) in body with one
// scan, and sets out[i] to the value of paths[i], or to none. It returns
// false, with every out[i] none, when body is not one valid JSON value.
func LookupJSON(body []byte, paths []JSONPath, out []JSONValue) bool {
	if len(paths) > MaxJSONPaths || len(out) < len(paths) {
		panic("devhook: LookupJSON: more than MaxJSONPaths paths, or out shorter than paths")
	}
	clear(out[:len(paths)])
	s := scanner{b: body}
	s.space()
	var all uint64
	if len(paths) == MaxJSONPaths {
		all = ^uint64(0)
	} else {
		all = 1<<len(paths) - 1
	}
	ok := s.find(paths, 0, all, out)
	s.space()
	if !ok || s.i != len(s.b) {
		clear(out[:len(paths)])
		return false
	}
	return true
}

// find scans the value at s.i for the paths in active (a bit per index of
// paths), all of which matched their first depth keys to reach it.
func (s *scanner) find(paths []JSONPath, depth int, active uint64, out []JSONValue) bool {
	var ends, deeper uint64
	for m := active; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if len(paths[i].segs) == depth {
			ends |= 1 << i
		} else {
			deeper |= 1 << i
		}
	}
	start := s.i
	var ok bool
	switch {
	case deeper == 0 || s.i >= len(s.b):
		ok = s.value()
	case s.b[s.i] == '{':
		ok = s.object(func(key []byte, plain bool) bool {
			var sub uint64
			for m := deeper; m != 0; m &= m - 1 {
				i := bits.TrailingZeros64(m)
				if keyEquals(key, plain, paths[i].segs[depth].key) {
					sub |= 1 << i
				}
			}
			if sub == 0 {
				return s.value()
			}
			// Of repeated keys the last counts: forget what an
			// earlier one gave.
			for m := sub; m != 0; m &= m - 1 {
				out[bits.TrailingZeros64(m)] = JSONValue{}
			}
			return s.find(paths, depth+1, sub, out)
		})
	case s.b[s.i] == '[':
		ok = s.elements(func(n int) bool {
			var sub uint64
			for m := deeper; m != 0; m &= m - 1 {
				i := bits.TrailingZeros64(m)
				if paths[i].segs[depth].index == n {
					sub |= 1 << i
				}
			}
			if sub == 0 {
				return s.value()
			}
			return s.find(paths, depth+1, sub, out)
		})
	default:
		ok = s.value()
	}
	if ok {
		for m := ends; m != 0; m &= m - 1 {
			out[bits.TrailingZeros64(m)] = JSONValue{raw: s.b[start:s.i:s.i]}
		}
	}
	return ok
}

// verbatim reports whether the inside of a JSON string is its value: no
// escape, valid UTF-8 (encoding/json turns invalid bytes into U+FFFD).
func verbatim(inner []byte) bool {
	return bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner)
}

// keyEquals reports whether the raw key (between its quotes; plain: no
// escapes and ASCII) is want.
func keyEquals(raw []byte, plain bool, want string) bool {
	if plain || verbatim(raw) {
		return string(raw) == want
	}
	var k string
	return json.Unmarshal(quote(raw), &k) == nil && k == want
}
