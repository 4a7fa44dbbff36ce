package agent_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/agent"
)

// A forward that must dial hands the turn to read on first: a target
// whose dial hangs (its accept queue full, so the kernel drops the SYN)
// holds its own delivery only, and deliveries to another receiver are
// read and forwarded meanwhile.
func TestServe_HangingDialDoesNotHoldTheReading(t *testing.T) {
	hanging := fullAcceptQueue(t)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer recv.Close()
	tn := newTunnel(t, recv.URL, func(c *agent.Config) {
		c.Routes = mustRoutes(t, "path:/hang -> http://"+hanging)
		c.ForwardTimeout = 2 * time.Minute
	})
	tn.startAgent()
	go func() {
		req, _ := http.NewRequest(http.MethodPost, tn.url("/hang"), strings.NewReader(`{}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "the delivery to the hanging target being forwarded", func() bool {
		n, _ := tn.db.Count()
		return n >= 1
	})
	for i := range 3 {
		if resp, _ := tn.post("/after", []byte(`{}`), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery %d after the hanging one: %s", i, resp.Status)
		}
	}
}

// fullAcceptQueue returns the address of a listener that accepts
// nothing, with its queue of one full: the kernel drops a new SYN, so a
// dial to it hangs (Linux).
func fullAcceptQueue(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err != nil {
			return addr // this one hung: the queue is full
		}
		t.Cleanup(func() { c.Close() })
		if i > 16 {
			t.Skip("the kernel kept accepting connections into a queue of one")
		}
	}
}
