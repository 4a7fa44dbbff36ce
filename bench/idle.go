package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// idleLimit bounds the whole idle phase.
const idleLimit = 3 * time.Minute

// idleWorkers is how many channels are opened, and agents dialed, at once.
const idleWorkers = 64

// idlePhase starts a fresh relay, connects o.idle agents to it (each on its
// own channel, with relayclient.Dial as the agent does) and measures the relay's
// memory while it holds them.
func idlePhase(ctx context.Context, o options, rep *report, kids *children, bin, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, idleLimit)
	defer cancel()
	rel, relayURL, err := startRelay(ctx, bin, dir)
	if err != nil {
		return err
	}
	kids.add(rel)
	defer rel.kill()
	res := &idleResult{Wanted: o.idle}
	rep.Idle = res
	base := memStatus(rel.pid()).RSS
	res.BaseRSS = mib(base)
	resetPeak(rel.pid())

	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { res.FirstError = err.Error() }) }

	// Open the channels.
	o.logf("idle: opening %d channels", o.idle)
	start := time.Now()
	creds := make([]wire.Credentials, o.idle)
	client := newSenderClient(idleWorkers)
	parallel(ctx, o.idle, func(i int) {
		cr, err := relayclient.Open(ctx, client, relayURL, "")
		if err != nil {
			fail(err)
			return
		}
		creds[i] = cr
	})
	client.CloseIdleConnections()
	res.OpenSecs = time.Since(start).Seconds()
	for _, cr := range creds {
		if cr.Channel != "" {
			res.Opened++
		}
	}

	// Connect an agent to each; each one reads (and so answers pings)
	// until it is closed.
	o.logf("idle: connecting %d agents", res.Opened)
	start = time.Now()
	conns := make([]*relayclient.Conn, o.idle)
	var readers sync.WaitGroup
	var connected atomic.Int64
	parallel(ctx, o.idle, func(i int) {
		if creds[i].Channel == "" {
			return
		}
		c, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: relayURL, Credentials: creds[i]})
		if err != nil {
			fail(err)
			return
		}
		conns[i] = c
		connected.Add(1)
		readers.Go(func() {
			for {
				if _, err := c.Receive(); err != nil {
					return
				}
			}
		})
	})
	res.ConnectSecs = time.Since(start).Seconds()
	res.Connected = int(connected.Load())
	defer func() {
		parallel(context.Background(), len(conns), func(i int) {
			if conns[i] != nil {
				conns[i].Close()
			}
		})
		readers.Wait()
	}()

	// Let the relay settle (its goroutines park, the GC runs), then read
	// its memory a few times and keep the largest.
	select {
	case <-ctx.Done():
		return fmt.Errorf("idle phase: %w", ctx.Err())
	case <-time.After(2 * time.Second):
	}
	var rss, hwm int64
	for range 5 {
		m := memStatus(rel.pid())
		rss, hwm = max(rss, m.RSS), max(hwm, m.HWM)
		time.Sleep(100 * time.Millisecond)
	}
	res.RSS, res.PeakRSS = mib(rss), mib(hwm)
	if res.Connected > 0 {
		res.PerConnKiB = float64(rss-base) / 1024 / float64(res.Connected)
	}
	return nil
}

// parallel calls f(0..n-1) from idleWorkers goroutines, stopping early when
// ctx ends.
func parallel(ctx context.Context, n int, f func(i int)) {
	parallelN(ctx, n, idleWorkers, f)
}
