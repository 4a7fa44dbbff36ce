package main

// The storm phase: -storm agents, all connected to one instance of a
// cluster of N, are dropped at once: that instance is crashed (SIGKILL)
// and started again on its address. Each agent, given every instance's
// URL in the same order (as a team would copy one `listen --relay a,b,c`),
// reconnects as agent.Agent does (agent/conn.go): at once to the next URL,
// and with jittered backoff once every one failed. The agents are the real
// agent.Agent, in this process, each with its store in memory (5,000
// bbolt files would measure the disk): the harness says how long until
// every one is back, where they went, and the memory (RSS) of the
// instances that took them. Then one delivery to every channel, spread
// over the instances, checks that every agent answers.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// stormLimit bounds the whole storm phase.
const stormLimit = 5 * time.Minute

// stormPhase runs the storm on a fresh cluster of n instances under dir.
func stormPhase(ctx context.Context, o options, rep *report, recv *receiverServer, bin, natsBin, dir string, n int, kids *children) error {
	ctx, cancel := context.WithTimeout(ctx, stormLimit)
	defer cancel()
	res := &stormResult{Relays: n, Agents: o.storm}
	rep.Storm = res
	cl, err := startCluster(ctx, bin, natsBin, dir, n, kids, o.relayArgs()...)
	if err != nil {
		return err
	}
	defer cl.stop()
	const home = 0
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { res.FirstError = err.Error() }) }

	o.logf("storm: opening %d channels", o.storm)
	creds := make([]wire.Credentials, o.storm)
	client := newSenderClient(idleWorkers)
	parallel(ctx, o.storm, func(i int) {
		cr, err := relayclient.Open(ctx, client, cl.urls[home], "")
		if err != nil {
			fail(err)
			return
		}
		creds[i] = cr
	})
	client.CloseIdleConnections()
	for _, cr := range creds {
		if cr.Channel == "" {
			return fmt.Errorf("storm: channels: %s", res.FirstError)
		}
	}

	// The agents, each on its own channel, all on instance home first.
	o.logf("storm: connecting %d agents to instance %d", o.storm, home)
	order := cl.order(home)
	w := &stormWatch{agents: make([]stormAgent, o.storm)}
	agentCtx, stopAgents := context.WithCancel(context.Background())
	var running sync.WaitGroup
	defer func() {
		stopAgents()
		running.Wait()
	}()
	start := time.Now()
	for i, cr := range creds {
		a, err := agent.New(agent.Config{RelayURL: order[0], RelayFallbacks: order[1:], Credentials: cr,
			Forward: []string{recv.URL + "/hook"}, Store: newMemStore(), Secret: o.secret,
			OnConnect: func(c agent.Connection) { w.connected(i, c) }})
		if err != nil {
			return err
		}
		running.Go(func() {
			if err := a.Run(agentCtx); err != nil {
				fail(err)
			}
		})
	}
	if !w.wait(ctx, &w.first, o.storm) {
		return fmt.Errorf("storm: %d of %d agents connected (%v)", w.first.Load(), o.storm, firstNonEmpty(res.FirstError, ctx.Err()))
	}
	res.Connected = int(w.first.Load())
	res.ConnectSecs = time.Since(start).Seconds()

	// Settled: the instances' memory holding them.
	sleep(ctx, 2*time.Second)
	// The instances, NATS, and this process (the agents' side).
	pids := append(cl.relayPIDs(), cl.nats.pid(), os.Getpid())
	for k := range n {
		res.Instances = append(res.Instances, stormInstance{Instance: k, RSSBefore: mib(memStatus(pids[k]).RSS)})
	}
	res.NATSRSSBefore = mib(memStatus(cl.nats.pid()).RSS)
	survivors := slices.Concat(pids[:home], pids[home+1:n])
	peaks := watchPeaks(survivors, 20*time.Millisecond)
	cpu0 := cpuTimes(pids)

	o.logf("storm: crashing instance %d, which holds the %d agents, and starting it again", home, res.Connected)
	crashAt := time.Now()
	w.crashAt.Store(crashAt.UnixNano())
	cl.crash(home)
	restarted := make(chan error, 1)
	go func() {
		err := cl.restart(ctx, home)
		res.RestartMS = ms(time.Since(crashAt))
		restarted <- err
	}()
	allBack := w.wait(ctx, &w.back, res.Connected)
	res.Back = int(w.back.Load())
	used := cpuTimes(pids)
	for k, p := range peaks.finish() {
		at := k
		if k >= home {
			at++
		}
		res.Instances[at].RSSPeak = mib(p.RSS)
	}
	if err := <-restarted; err != nil {
		return err
	}
	if !allBack {
		return fmt.Errorf("storm: %d of %d agents back within %s", res.Back, res.Connected, stormLimit)
	}
	var backMS []float64
	where := map[string]int{}
	for i := range w.agents {
		backMS = append(backMS, ms(time.Duration(w.agents[i].back.Load()-crashAt.UnixNano())))
		if via := w.agents[i].via.Load(); via != nil {
			where[*via]++
		}
	}
	slices.Sort(backMS)
	res.BackP50MS, res.BackP99MS, res.BackMaxMS = quantileOf(backMS, 0.5), quantileOf(backMS, 0.99), quantileOf(backMS, 1)
	for k := range res.Instances {
		in := &res.Instances[k]
		in.Agents = where[cl.urls[k]]
		if k != home {
			in.CPUSecs = (used[k] - cpu0[k]).Seconds()
		}
	}
	res.NATSCPUSecs = (used[n] - cpu0[n]).Seconds()
	res.HarnessCPUSecs = (used[n+1] - cpu0[n+1]).Seconds()

	// Settled again: the memory of the instances that took them.
	sleep(ctx, 2*time.Second)
	for k := range res.Instances {
		res.Instances[k].RSSAfter = mib(memStatus(cl.relays[k].pid()).RSS)
	}
	res.NATSRSSAfter = mib(memStatus(cl.nats.pid()).RSS)

	// One delivery to every channel, through every instance in turn.
	paths := make([]string, len(creds))
	for i, cr := range creds {
		paths[i] = "/c/" + cr.Channel + "/hook"
	}
	const phase = "p"
	c := slices.Max(append([]int{1}, o.conc...))
	o.logf("storm: one delivery to each of the %d channels, concurrency %d", len(paths), c)
	lr := driveWith(ctx, newFanout(cl.urls, paths).plan(), o.secret, phase, c, len(paths), o.duration)
	res.Probed, res.ProbeAnswered, res.ProbeQueued, res.ProbeFailed = lr.Sent, lr.OK-lr.Queued, lr.Queued, lr.Failed
	res.ProbeLost = recv.count.await(ctx, phase, lr.Answered, 30*time.Second)
	if lr.FirstErr != "" {
		fail(fmt.Errorf("probe: %s", lr.FirstErr))
	}
	return nil
}

// stormWatch follows the storm's agents' connections.
type stormWatch struct {
	agents  []stormAgent
	crashAt atomic.Int64 // unix nanoseconds; 0 before the crash
	first   atomic.Int64 // agents connected once
	back    atomic.Int64 // agents connected again after the crash
}

type stormAgent struct {
	up   atomic.Bool
	back atomic.Int64           // unix nanoseconds of its first connection after the crash
	via  atomic.Pointer[string] // the instance it is back on
}

// connected is agent i's OnConnect.
func (w *stormWatch) connected(i int, c agent.Connection) {
	a := &w.agents[i]
	if a.up.CompareAndSwap(false, true) {
		w.first.Add(1)
		return
	}
	if w.crashAt.Load() == 0 || !a.back.CompareAndSwap(0, time.Now().UnixNano()) {
		return
	}
	base, _, _ := strings.Cut(c.PublicURL, "/c/")
	a.via.Store(&base)
	w.back.Add(1)
}

// wait waits until count reaches n, or ctx ends; it reports which.
func (w *stormWatch) wait(ctx context.Context, count *atomic.Int64, n int) bool {
	for count.Load() < int64(n) {
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// quantileOf is the q quantile of sorted, as loadResult.quantile.
func quantileOf(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func firstNonEmpty(s string, err error) any {
	if s != "" {
		return s
	}
	return err
}

// memStore is an agent.Store in memory, for the storm's agents.
type memStore struct {
	mu         sync.Mutex
	deliveries map[string]*devhook.Delivery
	retries    map[string]devhook.RetryState
}

var _ agent.Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{deliveries: map[string]*devhook.Delivery{}, retries: map[string]devhook.RetryState{}}
}

func (s *memStore) PutDelivery(d *devhook.Delivery) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.deliveries[d.ID]; ok {
		return false, nil
	}
	c := *d
	c.Attempts = nil
	s.deliveries[d.ID] = &c
	return true, nil
}

func (s *memStore) AddAttempt(id string, a devhook.Attempt) (devhook.Attempt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deliveries[id]
	if !ok {
		return devhook.Attempt{}, devhook.Errorf(devhook.ENOTFOUND, "no delivery %s", id)
	}
	a.Seq = len(d.Attempts) + 1
	d.Attempts = append(d.Attempts, a)
	return a, nil
}

func (s *memStore) Delivery(id string) (*devhook.Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deliveries[id]
	if !ok {
		return nil, devhook.Errorf(devhook.ENOTFOUND, "no delivery %s", id)
	}
	c := *d
	c.Attempts = slices.Clone(d.Attempts)
	return &c, nil
}

func (s *memStore) PutRetry(id string, st devhook.RetryState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retries[id] = st
	return nil
}

func (s *memStore) DeleteRetry(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.retries, id)
	return nil
}

func (s *memStore) Retries(ids []string) (map[string]devhook.RetryState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]devhook.RetryState{}
	for _, id := range ids {
		if st, ok := s.retries[id]; ok {
			out[id] = st
		}
	}
	return out, nil
}

func (s *memStore) AllRetries() ([]string, []devhook.RetryState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	var sts []devhook.RetryState
	for id, st := range s.retries {
		ids, sts = append(ids, id), append(sts, st)
	}
	return ids, sts, nil
}
