package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	for s, want := range map[string]time.Duration{"24h": 24 * time.Hour, "90m": 90 * time.Minute, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour} {
		if got, err := parseAge(s); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "-1h", "d", "xd", "7days", "soon"} {
		if _, err := parseAge(s); err == nil {
			t.Errorf("parseAge(%q) took it", s)
		}
	}
}

// --all asks on a terminal: y deletes, anything else does not.
func TestDeleteAsksOnATerminal(t *testing.T) {
	for answer, ok := range map[string]bool{"y\n": true, "YES\n": true, "n\n": false, "\n": false, "": false} {
		var out bytes.Buffer
		cmd := newDeliveriesDeleteCmd()
		cmd.SetIn(strings.NewReader(answer))
		cmd.SetErr(&out)
		o := &deleteOptions{terminal: func(io.Reader) bool { return true }}
		err := o.confirm(cmd, "every delivery recorded in /d")
		if (err == nil) != ok || !strings.Contains(out.String(), "Delete every delivery recorded in /d? [y/N] ") {
			t.Errorf("answer %q: %v, asked %q", answer, err, out.String())
		}
	}
	o := &deleteOptions{terminal: func(io.Reader) bool { return false }}
	if err := o.confirm(newDeliveriesDeleteCmd(), "all"); err == nil || !strings.Contains(err.Error(), "pass --yes") {
		t.Errorf("off a terminal: %v", err)
	}
	o.yes = true
	if err := o.confirm(newDeliveriesDeleteCmd(), "all"); err != nil {
		t.Errorf("--yes: %v", err)
	}
}
