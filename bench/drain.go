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
// receiver counts them in, checking each run's order.

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
	DrainSecs  float64 `json:"drain_secs"`
	RPS        float64 `json:"deliveries_per_sec"`
	FirstError string  `json:"first_error,omitempty"`
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
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, ready.PublicURL+"/hook", bytes.NewReader(body))
			if err != nil {
				fail(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(devhook.SignatureHeader, signature.Sign(o.secret, time.Now(), body))
			resp, err := client.Do(req)
			if err != nil {
				fail(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				fail(fmt.Errorf("queuing: the relay answered %s, not 202", resp.Status))
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

	o.logf("drain: starting the agent on a backlog of %d", res.Queued)
	start = time.Now()
	ag, _, err = startListen(ctx, bin, relayURL, recv.URL, o.secret, agentDir)
	if err != nil {
		return err
	}
	kids.add(ag)
	defer ag.kill()
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
	n, dupes, late, last := recv.counts()
	res.Delivered, res.Duplicates, res.OutOfOrder = n, dupes, late
	if !last.IsZero() {
		res.DrainSecs = last.Sub(start).Seconds()
		res.RPS = float64(n) / res.DrainSecs
	}
	return nil
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
	if md {
		fmt.Fprintf(w, "\n| queued backlog drained | runs | delivered | deliveries/s | out of a run's order | duplicates |\n|---|---|---|---|---|---|\n| %d | %d | %d | %s | %d | %d |\n",
			d.Queued, d.Runs, d.Delivered, fixed0(d.RPS), d.OutOfOrder, d.Duplicates)
		return
	}
	fmt.Fprintf(w, "\ndrain: a backlog of %d queued deliveries over %d runs (queued in %.1fs) reached the receiver in %.2fs from the agent's start: %s deliveries/s; %d delivered, %d out of their run's order, %d duplicates\n",
		d.Queued, d.Runs, d.QueueSecs, d.DrainSecs, fixed0(d.RPS), d.Delivered, d.OutOfOrder, d.Duplicates)
	if d.FirstError != "" {
		fmt.Fprintf(w, "drain: first failure: %s\n", d.FirstError)
	}
}
