package inspector_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/inspector"
)

// sseClient reads events from /api/events.
type sseClient struct {
	res *http.Response
	r   *bufio.Reader
}

func openEvents(t *testing.T, base string) *sseClient {
	t.Helper()
	res, err := http.Get(base + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	c := &sseClient{res: res, r: bufio.NewReader(res.Body)}
	if ev, _ := c.next(t); ev != "ready" {
		t.Fatalf("first event %q, want ready", ev)
	}
	return c
}

// next returns the next event's name and data, skipping comments.
func (c *sseClient) next(t *testing.T) (event, data string) {
	t.Helper()
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the event stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && event != "":
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
}

func TestEventStream(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	c1 := openEvents(t, f.HTTP.URL)
	c2 := openEvents(t, f.HTTP.URL)
	if n := f.Server.Subscribers(); n != 2 {
		t.Fatalf("subscribers = %d, want 2", n)
	}
	d := newDelivery(time.Now(), 1, runStatusBody(t, "run-e", "queued", time.Now()), true)
	s := put(t, f.DB, d, 0)
	f.Server.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: s})
	for _, c := range []*sseClient{c1, c2} {
		ev, data := c.next(t)
		var got devhook.Change
		if err := json.Unmarshal([]byte(data), &got); err != nil || ev != "delivery" || got.Kind != devhook.ChangeDelivery || got.Summary.ID != d.ID || got.Summary.Event.RunID != "run-e" {
			t.Errorf("event %q %s (%v)", ev, data, err)
		}
	}
	a := devhook.Attempt{Seq: 1, Kind: devhook.AttemptForward, Status: 204}
	f.Server.Publish(devhook.Change{Kind: devhook.ChangeAttempt, Summary: s, Attempt: &a})
	if ev, data := c1.next(t); ev != "attempt" || !strings.Contains(data, `"status":204`) {
		t.Errorf("event %q %s", ev, data)
	}

	// A page that goes away leaves no stream behind.
	c1.res.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Server.WaitSubscribers(ctx, 1); err != nil {
		t.Fatalf("after a client left: %v", err)
	}
}

func TestSlowSubscriberDoesNotBlockPublish(t *testing.T) {
	f := newFixture(t, fixtureOptions{config: func(c *inspector.Config) { c.StreamBuffer = 4 }})
	// A client that connects and never reads.
	conn, err := net.Dial("tcp", f.HTTP.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Server.WaitSubscribers(ctx, 1); err != nil {
		t.Fatalf("the stream did not open: %v", err)
	}
	big := devhook.Summary{ID: "x", Path: "/" + strings.Repeat("p", 64<<10)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 { // 128 MiB: far more than any socket buffer
			f.Server.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: big})
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	if err := f.Server.WaitSubscribers(ctx, 0); err != nil {
		t.Fatalf("the slow subscriber was not disconnected: %v", err)
	}
}

func TestCloseEndsStreams(t *testing.T) {
	db := MustOpenDB(t)
	s, err := inspector.New(inspector.Config{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	c := openEvents(t, base)

	s.Close()
	if _, err := c.r.ReadString(0); err == nil || !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
		t.Errorf("the stream did not end on Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after Close: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	res, err := http.Get(base + "/api/events")
	if err == nil {
		res.Body.Close()
		t.Errorf("events after Shutdown: %d", res.StatusCode)
	}
}

// A page that stops reading its live stream (a real client whose socket
// buffers fill) is disconnected once a write has waited StreamWriteTimeout:
// the stream's goroutine ends and its connection closes, instead of both
// waiting for ever on a write.
func TestStreamThatStopsReadingIsCut(t *testing.T) {
	db := MustOpenDB(t)
	var logs sync.Map
	s, err := inspector.New(inspector.Config{Store: db, StreamBuffer: 1 << 16,
		// The client never reads again: a short bound bets on nothing.
		StreamWriteTimeout: 200 * time.Millisecond,
		Logf:               func(format string, args ...any) { logs.Store(fmt.Sprintf(format, args...), true) }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	var once sync.Once
	hs := &http.Server{Handler: s, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			once.Do(func() { close(closed) })
		}
	}}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The smallest receive buffer, so that the server's writes block soon.
	if err := conn.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitSubscribers(ctx, 1); err != nil {
		t.Fatalf("the stream did not open: %v", err)
	}
	// Far more than the socket buffers hold, far less than the stream's
	// own buffer: the hub keeps the subscriber, so only the write deadline
	// can end the stream.
	big := devhook.Summary{ID: "x", Path: "/" + strings.Repeat("p", 64<<10)}
	for range 512 { // 32 MiB
		s.Publish(devhook.Change{Kind: devhook.ChangeDelivery, Summary: big})
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the stream of a client that stopped reading still holds its connection")
	}
	if err := s.WaitSubscribers(ctx, 0); err != nil {
		t.Fatalf("the stream of a client that stopped reading is still live: %v", err)
	}
	found := false
	logs.Range(func(k, _ any) bool {
		found = found || strings.Contains(k.(string), "stopped reading the live stream")
		return true
	})
	if !found {
		t.Error("the cut is not logged")
	}
}
