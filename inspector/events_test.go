package inspector_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
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
