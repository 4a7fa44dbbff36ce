package storetest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// post sends a delivery and returns the status, Retry-After and body.
func post(t *testing.T, url string, body []byte) (int, string, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// The Server over the store: 429 with Retry-After beyond a channel's
// quota, 503 with Retry-After beyond the relay's and on a full disk; the
// other channels go on.
func testServerAnswers(t *testing.T, open Open) {
	var full atomic.Bool
	s := open(t, Config{
		Quota:      relay.Quota{ChannelBytes: 40 << 10, TotalBytes: 100 << 10},
		WriteError: func() error { return diskFull(&full) },
	})
	srv, err := relay.NewServer(relay.Config{Store: s, Router: relay.NewHub(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	body := bytes.Repeat([]byte("x"), 8<<10)
	var chans []wire.Credentials
	for range 4 {
		cr, err := srv.OpenChannel(nil)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, cr)
	}
	url := func(i int) string { return hs.URL + "/c/" + chans[i].Channel + "/hook" }
	// A full disk: 503 with Retry-After, then 202 once there is room.
	full.Store(true)
	if code, ra, msg := post(t, url(3), []byte("{}")); code != http.StatusServiceUnavailable || ra == "" {
		t.Fatalf("on a full disk: %d, Retry-After %q, %q; want 503 with Retry-After", code, ra, msg)
	}
	full.Store(false)
	if code, _, msg := post(t, url(3), []byte("{}")); code != http.StatusAccepted {
		t.Fatalf("with room again: %d %q, want 202", code, msg)
	}
	// Channel 0 to its quota: 4 of 8 KiB with their heads in 40 KiB.
	accepted := 0
	for {
		code, ra, msg := post(t, url(0), body)
		if code == http.StatusAccepted {
			accepted++
			if accepted > 5 {
				t.Fatal("channel 0 took more than 40 KiB")
			}
			continue
		}
		if code != http.StatusTooManyRequests || ra == "" {
			t.Fatalf("beyond the channel's quota: %d, Retry-After %q, %q; want 429 with Retry-After", code, ra, msg)
		}
		break
	}
	if n, _ := s.QueueLen(chans[0].Channel); n != accepted {
		t.Fatalf("channel 0 holds %d, accepted %d", n, accepted)
	}
	// The others go on, until the relay's quota.
	var refused int
	for i := 1; i < 4 && refused == 0; i++ {
		for {
			code, ra, msg := post(t, url(i), body)
			if code == http.StatusAccepted {
				continue
			}
			if code == http.StatusTooManyRequests {
				break // this channel's quota first: the next one
			}
			if code != http.StatusServiceUnavailable || ra == "" {
				t.Fatalf("beyond the relay's quota: %d, Retry-After %q, %q; want 503 with Retry-After", code, ra, msg)
			}
			refused = code
			break
		}
	}
	if refused == 0 {
		t.Fatal("4 channels of 40 KiB filled a quota of 100 KiB")
	}
	if n, _ := s.QueueLen(chans[0].Channel); n != accepted {
		t.Fatalf("channel 0 holds %d after the others filled, accepted %d", n, accepted)
	}
}

// logLines collects a Server's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// count returns the lines that contain substr.
func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// text returns the log, a line each.
func (l *logLines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *logLines) find(substr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			return true
		}
	}
	return false
}

// clock is a Server's time, moved by the test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// metric returns the value of a counter or gauge on /metrics.
func metric(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics has no %s", name)
	}
	return string(m[1])
}

// The Server's sweeps: deliveries older than MaxAge dropped, counted in
// /metrics and logged; a channel idle for ChannelIdle removed with its
// queue, counted and logged, and deliveries to it refused (404); a channel
// whose agent connects is kept.
func testServerSweeps(t *testing.T, open Open) {
	s := open(t, Config{Quota: relay.Quota{MaxAge: 7 * 24 * time.Hour}})
	clk := &clock{now: time.Now()}
	var log logLines
	srv, err := relay.NewServer(relay.Config{Store: s, Router: relay.NewHub(), Logf: log.logf, Now: clk.Now, ChannelIdle: 30 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	old, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if code, _, msg := post(t, hs.URL+"/c/"+old.Channel+"/hook", []byte(`{"n":1}`)); code != http.StatusAccepted {
			t.Fatalf("%d %q", code, msg)
		}
	}
	srv.Sweep()
	if got := metric(t, hs.URL, "devhook_relay_queue_expired_total"); got != "0" {
		t.Fatalf("expired before their time: %s", got)
	}
	clk.add(8 * 24 * time.Hour)
	srv.Sweep()
	if got := metric(t, hs.URL, "devhook_relay_queue_expired_total"); got != "2" {
		t.Fatalf("devhook_relay_queue_expired_total = %s, want 2", got)
	}
	if !log.find("channel " + old.Channel + ": 2 queued deliveries") {
		t.Fatalf("no log line of the expired deliveries: %q", log.lines)
	}
	if n, _ := s.QueueLen(old.Channel); n != 0 {
		t.Fatalf("queue holds %d after expiry", n)
	}
	// A channel whose agent connected now is kept; the other, idle for
	// 30 days, goes.
	kept, err := srv.OpenChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, msg := post(t, hs.URL+"/c/"+old.Channel+"/hook", []byte(`{"n":2}`)); code != http.StatusAccepted {
		t.Fatalf("%d %q", code, msg)
	}
	clk.add(23 * 24 * time.Hour)
	conn, err := relayclient.Dial(t.Context(), relayclient.DialConfig{RelayURL: hs.URL, Credentials: kept})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	clk.add(8 * 24 * time.Hour) // old: 31 days; kept: opened 8 days ago
	srv.Sweep()
	if got := metric(t, hs.URL, "devhook_relay_channels_removed_total"); got != "1" {
		t.Fatalf("devhook_relay_channels_removed_total = %s, want 1", got)
	}
	if !log.find("channel " + old.Channel + " removed") {
		t.Fatalf("no log line of the removed channel: %q", log.lines)
	}
	if _, err := s.Channel(old.Channel); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("idle channel: %v, want ENOTFOUND", err)
	}
	if _, err := s.Channel(kept.Channel); err != nil {
		t.Fatalf("channel opened 8 days ago: %v", err)
	}
	if code, _, msg := post(t, hs.URL+"/c/"+old.Channel+"/hook", []byte(`{"n":3}`)); code != http.StatusNotFound {
		t.Fatalf("a delivery to the removed channel: %d %q, want 404", code, msg)
	}
}
