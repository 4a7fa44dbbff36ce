package main

import (
	"strings"
	"testing"

	"github.com/devhook/devhook/running"
)

// A listen found by its data directory whose pid is not known (its file
// being written or removed) is named by its data directory alone.
func TestPortsMessage_ListenWithoutItsPid(t *testing.T) {
	taken := []portInUse{{addr: "127.0.0.1:4041", what: "the built-in relay", flag: "--relay-addr"}}
	for _, c := range []struct {
		pid  int
		want string
	}{
		{0, "a devhook listen (data /d) already runs here and holds 127.0.0.1:4041"},
		{42, "devhook listen (pid 42, data /d) already runs here and holds 127.0.0.1:4041"},
	} {
		got := portsMessage(taken, running.Listen{PID: c.pid, Data: "/d"}, true, "/other")
		if !strings.Contains(got, c.want) {
			t.Errorf("pid %d: %q, want it to say %q", c.pid, got, c.want)
		}
	}
}
