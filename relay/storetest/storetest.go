// Package storetest is the test suite every relay.Store runs: the same
// tests of quotas, expiry, idle channels, a full disk and a store whose
// every method fails in turn (faults.go) against the single relay's bbolt
// store (boltrelay) and the cluster's NATS store (natsrelay). A store's test calls Run with a function that opens a new,
// empty store.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// Store is what the suite tests: a relay.Store with its sweeps and queue
// counts.
type Store interface {
	relay.Store
	relay.Sweeper
	relay.QueueCounter
}

// Config is what the suite asks of a new store.
type Config struct {
	Quota relay.Quota
	// WriteError goes to the store's config field of the same name:
	// called at each write, its error fails the write as a full disk
	// would.
	WriteError func() error
}

// Open returns a new, empty store configured by cfg, closed when t ends.
type Open func(t *testing.T, cfg Config) Store

// Run runs the suite against the stores open makes.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(*testing.T, Open)
	}{
		{"ChannelBytes", testChannelBytes},
		{"ChannelDeliveries", testChannelDeliveries},
		{"ConcurrentSenders", testConcurrentSenders},
		{"TotalBytes", testTotalBytes},
		{"DequeueMany", testDequeueMany},
		{"DequeueFails", testDequeueFails},
		{"Expire", testExpire},
		{"IdleChannels", testIdleChannels},
		{"DiskFull", testDiskFull},
		{"ServerAnswers", testServerAnswers},
		{"ServerSweeps", testServerSweeps},
		{"ConnectedChannelsKept", testConnectedChannelsKept},
		{"ConnectedChannelsKeptRealTime", testConnectedChannelsKeptRealTime},
		{"Faults", testFaults},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

// delivery returns a new delivery of channel with a body of size bytes
// that says which delivery it is.
func delivery(t *testing.T, channel string, size int) *devhook.Delivery {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte{'.'}, size)
	copy(body, id.String())
	return &devhook.Delivery{
		ID: id.String(), Channel: channel, ReceivedAt: time.Now().UTC(), Method: "POST", Path: "/hook",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: body, Queued: true,
	}
}

func putChannel(t *testing.T, s Store, id string, created time.Time) {
	t.Helper()
	if err := s.PutChannel(relay.Channel{ID: id, TokenHash: []byte("hash"), CreatedAt: created}); err != nil {
		t.Fatal(err)
	}
}

// fill enqueues deliveries of size bytes to channel until the store
// refuses one, and returns those it took and the refusal.
func fill(t *testing.T, s Store, channel string, size, most int) ([]*devhook.Delivery, error) {
	t.Helper()
	var took []*devhook.Delivery
	for range most {
		d := delivery(t, channel, size)
		if err := s.Enqueue(channel, d); err != nil {
			return took, err
		}
		took = append(took, d)
	}
	t.Fatalf("channel %s took %d deliveries of %d bytes: no quota", channel, most, size)
	return nil, nil
}

// sameQueue fails t unless channel's queue holds want, in order, bodies
// byte-equal.
func sameQueue(t *testing.T, s Store, channel string, want []*devhook.Delivery) {
	t.Helper()
	got, err := s.Queued(channel, "", 0)
	if err != nil {
		t.Fatalf("read queue of %s: %v", channel, err)
	}
	if len(got) != len(want) {
		t.Fatalf("queue of %s holds %d deliveries, want %d", channel, len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || !bytes.Equal(got[i].Body, want[i].Body) {
			t.Fatalf("queue of %s: delivery %d is %s (%d bytes), want %s (%d bytes)", channel, i, got[i].ID, len(got[i].Body), want[i].ID, len(want[i].Body))
		}
	}
	if n, err := s.QueueLen(channel); err != nil || n != len(want) {
		t.Fatalf("QueueLen(%s) = %d, %v; want %d", channel, n, err, len(want))
	}
}

// A channel's bytes: beyond, ErrChannelFull; what is queued stays as it
// was, other channels go on, and a dequeued delivery makes room.
func testChannelBytes(t *testing.T, open Open) {
	s := open(t, Config{Quota: relay.Quota{ChannelBytes: 64 << 10, TotalBytes: 1 << 20}})
	putChannel(t, s, "full", time.Now())
	putChannel(t, s, "other", time.Now())
	took, err := fill(t, s, "full", 4<<10, 100)
	if !errors.Is(err, relay.ErrChannelFull) {
		t.Fatalf("refused with %v, want ErrChannelFull", err)
	}
	// 16 bodies of 4 KiB are 64 KiB: with their heads, 15 fit at most.
	if len(took) < 12 || len(took) > 15 {
		t.Fatalf("the channel took %d deliveries of 4 KiB within 64 KiB", len(took))
	}
	sameQueue(t, s, "full", took)
	if err := s.Enqueue("other", delivery(t, "other", 4<<10)); err != nil {
		t.Fatalf("another channel: %v", err)
	}
	if err := s.Dequeue("full", took[0].ID); err != nil {
		t.Fatal(err)
	}
	d := delivery(t, "full", 4<<10)
	if err := s.Enqueue("full", d); err != nil {
		t.Fatalf("after a dequeue: %v", err)
	}
	if err := s.Enqueue("full", delivery(t, "full", 4<<10)); !errors.Is(err, relay.ErrChannelFull) {
		t.Fatalf("full again: %v, want ErrChannelFull", err)
	}
	sameQueue(t, s, "full", append(took[1:], d))
}

// A channel's deliveries: beyond, ErrChannelFull; the same id again is
// kept once and counted once.
func testChannelDeliveries(t *testing.T, open Open) {
	s := open(t, Config{Quota: relay.Quota{ChannelDeliveries: 5}})
	putChannel(t, s, "c", time.Now())
	took, err := fill(t, s, "c", 10, 100)
	if !errors.Is(err, relay.ErrChannelFull) || len(took) != 5 {
		t.Fatalf("took %d, refused with %v; want 5 then ErrChannelFull", len(took), err)
	}
	if err := s.Enqueue("c", took[4]); err != nil {
		t.Fatalf("the same id again on a full queue: %v, want it kept once", err)
	}
	if err := s.Dequeue("c", took[4].ID); err != nil {
		t.Fatal(err)
	}
	d5 := delivery(t, "c", 10)
	if err := s.Enqueue("c", d5); err != nil {
		t.Fatalf("after a dequeue: %v", err)
	}
	if err := s.Enqueue("c", d5); err != nil {
		t.Fatalf("the same id again: %v, want it kept once", err)
	}
	if err := s.Dequeue("c", took[0].ID); err != nil {
		t.Fatal(err)
	}
	// Four queued: one more fits, if the repeated id was counted once.
	d6 := delivery(t, "c", 10)
	if err := s.Enqueue("c", d6); err != nil {
		t.Fatalf("with 4 queued: %v", err)
	}
	if err := s.Enqueue("c", delivery(t, "c", 10)); !errors.Is(err, relay.ErrChannelFull) {
		t.Fatalf("with 5 queued: %v, want ErrChannelFull", err)
	}
	sameQueue(t, s, "c", append(took[1:4:4], d5, d6))
}

// Senders at once on one channel never take it past its quota together,
// and each is refused with ErrChannelFull, not another error.
func testConcurrentSenders(t *testing.T, open Open) {
	s := open(t, Config{Quota: relay.Quota{ChannelDeliveries: 40}})
	putChannel(t, s, "c", time.Now())
	var wg sync.WaitGroup
	var took atomic.Int64
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := s.Enqueue("c", delivery(t, "c", 100))
				if err != nil {
					errs <- err
					return
				}
				took.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, relay.ErrChannelFull) {
			t.Errorf("a sender refused with %v, want ErrChannelFull", err)
		}
	}
	if n, err := s.QueueLen("c"); err != nil || n != 40 || took.Load() != 40 {
		t.Fatalf("16 senders at once: %d taken, %d queued (%v); want 40, the quota", took.Load(), n, err)
	}
}

// The bytes of all channels: beyond, ErrQueueFull for every channel; what
// is queued stays; room made anywhere is room for all.
func testTotalBytes(t *testing.T, open Open) {
	const total = 128 << 10
	s := open(t, Config{Quota: relay.Quota{ChannelBytes: 48 << 10, TotalBytes: total}})
	queued := map[string][]*devhook.Delivery{}
	var err error
	var sum int
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatalf("10 channels of 48 KiB filled within a quota of 128 KiB")
		}
		ch := fmt.Sprintf("ch%d", i)
		putChannel(t, s, ch, time.Now())
		queued[ch], err = fill(t, s, ch, 8<<10, 100)
		sum += 8 << 10 * len(queued[ch])
		if errors.Is(err, relay.ErrQueueFull) {
			break
		}
		if !errors.Is(err, relay.ErrChannelFull) {
			t.Fatalf("channel %s refused with %v", ch, err)
		}
	}
	if sum > total || sum < total/2 {
		t.Fatalf("the queues took %d bytes of bodies within a quota of %d", sum, total)
	}
	putChannel(t, s, "late", time.Now())
	if err := s.Enqueue("late", delivery(t, "late", 8<<10)); !errors.Is(err, relay.ErrQueueFull) {
		t.Fatalf("a new channel: %v, want ErrQueueFull", err)
	}
	for ch, ds := range queued {
		sameQueue(t, s, ch, ds)
	}
	for _, d := range queued["ch0"][:2] {
		if err := s.Dequeue("ch0", d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Enqueue("late", delivery(t, "late", 8<<10)); err != nil {
		t.Fatalf("after dequeues elsewhere: %v", err)
	}
}

// tick waits for the clock to pass t by 2 ms: what was stored before t is
// then older than what is stored after, at any store's precision.
func tick(t time.Time) {
	for !time.Now().After(t.Add(2 * time.Millisecond)) {
		// Waiting for the clock itself, not for another goroutine.
	}
}

// Expire drops the deliveries older than MaxAge, says what it dropped by
// channel, keeps the younger ones and gives their room back.
func testExpire(t *testing.T, open Open) {
	s := open(t, Config{Quota: relay.Quota{ChannelDeliveries: 5, MaxAge: time.Hour}})
	putChannel(t, s, "a", time.Now())
	putChannel(t, s, "b", time.Now())
	var sizeA, sizeB int
	for range 3 {
		d := delivery(t, "a", 100)
		sizeA += len(d.Body)
		if err := s.Enqueue("a", d); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		d := delivery(t, "b", 200)
		sizeB += len(d.Body)
		if err := s.Enqueue("b", d); err != nil {
			t.Fatal(err)
		}
	}
	mid := time.Now()
	tick(mid)
	young := []*devhook.Delivery{delivery(t, "a", 100), delivery(t, "a", 100)}
	for _, d := range young {
		if err := s.Enqueue("a", d); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Expire(mid.Add(time.Hour - time.Second)); err != nil || len(got) != 0 {
		t.Fatalf("before their age: expired %v, %v", got, err)
	}
	got, err := s.Expire(mid.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	byCh := map[string]relay.Expired{}
	for _, e := range got {
		byCh[e.Channel] = e
	}
	if len(got) != 2 || byCh["a"].Deliveries != 3 || byCh["b"].Deliveries != 2 {
		t.Fatalf("expired %+v, want 3 of a and 2 of b", got)
	}
	if byCh["a"].Bytes < int64(sizeA) || byCh["b"].Bytes < int64(sizeB) {
		t.Fatalf("expired %+v: fewer bytes than the bodies (%d, %d)", got, sizeA, sizeB)
	}
	sameQueue(t, s, "a", young)
	sameQueue(t, s, "b", nil)
	// Their room is back: 2 queued, 3 more fit.
	more, err := fill(t, s, "a", 100, 10)
	if len(more) != 3 || !errors.Is(err, relay.ErrChannelFull) {
		t.Fatalf("after expiry the channel took %d more, then %v; want 3 then ErrChannelFull", len(more), err)
	}
	if got, err := s.Expire(mid.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("again: expired %v, %v", got, err)
	}
}

// Channels no agent opened since the cutoff go with their queues; one
// opened (TouchChannel) or created since stays, and so does one an agent
// holds now (inUse), however long ago it was opened.
func testIdleChannels(t *testing.T, open Open) {
	s := open(t, Config{Quota: relay.Quota{ChannelDeliveries: 2}})
	now := time.Now().UTC()
	day := 24 * time.Hour
	putChannel(t, s, "idle", now.Add(-40*day))
	putChannel(t, s, "opened", now.Add(-40*day))
	putChannel(t, s, "fresh", now.Add(-time.Hour))
	putChannel(t, s, "held", now.Add(-40*day))
	var asked []string
	inUse := func(ch string) bool { asked = append(asked, ch); return ch == "held" }
	if err := s.TouchChannel("opened", now.Add(-day)); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchChannel("missing", now); err != nil {
		t.Fatalf("touch a channel that does not exist: %v", err)
	}
	for range 2 {
		if err := s.Enqueue("idle", delivery(t, "idle", 100)); err != nil {
			t.Fatal(err)
		}
	}
	kept := delivery(t, "opened", 100)
	if err := s.Enqueue("opened", kept); err != nil {
		t.Fatal(err)
	}
	// Queued as its channel was removed elsewhere: a queue without a
	// channel goes too.
	if err := s.Enqueue("ghost", delivery(t, "ghost", 100)); err != nil {
		t.Fatal(err)
	}
	removed, err := s.RemoveIdleChannels(now.Add(-30*day), inUse)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(asked)
	if !slices.Equal(asked, []string{"held", "idle"}) {
		t.Fatalf("inUse asked of %q, want the idle channels held and idle", asked)
	}
	if _, err := s.Channel("held"); err != nil {
		t.Fatalf("an idle channel an agent holds: %v, want it kept", err)
	}
	slices.SortFunc(removed, func(a, b relay.RemovedChannel) int { return strings.Compare(b.ID, a.ID) })
	if len(removed) != 2 || removed[0].ID != "idle" || removed[0].Deliveries != 2 || removed[0].Bytes < 200 {
		t.Fatalf("removed %+v, want channel idle with its 2 deliveries, and ghost's queue", removed)
	}
	if removed[1].ID != "ghost" || removed[1].Deliveries != 1 || !removed[1].LastOpened.IsZero() {
		t.Fatalf("removed %+v, want ghost's queue of 1 delivery, with no LastOpened", removed[1])
	}
	sameQueue(t, s, "ghost", nil)
	if !removed[0].LastOpened.Equal(now.Add(-40 * day)) {
		t.Fatalf("removed channel last opened %s, want its creation %s", removed[0].LastOpened, now.Add(-40*day))
	}
	if _, err := s.Channel("idle"); devhook.ErrorCode(err) != devhook.ENOTFOUND {
		t.Fatalf("removed channel: %v, want ENOTFOUND", err)
	}
	sameQueue(t, s, "idle", nil)
	sameQueue(t, s, "opened", []*devhook.Delivery{kept})
	ch, err := s.Channel("opened")
	if err != nil || !ch.LastOpened.Equal(now.Add(-day)) {
		t.Fatalf("opened channel: %+v %v, want last opened %s", ch, err, now.Add(-day))
	}
	if _, err := s.Channel("fresh"); err != nil {
		t.Fatal(err)
	}
	// The removed queue's room is back.
	putChannel(t, s, "idle", now)
	for range 2 {
		if err := s.Enqueue("idle", delivery(t, "idle", 100)); err != nil {
			t.Fatalf("the channel opened again: %v", err)
		}
	}
	if removed, err := s.RemoveIdleChannels(now.Add(-30*day), inUse); err != nil || len(removed) != 0 {
		t.Fatalf("again: removed %+v, %v", removed, err)
	}
	// Once no agent holds it, it goes.
	removed, err = s.RemoveIdleChannels(now.Add(-30*day), nil)
	if err != nil || len(removed) != 1 || removed[0].ID != "held" {
		t.Fatalf("no agent any more: removed %+v, %v; want channel held", removed, err)
	}
}

// A full disk: Enqueue fails with ErrStorageFull and changes nothing;
// once there is room, the next one succeeds, and the failed one took no
// room of the quota.
func testDiskFull(t *testing.T, open Open) {
	var full atomic.Bool
	s := open(t, Config{
		Quota:      relay.Quota{ChannelDeliveries: 3},
		WriteError: func() error { return diskFull(&full) },
	})
	putChannel(t, s, "c", time.Now())
	var queued []*devhook.Delivery
	for range 2 {
		d := delivery(t, "c", 1000)
		if err := s.Enqueue("c", d); err != nil {
			t.Fatal(err)
		}
		queued = append(queued, d)
	}
	full.Store(true)
	for range 3 {
		err := s.Enqueue("c", delivery(t, "c", 1000))
		if !errors.Is(err, relay.ErrStorageFull) {
			t.Fatalf("on a full disk: %v, want ErrStorageFull", err)
		}
	}
	sameQueue(t, s, "c", queued)
	full.Store(false)
	d := delivery(t, "c", 1000)
	if err := s.Enqueue("c", d); err != nil {
		t.Fatalf("with room again: %v", err)
	}
	sameQueue(t, s, "c", append(queued, d))
}

func diskFull(full *atomic.Bool) error {
	if full.Load() {
		return fmt.Errorf("write relay.db: %w", syscall.ENOSPC)
	}
	return nil
}

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
