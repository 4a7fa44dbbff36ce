package devhook_test

import (
	"testing"

	"github.com/devhook/devhook"
)

func TestShortRunID(t *testing.T) {
	for _, tt := range []struct{ id, want string }{
		{"run-951275eb", "run-951275eb"},
		{"r1", "r1"},
		{"", ""},
		{"3f2a9c1e-5b7d-4e2f-9a1b-2c3d4e5f6a7b", "3f2a9c1e"},       // v4: random from the start
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "2e3f4a5b"},       // v7: the start is the time
		{"1ec9414c-232a-6b00-b3c8-9e6bdeced846", "deced846"},       // v6
		{"nightly-import-2026-11-26-0102", "nightly-impo"},         // not a UUID: its start
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b-x", "0190a1b2-c3d"}, // not a UUID
		{"0190a1b2xc3d4-7e5f-8a9b-0c1d2e3f4a5", "0190a1b2xc3d"},    // not a UUID
	} {
		if got := devhook.ShortRunID(tt.id); got != tt.want {
			t.Errorf("ShortRunID(%q) = %q, want %q", tt.id, got, tt.want)
		}
		if got := devhook.ShortRunID(tt.id); len(got) > devhook.ShortRunIDLen {
			t.Errorf("ShortRunID(%q) = %q: longer than %d", tt.id, got, devhook.ShortRunIDLen)
		}
	}
	// Runs started together (v7, the same millisecond) get short ids
	// that differ.
	a, b := "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "0190a1b2-c3d4-7e60-9a9b-0c1d2e3f4a5c"
	if devhook.ShortRunID(a) == devhook.ShortRunID(b) {
		t.Errorf("two v7 runs of one millisecond share a short id")
	}
}
