package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
)

// front is a TCP front of a relay that can go down: while down, every
// connection is reset as soon as it is accepted (and counted), and those
// that were open are cut.
type front struct {
	ln       net.Listener
	upstream string
	isDown   atomic.Bool
	resets   atomic.Int64
	mu       sync.Mutex
	open     map[net.Conn]bool
	wg       sync.WaitGroup
}

func newFront(t *testing.T, upstream string) *front {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{ln: ln, upstream: upstream, open: map[net.Conn]bool{}}
	f.wg.Go(f.accept)
	t.Cleanup(func() {
		ln.Close()
		f.cut()
		f.wg.Wait()
	})
	return f
}

func (f *front) url() string { return "http://" + f.ln.Addr().String() }

func (f *front) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if f.isDown.Load() {
			c.(*net.TCPConn).SetLinger(0) // a reset, as a relay host without its relay answers
			c.Close()
			f.resets.Add(1)
			continue
		}
		u, err := net.Dial("tcp", f.upstream)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.open[c], f.open[u] = true, true
		f.mu.Unlock()
		f.wg.Go(func() { io.Copy(u, c); u.Close(); c.Close() })
		f.wg.Go(func() { io.Copy(c, u); u.Close(); c.Close() })
	}
}

// cut closes every connection passed on.
func (f *front) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.open {
		c.Close()
	}
	clear(f.open)
}

// Issue 37: a relay that goes away is said once, in full, and without a
// word of a proxy for a relay on this machine; the retries that fail
// alike are counted, and the count is said when listen reconnects.
func TestListen_RetriesSayTheFailureOnce(t *testing.T) {
	noProxyEnv(t)
	rdb, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	srv, err := relay.NewServer(relay.Config{Store: rdb})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	f := newFront(t, strings.TrimPrefix(hs.URL, "http://"))
	recv := httptest.NewServer(http.NotFoundHandler())
	defer recv.Close()

	lr := startListen(t, "--forward", recv.URL, "--relay", f.url(), "--data", t.TempDir())
	lr.next(t, "ready")
	var logs []string
	reconnected := make(chan struct{})
	go func() {
		defer close(reconnected)
		for m := range lr.lines {
			switch m["event"] {
			case "log":
				logs = append(logs, fmt.Sprint(m["message"]))
			case "reconnected":
				return
			}
		}
	}()

	f.isDown.Store(true)
	f.cut()
	waitUntil(t, "three connections refused", func() bool { return f.resets.Load() >= 3 })
	f.isDown.Store(false)
	<-reconnected
	tries := f.resets.Load()
	all := strings.Join(logs, "\n")
	t.Logf("%d tries; listen said:\n%s", tries, all)
	if n := strings.Count(all, "cannot reach the relay"); n != 1 {
		t.Errorf("the relay's failure said %d times over %d tries, want once:\n%s", n, tries, all)
	}
	if strings.Contains(strings.ToLower(all), "proxy") {
		t.Errorf("a proxy mentioned for a relay on this machine:\n%s", all)
	}
	if !strings.Contains(all, "failed tries over") {
		t.Errorf("the count of tries is not said on reconnection:\n%s", all)
	}
	if len(logs) > 4 {
		t.Errorf("%d lines for one outage of %d tries, want a few:\n%s", len(logs), tries, all)
	}
}
