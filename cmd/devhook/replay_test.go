package main

import "testing"

// The line end an editor adds on saving (vim's fixeol, nano) to a body
// that ended without one is dropped; one the body had, or more than one
// added, is the edit.
func TestDropAddedNewline(t *testing.T) {
	for _, tt := range []struct{ body, edited, want string }{
		{`{"a":1}`, "{\"a\":1}\n", `{"a":1}`},
		{`{"a":1}`, "{\"a\":2}\n", `{"a":2}`},
		{`{"a":1}`, "{\"a\":1}\r\n", `{"a":1}`},
		{`{"a":1}`, `{"a":1}`, `{"a":1}`},
		{`{"a":1}`, "{\"a\":1}\n\n", "{\"a\":1}\n\n"},
		{"{\"a\":1}\n", "{\"a\":1}\n", "{\"a\":1}\n"},
		{"line\n", "line\n\n", "line\n\n"},
		{"", "\n", ""},
		{`{"a":1}`, "", ""},
	} {
		if got := string(dropAddedNewline([]byte(tt.body), []byte(tt.edited))); got != tt.want {
			t.Errorf("dropAddedNewline(%q, %q) = %q, want %q", tt.body, tt.edited, got, tt.want)
		}
	}
}
