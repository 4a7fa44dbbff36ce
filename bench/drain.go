package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
)

// The drain phase: a backlog queued at the relay while its agent is away,
// then drained to a receiver when the agent comes back. -drain deliveries
// over -drain-runs runs, each run's deliveries sent one after the other
// (as the service sends a run's statuses) and answered 202; then listen
// starts again on the same data directory (the same channel) and the
// receiver counts them in, checking each run's order. With -drain-live,
// live deliveries keep coming while the backlog drains (drainlive.go):
// how long until the relay's queue is empty, and what the live senders
// got meanwhile.

// drainSenders bounds the runs queued at once.
const drainSenders = 32

// drainResult is the drain phase's figures.
type drainResult struct {
	Deliveries int     `json:"deliveries"`
	Runs       int     `json:"runs"`
	Queued     int     `json:"queued"` // answered 202
	Delivered  int     `json:"delivered"`
	Duplicates int     `json:"duplicates"`
	OutOfOrder int     `json:"out_of_order"` // arrivals of a run before an earlier one of it
	QueueSecs  float64 `json:"queue_secs"`
	// DrainSecs is from the agent's start to the last delivery at the
	// receiver; RPS is deliveries per second over it.
	DrainSecs float64 `json:"drain_secs"`
	RPS       float64 `json:"deliveries_per_sec"`
	// FirstSecs is from the agent's start to the first delivery at the
	// receiver: the agent's start and connection, before the drain.
	FirstSecs float64 `json:"first_secs"`
	// RelayCPU and AgentCPU are each one's CPU time from the agent's
	// start to the end of the drain, in µs per delivery drained (live
	// ones answered meanwhile included): what load on the machine moves
	// less than deliveries/s.
	RelayCPU   float64 `json:"relay_cpu_us"`
	AgentCPU   float64 `json:"agent_cpu_us"`
	FirstError string  `json:"first_error,omitempty"`
	// With live load (-drain-live): its rate, the seconds from the
	// agent's start until the relay's queue read empty (0: it did not
	// within -duration), and the live answers before and after. RPS is
	// then the deliveries that went through the queue (the backlog, and
	// the live ones queued before it emptied) over EmptySecs.
	LiveRate   float64  `json:"live_rate,omitempty"`
	EmptySecs  float64  `json:"empty_secs,omitempty"`
	LiveDuring *liveMix `json:"live_during,omitempty"`
	LiveAfter  *liveMix `json:"live_after,omitempty"`
}

// orderReceiver is the reference receiver, remembering each run's last
// sequence number.
type orderReceiver struct {
	URL  string
	srv  *http.Server
	done chan struct{}

	mu      sync.Mutex
	last    map[string]int // run → the highest seq arrived
	seen    map[string]int // run/seq → arrivals
	late    int            // arrivals below their run's highest seq
	arrived chan struct{}  // a new delivery (not a duplicate) arrived
	n       int
	at      time.Time // of the last new arrival
	first   time.Time // of the first arrival
}

func startOrderReceiver(secret string) (*orderReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start the drain receiver: %w", err)
	}
	r := &orderReceiver{URL: "http://" + ln.Addr().String(), done: make(chan struct{}),
		last: make(map[string]int), seen: make(map[string]int), arrived: make(chan struct{}, 1)}
	r.srv = &http.Server{
		Handler: receiver.New(receiver.Config{Secret: secret, OnRequest: func(_ *http.Request, body []byte, _ devhook.Verdict) {
			r.add(body)
		}}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		defer close(r.done)
		r.srv.Serve(ln)
	}()
	return r, nil
}

func (r *orderReceiver) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

func (r *orderReceiver) add(body []byte) {
	var b struct {
		Data struct {
			RunID string `json:"run_id"`
		} `json:"data"`
		Seq int `json:"seq"`
	}
	if json.Unmarshal(body, &b) != nil || b.Data.RunID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := b.Data.RunID + "/" + strconv.Itoa(b.Seq)
	r.seen[key]++
	if r.seen[key] > 1 {
		return
	}
	if last, ok := r.last[b.Data.RunID]; ok && b.Seq < last {
		r.late++
	} else {
		r.last[b.Data.RunID] = b.Seq
	}
	r.n++
	r.at = time.Now()
	if r.first.IsZero() {
		r.first = r.at
	}
	select {
	case r.arrived <- struct{}{}:
	default:
	}
}

// counts returns the distinct deliveries arrived, the duplicates, those out
// of their run's order, and when the last new one arrived.
func (r *orderReceiver) counts() (n, dupes, late int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.seen {
		dupes += c - 1
	}
	return r.n, dupes, r.late, r.at
}

// firstAfter returns the seconds from start to the first arrival; 0 when
// none arrived.
func (r *orderReceiver) firstAfter(start time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first.IsZero() {
		return 0
	}
	return r.first.Sub(start).Seconds()
}

// drainBody is delivery seq of run, a run.status body with the sequence
// number beside its data.
func drainBody(run string, seq int) []byte {
	status := [...]string{"queued", "running", "succeeded"}[min(seq, 2)]
	b, err := json.Marshal(devhook.NewRunStatus(run, "app-bench", status, time.Now()))
	if err != nil {
		panic(err) // a fixed struct always encodes
	}
	return append(b[:len(b)-1], `,"seq":`+strconv.Itoa(seq)+`}`...)
}

// postSigned posts body to url as the service sends a delivery, signed
// with secret, and returns the answer's status once its body is read.
func postSigned(ctx context.Context, client *http.Client, url, secret string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, time.Now(), body))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// drainPhase queues o.drain deliveries over o.drainRuns runs at a relay of
// its own while the agent is away, then starts the agent and measures how
// fast the backlog reaches the receiver, and whether in each run's order.
func drainPhase(ctx context.Context, o options, rep *report, kids *children, bin, dir string) error {
	recv, err := startOrderReceiver(o.secret)
	if err != nil {
		return err
	}
	defer recv.Close()
	rel, relayURL, err := startRelay(ctx, bin, filepath.Join(dir, "relay"))
	if err != nil {
		return err
	}
	kids.add(rel)
	defer rel.kill()
	agentDir := filepath.Join(dir, "agent")
	// A first listen opens the channel and saves it, then goes away.
	ag, ready, err := startListen(ctx, bin, relayURL, recv.URL, o.secret, agentDir)
	if err != nil {
		return err
	}
	kids.add(ag)
	ag.kill()

	runs := max(1, min(o.drainRuns, o.drain))
	res := &drainResult{Deliveries: o.drain, Runs: runs}
	rep.Drain = res
	o.logf("drain: queuing %d deliveries over %d runs", o.drain, runs)
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { res.FirstError = err.Error() }) }
	client := newSenderClient(drainSenders)
	defer client.CloseIdleConnections()
	var queued atomic.Int64
	start := time.Now()
	parallelN(ctx, runs, drainSenders, func(run int) {
		// Run k takes deliveries k, k+runs, k+2·runs… of the backlog.
		for seq, i := 0, run; i < o.drain && ctx.Err() == nil; seq, i = seq+1, i+runs {
			body := drainBody(fmt.Sprintf("drain-%05d", run), seq)
			code, err := postSigned(ctx, client, ready.PublicURL+"/hook", o.secret, body)
			if err != nil {
				fail(err)
				return
			}
			if code != http.StatusAccepted {
				fail(fmt.Errorf("queuing: the relay answered %d %s, not 202", code, http.StatusText(code)))
				return
			}
			queued.Add(1)
		}
	})
	res.Queued = int(queued.Load())
	res.QueueSecs = time.Since(start).Seconds()
	if res.Queued == 0 {
		return errors.New("drain: nothing could be queued: " + res.FirstError)
	}

	// The relay's pid, for a look from outside (strace -c -f -p PID).
	o.logf("drain: starting the agent on a backlog of %d at the relay (pid %d)", res.Queued, rel.cmd.Process.Pid)
	start = time.Now()
	ag, _, err = startListen(ctx, bin, relayURL, recv.URL, o.secret, agentDir)
	if err != nil {
		return err
	}
	kids.add(ag)
	defer ag.kill()
	o.logf("drain: the agent started (pid %d)", ag.cmd.Process.Pid)
	cpu := cpuMeter{relay: rel.pid(), agent: ag.pid(), relay0: cpuTime(rel.pid())}
	if o.drainLive > 0 {
		return drainWithLive(ctx, o, res, recv, relayURL, ready.PublicURL, start, cpu, fail)
	}
	limit := time.NewTimer(o.duration)
	defer limit.Stop()
	for {
		n, _, _, _ := recv.counts()
		if n >= res.Queued {
			break
		}
		select {
		case <-recv.arrived:
		case <-limit.C:
			fail(fmt.Errorf("drain: %d of %d delivered within %s", n, res.Queued, o.duration))
			n = res.Queued // stop
		case <-ctx.Done():
			return ctx.Err()
		}
		if n >= res.Queued {
			break
		}
	}
	res.RelayCPU, res.AgentCPU = cpu.per(res.Queued)
	n, dupes, late, last := recv.counts()
	res.Delivered, res.Duplicates, res.OutOfOrder = n, dupes, late
	res.FirstSecs = recv.firstAfter(start)
	if !last.IsZero() {
		res.DrainSecs = last.Sub(start).Seconds()
		res.RPS = float64(n) / res.DrainSecs
	}
	return nil
}

// drainWithLive drains the backlog under live load from start, the
// agent's start, until the relay's queue is empty and liveTail more; then
// waits for every delivery the relay took (the backlog, live ones
// answered 200 or 202) to reach the receiver.
func drainWithLive(ctx context.Context, o options, res *drainResult, recv *orderReceiver, relayURL, publicURL string, start time.Time, cpu cpuMeter, fail func(error)) error {
	res.LiveRate = o.drainLive
	client := newSenderClient(liveOutstanding)
	defer client.CloseIdleConnections()
	l := &liveLoad{rate: o.drainLive, url: publicURL + "/hook", secret: o.secret, client: client}
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	done := make(chan struct{})
	go func() { defer close(done); l.run(liveCtx) }()
	o.logf("drain: live load at %s deliveries/s while it drains", fixed0(o.drainLive))
	poll := &http.Client{Timeout: 10 * time.Second}
	limitCtx, cancel := context.WithTimeout(ctx, o.duration)
	at, err := waitEmpty(limitCtx, poll, relayURL)
	cancel()
	var relayCPU, agentCPU time.Duration
	if err == nil {
		l.empty(at)
		res.EmptySecs = at.Sub(start).Seconds()
		relayCPU, agentCPU = cpu.times()
		select {
		case <-time.After(liveTail):
		case <-ctx.Done():
		}
	} else if ctx.Err() == nil {
		n, _ := queueDepth(ctx, poll, relayURL)
		fail(fmt.Errorf("drain: the queue was not empty within %s of the agent's start (%d left): %w", o.duration, n, err))
	}
	stopLive()
	<-done
	during, after := l.mixes()
	res.LiveDuring, res.LiveAfter = &during, &after
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if res.EmptySecs > 0 {
		res.RPS = float64(res.Queued+during.Queued) / res.EmptySecs
		n := float64(res.Queued + during.Queued + during.OK)
		res.RelayCPU, res.AgentCPU = float64(relayCPU.Microseconds())/n, float64(agentCPU.Microseconds())/n
	}
	for _, m := range []liveMix{during, after} {
		if m.firstErr != "" {
			fail(fmt.Errorf("drain: a live delivery: %s", m.firstErr))
		}
	}
	// Every delivery the relay took reaches the receiver.
	want := res.Queued + during.OK + during.Queued + after.OK + after.Queued
	limit := time.NewTimer(o.duration)
	defer limit.Stop()
	for n, _, _, _ := recv.counts(); n < want; n, _, _, _ = recv.counts() {
		select {
		case <-recv.arrived:
		case <-limit.C:
			fail(fmt.Errorf("drain: %d of the %d deliveries the relay took reached the receiver within %s", n, want, o.duration))
			want = 0
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	n, dupes, late, last := recv.counts()
	res.Delivered, res.Duplicates, res.OutOfOrder = n, dupes, late
	res.FirstSecs = recv.firstAfter(start)
	res.DrainSecs = last.Sub(start).Seconds()
	return nil
}

// cpuMeter reads the relay's and the agent's CPU time from the agent's
// start (the agent's from its own start: all of it).
type cpuMeter struct {
	relay, agent int // pids
	relay0       time.Duration
}

func (m cpuMeter) times() (relay, agent time.Duration) {
	return cpuTime(m.relay) - m.relay0, cpuTime(m.agent)
}

// per returns the relay's and the agent's CPU time so far in µs per
// delivery, over n.
func (m cpuMeter) per(n int) (relay, agent float64) {
	if n <= 0 {
		return 0, 0
	}
	r, a := m.times()
	return float64(r.Microseconds()) / float64(n), float64(a.Microseconds()) / float64(n)
}

// parallelN calls f(0..n-1) from at most conc goroutines, stopping early
// when ctx ends.
func parallelN(ctx context.Context, n, conc int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}

func (r *report) writeDrain(w io.Writer, md bool) {
	d := r.Drain
	if d == nil {
		return
	}
	if d.LiveRate > 0 {
		d.writeLive(w, md)
		return
	}
	if md {
		fmt.Fprintf(w, "\n| queued backlog drained | runs | delivered | deliveries/s | relay CPU µs/delivery | agent CPU µs/delivery | out of a run's order | duplicates |\n|---|---|---|---|---|---|---|---|\n| %d | %d | %d | %s | %s | %s | %d | %d |\n",
			d.Queued, d.Runs, d.Delivered, fixed0(d.RPS), fixed0(d.RelayCPU), fixed0(d.AgentCPU), d.OutOfOrder, d.Duplicates)
		return
	}
	fmt.Fprintf(w, "\ndrain: a backlog of %d queued deliveries over %d runs (queued in %.1fs) reached the receiver in %.2fs from the agent's start (the first after %.2fs): %s deliveries/s, CPU µs per delivery: relay %s, agent %s; %d delivered, %d out of their run's order, %d duplicates\n",
		d.Queued, d.Runs, d.QueueSecs, d.DrainSecs, d.FirstSecs, fixed0(d.RPS), fixed0(d.RelayCPU), fixed0(d.AgentCPU), d.Delivered, d.OutOfOrder, d.Duplicates)
	if d.FirstError != "" {
		fmt.Fprintf(w, "drain: first failure: %s\n", d.FirstError)
	}
}

// writeLive writes the figures of a drain under live load.
func (d *drainResult) writeLive(w io.Writer, md bool) {
	empty := "not empty"
	if d.EmptySecs > 0 {
		empty = fmt.Sprintf("%.2fs", d.EmptySecs)
	}
	mix := func(m *liveMix) string {
		return fmt.Sprintf("%d sent: %d 200, %d 202, %d 429, %d other, %d skipped; p50 %.2f ms, p99 %.2f ms",
			m.Sent, m.OK, m.Queued, m.Refused, m.Other, m.Skipped, m.P50ms, m.P99ms)
	}
	if md {
		fmt.Fprintf(w, "\n| queued backlog | runs | live/s | queue empty after | drained/s | relay CPU µs/delivery | agent CPU µs/delivery | live while draining: 200 / 202 / 429 / other | live after: 200 / 202 / 429 / other | delivered | out of a run's order | duplicates |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %s | %s | %d / %d / %d / %d | %d / %d / %d / %d | %d | %d | %d |\n",
			d.Queued, d.Runs, fixed0(d.LiveRate), empty, fixed0(d.RPS), fixed0(d.RelayCPU), fixed0(d.AgentCPU),
			d.LiveDuring.OK, d.LiveDuring.Queued, d.LiveDuring.Refused, d.LiveDuring.Other,
			d.LiveAfter.OK, d.LiveAfter.Queued, d.LiveAfter.Refused, d.LiveAfter.Other,
			d.Delivered, d.OutOfOrder, d.Duplicates)
		return
	}
	fmt.Fprintf(w, "\ndrain: a backlog of %d queued deliveries over %d runs (queued in %.1fs), drained under live load of %s deliveries/s: the relay's queue was empty %s after the agent's start (the first delivery after %.2fs), %s deliveries/s through the queue, CPU µs per delivery: relay %s, agent %s; %d delivered, %d out of their run's order, %d duplicates\n",
		d.Queued, d.Runs, d.QueueSecs, fixed0(d.LiveRate), empty, d.FirstSecs, fixed0(d.RPS), fixed0(d.RelayCPU), fixed0(d.AgentCPU), d.Delivered, d.OutOfOrder, d.Duplicates)
	fmt.Fprintf(w, "drain: live while it drained: %s\n", mix(d.LiveDuring))
	fmt.Fprintf(w, "drain: live once the queue was empty (%s): %s\n", liveTail, mix(d.LiveAfter))
	if d.FirstError != "" {
		fmt.Fprintf(w, "drain: first failure: %s\n", d.FirstError)
	}
}
