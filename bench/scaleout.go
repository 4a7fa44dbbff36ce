package main

// The cluster phases (-relays): at each instance count N, a fresh cluster
// of N relay instances on a NATS server, each a process of its own, and
// -agents `devhook listen` processes, agent j's home being instance
// j mod N and every instance's URL given to it (listen --relay a,b,c).
// Senders spread round-robin over the instances and the channels (see
// fanout.go) post -n deliveries at each concurrency: the aggregate
// deliveries per second, and the CPU time per delivery of the relays and
// of NATS, each measured apart. Then, at the largest N (2 or more), the
// failover phase on that cluster (failover.go), and the storm on a fresh
// one (storm.go).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// clusterAgent is one `devhook listen` of a cluster phase.
type clusterAgent struct {
	proc *child
	home int    // the instance it connected to first
	path string // its channel's path on any instance: /c/<channel>/hook
}

// clusterPhases runs the cluster phases of o.relays.
func clusterPhases(ctx context.Context, o options, rep *report, recv *receiverServer, bin, natsBin, tmp string, kids *children) error {
	rep.Cluster = fmt.Sprintf("%d agents (devhook listen processes) over N relay instances (devhook relay serve --nats processes) on a NATS server with JetStream (a process of its own); senders round-robin over the instances", o.agents)
	for _, c := range o.conc {
		rep.Phases = append(rep.Phases, loadPhase(ctx, o, recv, "direct", c, "", nil, nil, 0))
	}
	largest := slices.Max(o.relays)
	if largest < 2 && (o.failover > 0 || o.storm > 0) {
		o.logf("failover and storm need 2 relay instances or more in -relays: skipped")
	}
	failedOver := false
	for _, n := range o.relays {
		if err := ctx.Err(); err != nil {
			return err
		}
		failover := n == largest && n >= 2 && o.failover > 0 && !failedOver
		failedOver = failedOver || failover
		if err := scaleOut(ctx, o, rep, recv, bin, natsBin, filepath.Join(tmp, fmt.Sprintf("cluster%d-%d", n, len(rep.Scale))), n, failover, kids); err != nil {
			return err
		}
	}
	if largest >= 2 && o.storm > 0 {
		return stormPhase(ctx, o, rep, recv, bin, natsBin, filepath.Join(tmp, "storm"), largest, kids)
	}
	return nil
}

// scaleOut runs the load at each concurrency through a fresh cluster of n
// instances and o.agents agents, then the failover phase on it when asked.
func scaleOut(ctx context.Context, o options, rep *report, recv *receiverServer, bin, natsBin, dir string, n int, failover bool, kids *children) error {
	o.logf("cluster: %d relay instances, %d agents", n, o.agents)
	cl, err := startCluster(ctx, bin, natsBin, dir, n, kids, o.relayArgs()...)
	if err != nil {
		return err
	}
	defer cl.stop()
	agents, err := startAgents(ctx, o, cl, recv, dir, kids)
	defer func() {
		for _, a := range agents {
			a.proc.kill()
		}
	}()
	if err != nil {
		return err
	}
	paths := make([]string, len(agents))
	for j, a := range agents {
		paths[j] = a.path
	}
	// Warm up every pair of channel and instance.
	warm := newFanout(cl.urls, paths)
	driveWith(ctx, warm.plan(), o.secret, fmt.Sprintf("w%d", len(rep.Scale)), 4, min(o.n, max(500, 4*n*len(agents))), o.duration)
	for _, c := range o.conc {
		if err := ctx.Err(); err != nil {
			return err
		}
		rep.Scale = append(rep.Scale, scalePhase(ctx, o, recv, cl, agents, paths, c, fmt.Sprintf("k%d", len(rep.Scale)+1)))
	}
	if failover {
		res, err := failoverPhase(ctx, o, recv, cl, agents, paths)
		rep.Failover = res
		return err
	}
	return nil
}

// relayArgs are the cluster phases' relay arguments after --nats.
func (o options) relayArgs() []string {
	if o.relayTimeout > 0 {
		return []string{"--timeout", o.relayTimeout.String()}
	}
	return nil
}

// startAgents starts o.agents `devhook listen` processes on cl, agent j
// on instance j mod N with every instance's URL, its home first.
func startAgents(ctx context.Context, o options, cl *cluster, recv *receiverServer, dir string, kids *children) ([]*clusterAgent, error) {
	var agents []*clusterAgent
	for j := range o.agents {
		home := j % len(cl.urls)
		relays := cl.order(home)
		p, ready, err := startListen(ctx, cl.bin, strings.Join(relays, ","), recv.URL, o.secret, filepath.Join(dir, fmt.Sprintf("agent%d", j)))
		if err != nil {
			return agents, fmt.Errorf("agent %d: %w", j, err)
		}
		kids.add(p)
		agents = append(agents, &clusterAgent{proc: p, home: home})
		path, ok := strings.CutPrefix(ready.PublicURL, relays[0])
		if !ok || !strings.HasPrefix(path, "/c/") {
			return agents, fmt.Errorf("agent %d: public URL %s is not on its relay %s", j, ready.PublicURL, relays[0])
		}
		agents[j].path = path + "/hook"
	}
	return agents, nil
}

// scalePhase drives o.n deliveries at concurrency c through cl, spread
// over its instances and agents' channels, and measures the CPU time of
// each process.
func scalePhase(ctx context.Context, o options, recv *receiverServer, cl *cluster, agents []*clusterAgent, paths []string, c int, phase string) scaleResult {
	n := len(cl.urls)
	o.logf("cluster of %d, %d agents, concurrency %d: %d requests", n, len(agents), c, o.n)
	relays := cl.relayPIDs()
	var agentPIDs []int
	for _, a := range agents {
		agentPIDs = append(agentPIDs, a.proc.pid())
	}
	self := os.Getpid()
	watched := append(slices.Clone(relays), cl.nats.pid())
	w := watchPeaks(watched, 20*time.Millisecond)
	all := slices.Concat(relays, []int{cl.nats.pid()}, agentPIDs, []int{self})
	cpu0 := cpuTimes(all)
	lr := driveWith(ctx, newFanout(cl.urls, paths).plan(), o.secret, phase, c, o.n, o.duration)
	used := cpuTimes(all)
	for i := range used {
		used[i] -= cpu0[i]
	}
	peaks := w.finish()
	lost := recv.count.await(ctx, phase, lr.Answered, 30*time.Second)
	recv.count.settle(ctx, 200*time.Millisecond, 5*time.Second)
	delivered, dupes, _ := recv.count.tally(phase)
	r := scaleResult{Relays: n, Agents: len(agents), Concurrency: c, Sent: lr.Sent, OK: lr.OK, Queued: lr.Queued, Failed: lr.Failed,
		FirstError: lr.FirstErr, Delivered: delivered, Duplicates: dupes, Lost: lost,
		RPS: lr.rps(), P50: ms(lr.quantile(0.50)), P99: ms(lr.quantile(0.99)), Max: ms(lr.quantile(1)), Seconds: lr.Elapsed.Seconds()}
	r.PerInstance = r.RPS / float64(n)
	perDelivery := func(d time.Duration) float64 {
		if lr.Sent == 0 {
			return 0
		}
		return float64(d/time.Microsecond) / float64(lr.Sent)
	}
	r.CPURelays = perDelivery(sum(used[:n]))
	r.CPUNATS = perDelivery(used[n])
	r.CPUCluster = r.CPURelays + r.CPUNATS
	r.CPUAgents = perDelivery(sum(used[n+1 : len(used)-1]))
	r.CPUHarness = perDelivery(used[len(used)-1])
	if lr.Elapsed > 0 {
		r.Cores = float64(sum(used)) / float64(lr.Elapsed)
	}
	for _, p := range peaks[:n] {
		r.RSSRelay = max(r.RSSRelay, mib(p.RSS))
	}
	r.RSSNATS = mib(peaks[n].RSS)
	return r
}

// cpuTimes is the CPU time each of pids has used so far.
func cpuTimes(pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, p := range pids {
		out[i] = cpuTime(p)
	}
	return out
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}
