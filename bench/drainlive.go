package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Live load during the drain (-drain-live RATE): while the backlog drains,
// senders keep posting run.status deliveries at RATE a second, each of a
// run of its own ("live-N", nothing of it queued), paced by the clock and
// not by the answers (a slow answer does not slow the load; at most
// liveOutstanding wait at once, the rest are counted as skipped). The
// relay's queue depth (/metrics) is polled: the queue is empty once it
// reads 0. The load goes on for liveTail after that, to see the answers
// once the backlog is gone. Each answer is counted by its status: 200
// (the receiver's own answer, through the agent), 202 (queued, behind
// the backlog), 429 (refused for now: the channel's queue is full) or
// other; those sent before the queue emptied apart from those after.

// liveOutstanding bounds the live requests waiting for their answer.
const liveOutstanding = 256

// liveTail is how long the live load goes on once the queue is empty.
const liveTail = 2 * time.Second

// depthPoll is how often the relay's queue depth is read.
const depthPoll = 100 * time.Millisecond

// liveMix is what the live senders got over a part of the phase.
type liveMix struct {
	Sent     int     `json:"sent"`
	OK       int     `json:"status_200"`
	Queued   int     `json:"status_202"`
	Refused  int     `json:"status_429"`
	Other    int     `json:"other"` // other statuses, and errors without an answer
	Skipped  int     `json:"skipped"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	lat      []time.Duration
	firstErr string
}

func (m *liveMix) add(code int, err error, took time.Duration) {
	m.Sent++
	switch {
	case err != nil:
		m.Other++
		if m.firstErr == "" {
			m.firstErr = err.Error()
		}
		return
	case code == http.StatusOK:
		m.OK++
	case code == http.StatusAccepted:
		m.Queued++
	case code == http.StatusTooManyRequests:
		m.Refused++
	default:
		m.Other++
		if m.firstErr == "" {
			m.firstErr = "answered " + strconv.Itoa(code)
		}
	}
	m.lat = append(m.lat, took)
}

func (m *liveMix) finish() {
	slices.Sort(m.lat)
	q := func(f float64) float64 {
		if len(m.lat) == 0 {
			return 0
		}
		return float64(m.lat[int(f*float64(len(m.lat)-1))]) / float64(time.Millisecond)
	}
	m.P50ms, m.P99ms = q(0.50), q(0.99)
}

// liveLoad is the live senders of one drain phase.
type liveLoad struct {
	rate   float64
	url    string // the channel's public URL and path
	secret string
	client *http.Client

	mu      sync.Mutex
	emptyAt time.Time // zero until the queue read empty
	during  liveMix   // sent before emptyAt
	after   liveMix
	wg      sync.WaitGroup
}

// run sends at l.rate until ctx ends, then waits for the answers.
func (l *liveLoad) run(ctx context.Context) {
	slots := make(chan struct{}, liveOutstanding)
	start := time.Now()
	every := time.Duration(float64(time.Second) / l.rate)
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * every)
		if wait := time.Until(due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				l.wg.Wait()
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			l.wg.Wait()
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			l.mu.Lock()
			l.part(time.Now()).Skipped++
			l.mu.Unlock()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-slots }()
			sent := time.Now()
			code, err := l.post(i)
			l.mu.Lock()
			l.part(sent).add(code, err, time.Since(sent))
			l.mu.Unlock()
		}()
	}
}

// part is the mix a request sent at t counts in. Called under l.mu.
func (l *liveLoad) part(t time.Time) *liveMix {
	if !l.emptyAt.IsZero() && !t.Before(l.emptyAt) {
		return &l.after
	}
	return &l.during
}

func (l *liveLoad) post(i int) (int, error) {
	return postSigned(context.Background(), l.client, l.url, l.secret, drainBody(fmt.Sprintf("live-%06d", i), 0))
}

// empty records when the queue was first read empty.
func (l *liveLoad) empty(at time.Time) {
	l.mu.Lock()
	l.emptyAt = at
	l.mu.Unlock()
}

// mixes returns the answers before and after the queue emptied, once run
// has returned.
func (l *liveLoad) mixes() (during, after liveMix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.during.finish()
	l.after.finish()
	return l.during, l.after
}

// queueDepth reads devhook_relay_queue_depth from the relay's /metrics.
func queueDepth(ctx context.Context, client *http.Client, relayURL string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, relayURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("relay /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "devhook_relay_queue_depth "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("relay /metrics: %w", err)
	}
	return 0, errors.New("relay /metrics: no devhook_relay_queue_depth")
}

// waitEmpty polls the relay's queue depth until it reads 0, and returns
// when it did; false when ctx ended first.
func waitEmpty(ctx context.Context, client *http.Client, relayURL string) (time.Time, error) {
	t := time.NewTicker(depthPoll)
	defer t.Stop()
	for {
		n, err := queueDepth(ctx, client, relayURL)
		if err != nil {
			return time.Time{}, err
		}
		if n == 0 {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.C:
		}
	}
}
