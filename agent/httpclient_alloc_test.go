//go:build !race

package agent

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/devhook/devhook"
)

// maxForwardAllocs is the pinned number of heap allocations of one
// forward through the agent's own client: the target's URL, the answer's
// header (its map, its values, one string for the names and values) and
// its body. 23 before the request's head was written and the answer's
// head read by hand.
const maxForwardAllocs = 6

// TestForwardAllocations pins the allocations of a forward of a 1.5 KB
// POST on a kept-alive connection, to a receiver that allocates nothing.
func TestForwardAllocations(t *testing.T) {
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
	base := rawServer(t, func(_ int, c net.Conn) {
		buf := make([]byte, 64<<10)
		n := 0
		for {
			m, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += m
			// Each whole request (a head and its Content-Length), answered.
			for {
				end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
				if end < 0 {
					break
				}
				size := end + 4
				if i := bytes.Index(buf[:end], []byte("\r\nContent-Length: ")); i >= 0 {
					l := 0
					for _, d := range buf[i+len("\r\nContent-Length: ") : end] {
						if d == '\r' {
							break
						}
						l = l*10 + int(d-'0')
					}
					size += l
				}
				if n < size {
					break
				}
				if _, err := c.Write(answer); err != nil {
					return
				}
				n = copy(buf, buf[size:n])
			}
		}
	})
	a := testAgent(t, false, nil)
	body := bytes.Repeat([]byte("x"), 1500)
	header := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"run-status/1.0"},
		"Service-Signature": {"t=1700000000,v1=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}
	ctx, cancel := context.WithCancel(context.Background()) // as the agent's: watched
	defer cancel()
	target := base + "/hook"
	var at devhook.Attempt // the caller's, not the forward's
	one := func() {
		at = devhook.Attempt{Target: target}
		a.send(ctx, &at, http.MethodPost, header, body)
		if at.Status != 200 || string(at.Body) != `{"ok":true}` {
			t.Fatalf("%d %q %q", at.Status, at.Error, at.Body)
		}
	}
	for range 10 {
		one()
	}
	if n := testing.AllocsPerRun(200, one); n > maxForwardAllocs {
		t.Errorf("a forward allocates %.1f times, over the %d pinned; find the new ones with go test -bench Forward/direct -memprofile", n, maxForwardAllocs)
	} else {
		t.Logf("%.1f allocations per forward", n)
	}
}
