package main

// The failover phase: with senders posting through every instance of a
// cluster, the instance holding agents 0, N, 2N… (a third of them with 3
// instances) is crashed (SIGKILL: the kernel closes its connections, as
// when its process dies; a machine that vanishes without closing them is
// noticed later, by the pings). Its agents, given every instance's URL,
// connect to the next one at once; the harness times that from each
// agent's {"event":"reconnected"} line. Every delivery answered 2xx or 202
// must reach the receiver, after the agents are back and the queue has
// drained: those that do not are lost, counted against the distinct ids
// the receiver saw.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// failoverRequests bounds the requests of the failover phase, which runs
// for -failover.
const failoverRequests = 1_000_000

// failoverLimits: how long the crashed instance's agents may take to be
// back, and the queue to drain once the load has stopped.
const (
	reconnectLimit = time.Minute
	drainLimit     = 2 * time.Minute
)

// failoverPhase crashes instance 0 of cl a third of the way into o.failover
// of load at the largest concurrency of o.conc.
func failoverPhase(ctx context.Context, o options, recv *receiverServer, cl *cluster, agents []*clusterAgent, paths []string) (*failoverResult, error) {
	const crashed = 0
	c := slices.Max(o.conc)
	res := &failoverResult{Relays: len(cl.urls), Agents: len(agents), Crashed: crashed, Concurrency: c, LoadSecs: o.failover.Seconds()}

	// The crashed instance's agents, and when each says it is back.
	var mu sync.Mutex
	var crashAt time.Time
	back := make(map[int]time.Time)
	moved := 0
	for j, a := range agents {
		if a.home != crashed {
			continue
		}
		moved++
		a.proc.setWatch(func(line string, at time.Time) {
			if !strings.Contains(line, `"event":"reconnected"`) {
				return
			}
			var ev struct {
				DownMS int64 `json:"down_ms"`
				Queued int   `json:"queued"`
			}
			jsonUnmarshal(line, &ev)
			mu.Lock()
			defer mu.Unlock()
			if _, seen := back[j]; seen || crashAt.IsZero() {
				return
			}
			back[j] = at
			res.DownMaxMS = max(res.DownMaxMS, float64(ev.DownMS))
			res.QueuedOnReconnect += ev.Queued
		})
		defer a.proc.setWatch(nil)
	}
	res.Moved = moved

	o.logf("failover: %s of load at concurrency %d through %d instances, instance %d (%d of %d agents) crashed after %s",
		o.failover, c, len(cl.urls), crashed, moved, len(agents), o.failover/3)
	const phase = "f"
	p := newFanout(cl.urls, paths).plan()
	// A delivery under way through the crashed instance is queued when
	// its agent attaches elsewhere, or, if it never does, after its
	// relay's answer timeout (30 s, then 5 s more across NATS): let it
	// wait that long, and see it.
	p.timeout, p.grace = 2*time.Minute, 2*time.Minute
	done := make(chan loadResult, 1)
	start := time.Now()
	go func() { done <- driveWith(ctx, p, o.secret, phase, c, failoverRequests, o.failover) }()

	select {
	case <-ctx.Done():
		<-done
		return res, ctx.Err()
	case <-time.After(o.failover / 3):
	}
	mu.Lock()
	crashAt = time.Now()
	mu.Unlock()
	cl.crash(crashed)
	res.CrashAtSecs = crashAt.Sub(start).Seconds()

	// Every one of its agents back on another instance.
	deadline := time.Now().Add(reconnectLimit)
	for {
		mu.Lock()
		n := len(back)
		mu.Unlock()
		if n == moved || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	for _, at := range back {
		d := ms(at.Sub(crashAt))
		res.ReconnectMS = append(res.ReconnectMS, d)
		res.ReconnectMaxMS = max(res.ReconnectMaxMS, d)
	}
	res.Reconnected = len(back)
	mu.Unlock()
	slices.Sort(res.ReconnectMS)

	lr := <-done
	// The queue drains to the agents that are back: wait for every
	// delivery the senders were answered 2xx or 202 for.
	o.logf("failover: load over (%d sent); waiting for the %d answered deliveries to reach the receiver", lr.Sent, lr.OK)
	drained := time.Now()
	res.Lost = recv.count.await(ctx, phase, lr.Answered, drainLimit)
	res.DrainSecs = time.Since(drained).Seconds()
	recv.count.settle(ctx, 500*time.Millisecond, 10*time.Second)
	res.Delivered, res.Duplicates, _ = recv.count.tally(phase)
	res.Sent, res.OK, res.Queued, res.Failed, res.Refused, res.FirstError = lr.Sent, lr.OK, lr.Queued, lr.Failed, lr.Refused, lr.FirstErr
	res.P50, res.P99, res.Max = ms(lr.quantile(0.50)), ms(lr.quantile(0.99)), ms(lr.quantile(1))
	for _, d := range lr.Latencies {
		if d > time.Second {
			res.Slow++
		}
	}
	if res.Reconnected < moved {
		return res, fmt.Errorf("failover: %d of the crashed instance's %d agents were not back within %s", moved-res.Reconnected, moved, reconnectLimit)
	}
	return res, nil
}
