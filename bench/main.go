// Command bench is devhook's load harness. It starts the reference
// receiver (in this process), a relay and an agent (as devhook processes,
// so that each one's memory is measured on its own) with verification,
// recording and the inspector on, and drives signed 1.5 KB run.status POSTs
// through the public URL at each concurrency. The same load goes straight
// to the receiver, so that every figure is also a ratio to what this
// machine can do without devhook.
//
// With --chisel, --frp and --localtunnel, the same load also goes through
// other tunnels ("peers"), each a server and a client process of its own
// on loopback, in phases between the direct and the tunnel ones: the
// tunnel's figures are then ratios to each peer's too ("× chisel"), and
// each peer's row has its server's figures in the relay's columns and its
// client's in the agent's. The receiver counts distinct ids, whichever way
// a request came.
//
//   - chisel (github.com/jpillora/chisel): --chisel is its binary. A
//     reverse TCP port forward over WebSocket, plain HTTP between client
//     and server: a bare tunnel with nothing stored, verified or inspected.
//   - frp (github.com/fatedier/frp): --frp is a directory holding its frps
//     and frpc binaries. An http proxy, the mode closest to devhook's: frps
//     serves it on its vhost HTTP port, and senders name its custom domain
//     in their Host header, so that no name needs to resolve. frpc talks to
//     frps in plain TCP, as chisel and devhook do here (frpc's default is
//     TLS); the rest is frp's default. The configuration is written at run
//     time (see frpConfigs).
//   - localtunnel: --localtunnel is a directory holding the client, the
//     localtunnel npm package, under node_modules/localtunnel, and the
//     server, github.com/localtunnel/server (not on npm under its name), in
//     server/ with its dependencies installed. That server pins esm 3.0,
//     which fails on Node 20; esm 3.2.25 works. Both run under the
//     machine's node, as their defaults have them (the client keeps at most
//     10 connections to the server); senders post to the server with the
//     tunnel's subdomain in their Host header. The server listens on
//     127.0.0.1, but opens the port its client connects to on every
//     interface: it takes no address for it.
//
// None of them is a dependency of devhook, nor in this repository: the
// harness takes only the paths to them. A report says which version of
// each it ran, and how.
//
// Then, in separate processes: the inspector's list API over a store of
// -list deliveries, a backlog of -drain deliveries over -drain-runs runs
// queued while the agent was away and drained when it returns, with live
// deliveries coming at -drain-live a second meanwhile (drain.go),
// and one relay holding -idle agent connections.
//
// With -relays, the cluster phases replace the tunnel phases: at each
// count N of -relays, N `devhook relay serve --nats` instances on a NATS server
// (bench/natsserver, a process of its own) and -agents `devhook listen`
// processes, agent j on instance j mod N and given every instance's URL;
// senders spread round-robin over the instances and channels (fanout.go),
// the CPU time per delivery of the relays and of NATS measured apart.
// Then, at the largest N, an instance crashed under load (failover.go)
// and -storm agents dropped at once (storm.go). See scaleout.go.
//
//	go run ./bench                      # the full run, figures for the README
//	go run ./bench -n 2000 -idle 1000   # a quick look
//	go run ./bench -inproc -cpuprofile cpu.out   # relay and agent in this process, profiled
//	go run ./bench --chisel /path/to/chisel      # also through chisel, for comparison
//	go run ./bench --chisel ~/peers/chisel --frp ~/peers/frp --localtunnel ~/peers/lt -idle 0 -list 0
//	go run ./bench -relays 1,2,3 -agents 6 -c 32 -idle 0 -list 0   # scale-out, failover, storm
//
// Every phase is bounded in count (-n) and in time (-duration); every
// child process is killed on the way out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	n            int           // requests per phase
	duration     time.Duration // cap per phase
	conc         []int         // concurrencies
	rounds       int           // times the load phases run, alternately; 0 is 1
	idle         int           // idle agent connections; 0 skips
	list         int           // deliveries stored for the inspector list phase; 0 skips
	drain        int           // deliveries queued for the drain phase; 0 skips
	drainRuns    int           // runs the drain phase's deliveries belong to
	drainLive    float64       // live deliveries a second while the backlog drains; 0 none
	secret       string
	bin          string        // devhook binary; empty builds one
	out          string        // markdown or JSON file
	inproc       bool          // relay and agent in this process
	cluster      bool          // tunnel phases through two relays on NATS
	relays       []int         // cluster phases: instance counts; empty skips
	agents       int           // cluster phases: listen processes
	failover     time.Duration // cluster phases: load while an instance is crashed; 0 skips
	storm        int           // cluster phases: agents dropped at once; 0 skips
	relayTimeout time.Duration // cluster phases: the relays' --timeout; 0: theirs
	chisel       string        // chisel binary: a chisel phase at each concurrency; empty skips
	frp          string        // directory of frps and frpc: an frp phase likewise
	localtunnel  string        // localtunnel install directory: a localtunnel phase likewise
	cpuprofile   string        // with inproc
	memprofile   string        // with inproc
	blockprof    string        // with inproc
	stdout       io.Writer
	logf         func(format string, args ...any)
}

func main() {
	o := options{stdout: os.Stdout}
	var conc, relays string
	flag.IntVar(&o.n, "n", 20000, "requests per phase")
	flag.DurationVar(&o.duration, "duration", 60*time.Second, "longest time a phase may take")
	flag.StringVar(&conc, "c", "1,32", "comma-separated concurrencies")
	flag.IntVar(&o.rounds, "rounds", 1, "run the load phases this many times, each round every concurrency's direct, peers' and tunnel phases in turn, and print the range of each figure over the rounds (this machine's noise is large: compare ranges, not one run)")
	flag.IntVar(&o.idle, "idle", 10000, "idle agent connections for one relay to hold (0 skips)")
	flag.IntVar(&o.list, "list", 100000, "stored deliveries for the inspector list phase (0 skips)")
	flag.IntVar(&o.drain, "drain", 5000, "deliveries queued at a relay while its agent is away, then drained to the receiver: deliveries/s, and whether each run's order held (0 skips)")
	flag.IntVar(&o.drainRuns, "drain-runs", 100, "runs the -drain deliveries belong to, each run's sent one after the other")
	flag.Float64Var(&o.drainLive, "drain-live", 0, "live run.status deliveries a second, each of a new run, sent while the -drain backlog drains (paced by the clock, at most 256 waiting for their answer): how long until the relay's queue is empty, and the live answers' mix (200 / 202 queued behind the backlog / 429 refused / other) before and after (0: no live load)")
	flag.StringVar(&o.secret, "secret", "whsec_bench_0123456789abcdef", "signing secret")
	flag.StringVar(&o.bin, "bin", "", "devhook binary to run (default: build ./cmd/devhook)")
	flag.StringVar(&o.out, "out", "", "also write the report to this file (.json: JSON, else markdown)")
	flag.BoolVar(&o.cluster, "cluster", false, "tunnel phases through a two-relay cluster on NATS (JetStream, in this process): the agent on one relay, senders posting to the other")
	flag.StringVar(&relays, "relays", "", "cluster phases instead of the tunnel phases: comma-separated counts of devhook relay serve --nats instances, such as 1,2,3; at each, -agents listen processes spread over the instances, and -n requests at each concurrency spread round-robin over the instances (NATS is a process of its own); then, at the largest count (2 or more), the -failover and -storm phases")
	flag.IntVar(&o.agents, "agents", 6, "with -relays: devhook listen processes, agent j on instance j mod N, given every instance's URL")
	flag.DurationVar(&o.failover, "failover", 20*time.Second, "with -relays: load this long (at most 1,000,000 requests, at the largest -c) while the instance holding agents 0, N, 2N… is crashed (SIGKILL) a third of the way in; 0 skips")
	flag.IntVar(&o.storm, "storm", 5000, "with -relays: agents (in this process) all on one instance, which is crashed and started again: how long until every one is back, and the other instances' memory; 0 skips")
	flag.DurationVar(&o.relayTimeout, "relay-timeout", 0, "with -relays: the relay instances' --timeout, how long a sender waits for the agent's answer (default the relay's, 30s); a delivery under way through a crashed instance waits that long, and 5s more, before it is queued")
	flag.StringVar(&o.chisel, "chisel", "", "chisel binary (github.com/jpillora/chisel): at each concurrency, also drive the load through a chisel reverse tunnel (server and client processes), to compare the tunnel with (go doc ./bench says how each peer is set up)")
	flag.StringVar(&o.frp, "frp", "", "directory holding frp's frps and frpc binaries (github.com/fatedier/frp): likewise through an frp http proxy (frps's vhost HTTP port, plain TCP between frpc and frps)")
	flag.StringVar(&o.localtunnel, "localtunnel", "", "localtunnel directory: likewise through localtunnel under the machine's node; it holds the client at "+ltClientJS+" (the localtunnel npm package) and localtunnel's server (github.com/localtunnel/server) at "+ltServerJS+" with its dependencies, esm 3.2.25 or later at "+ltESM+" (the 3.0 it pins fails on Node 20)")
	flag.BoolVar(&o.inproc, "inproc", false, "run relay and agent inside this process (for profiling; RSS is the whole process)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "with -inproc: write a CPU profile of the tunnel phases")
	flag.StringVar(&o.memprofile, "memprofile", "", "with -inproc: write an allocation profile at the end")
	flag.StringVar(&o.blockprof, "blockprofile", "", "with -inproc: write a profile of where goroutines wait (blocking and mutex contention)")
	flag.Parse()
	var err error
	if o.conc, err = parseConc(conc); err == nil {
		o.relays, err = parseRelays(relays)
	}
	if err == nil {
		err = o.check()
	}
	if err == nil && o.rounds < 1 {
		err = errors.New("-rounds must be at least 1")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	o.logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o)
	if rep != nil {
		rep.Command = "go run ./bench " + strings.Join(os.Args[1:], " ")
		rep.writeText(o.stdout)
		if o.out != "" {
			if werr := rep.save(o.out); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseConc(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		c, err := strconv.Atoi(f)
		if err != nil || c < 1 || c > 1024 {
			return nil, fmt.Errorf("-c %q: want concurrencies between 1 and 1024, such as 1,32", s)
		}
		out = append(out, c)
	}
	return out, nil
}

// parseRelays reads -relays: instance counts from 1 to 16.
func parseRelays(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 16 {
			return nil, fmt.Errorf("-relays %q: want instance counts between 1 and 16, such as 1,2,3", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// check refuses flags that do not go together.
func (o *options) check() error {
	if o.drainLive < 0 || o.drainLive > 100000 {
		return fmt.Errorf("-drain-live %g: want between 0 and 100000 deliveries a second", o.drainLive)
	}
	switch {
	case len(o.relays) == 0:
		return nil
	case o.cluster || o.inproc:
		return errors.New("-relays runs its own cluster phases, as processes: leave out -cluster and -inproc")
	case o.chisel != "" || o.frp != "" || o.localtunnel != "":
		return errors.New("-relays compares the cluster with itself at each size: leave out -chisel, -frp and -localtunnel")
	case len(o.conc) == 0 || o.n < 1:
		return errors.New("-relays needs requests (-n) and a concurrency (-c) for its phases")
	case o.agents < 1 || o.agents > 1000:
		return fmt.Errorf("-agents %d: want between 1 and 1000 listen processes", o.agents)
	case o.storm < 0 || o.storm > 100000:
		return fmt.Errorf("-storm %d: want between 0 and 100000 agents", o.storm)
	case o.failover < 0 || o.failover > 10*time.Minute:
		return fmt.Errorf("-failover %s: want between 0 and 10m", o.failover)
	case o.relayTimeout < 0 || o.relayTimeout > 10*time.Minute:
		return fmt.Errorf("-relay-timeout %s: want between 0 (the relay's default) and 10m", o.relayTimeout)
	}
	return nil
}

// run runs every phase and returns the report, partial when a phase fails.
func run(ctx context.Context, o options) (*report, error) {
	if o.logf == nil {
		o.logf = func(string, ...any) {}
	}
	rep := &report{Started: time.Now().UTC(), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, N: o.n, Duration: o.duration.String(), FileLimit: raiseFileLimit(), LoadBefore: loadAvg()}
	defer func() { rep.LoadAfter = loadAvg() }()
	tmp, err := os.MkdirTemp("", "devhook-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var kids children
	defer kids.killAll()

	recv, err := startReceiver(o.secret)
	if err != nil {
		return nil, err
	}
	defer recv.Close()

	// The load phases: direct and tunnel (and peers), or, with -relays,
	// the cluster phases instead.
	loads := len(o.conc) > 0 && o.n > 0 && len(o.relays) == 0

	// Peers are always processes of their own, in-process run or not.
	var peers []*peerTunnel
	if loads {
		if peers, err = startPeers(ctx, o, recv.URL, tmp, &kids); err != nil {
			return nil, err
		}
		for _, p := range peers {
			rep.Peers = append(rep.Peers, p.info)
		}
	}

	if o.inproc {
		return rep, runInProcess(ctx, o, rep, recv, peers, tmp)
	}

	bin := o.bin
	if bin == "" {
		bin = filepath.Join(tmp, "devhook")
		if err := build(ctx, o, bin, "github.com/devhook/devhook/cmd/devhook"); err != nil {
			return nil, err
		}
	}
	var natsBin string
	if o.cluster || len(o.relays) > 0 {
		natsBin = filepath.Join(tmp, "natsserver")
		if err := build(ctx, o, natsBin, "github.com/devhook/devhook/bench/natsserver"); err != nil {
			return nil, err
		}
	}

	if len(o.relays) > 0 {
		if err := clusterPhases(ctx, o, rep, recv, bin, natsBin, tmp, &kids); err != nil {
			return rep, err
		}
	}

	var relayURL string
	if loads || o.list > 0 {
		var rel, ingress *child
		var ingressURL string
		if o.cluster {
			cl, err := startCluster(ctx, bin, natsBin, filepath.Join(tmp, "cluster"), 2, &kids)
			if err != nil {
				return rep, err
			}
			defer cl.stop()
			// The agent on one relay, senders posting to the other:
			// every delivery crosses NATS (request/reply) to reach it.
			rel, ingress, relayURL, ingressURL = cl.relays[0], cl.relays[1], cl.urls[0], cl.urls[1]
			rep.Cluster = "two relays on NATS with JetStream (NATS a process of its own); the agent on one, senders post to the other: relay figures are the sender's relay"
		} else {
			rel, relayURL, err = startRelay(ctx, bin, filepath.Join(tmp, "relay"))
			if err != nil {
				return rep, err
			}
			kids.add(rel)
			ingress, ingressURL = rel, relayURL
		}
		if loads {
			ag, ready, err := startListen(ctx, bin, relayURL, recv.URL, o.secret, filepath.Join(tmp, "agent"))
			if err != nil {
				return rep, err
			}
			kids.add(ag)
			public := onOtherRelay(ready.PublicURL, relayURL, ingressURL)
			if err := loadPhases(ctx, o, rep, recv, public+"/hook", []*child{ingress, ag}, peers); err != nil {
				return rep, err
			}
			ag.kill()
			for _, p := range peers {
				p.kill()
			}
		}
		if o.list > 0 {
			if err := listPhase(ctx, o, rep, &kids, bin, relayURL, recv.URL, filepath.Join(tmp, "list")); err != nil {
				return rep, err
			}
		}
		rel.kill()
	}
	if o.drain > 0 && len(o.relays) == 0 {
		if err := drainPhase(ctx, o, rep, &kids, bin, filepath.Join(tmp, "drain")); err != nil {
			return rep, err
		}
	}
	if o.idle > 0 {
		if err := idlePhase(ctx, o, rep, &kids, bin, filepath.Join(tmp, "idle")); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// build builds the Go package pkg into out.
func build(ctx context.Context, o options, out, pkg string) error {
	o.logf("building %s", pkg)
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(bctx, "go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w: %s", pkg, err, b)
	}
	return nil
}

// loadPhases runs, at each concurrency, the direct phase, a phase through
// each of peers, and then the tunnel phase; o.rounds times over when it is
// above 1, a round being every concurrency in turn, so that the peers and
// devhook meet the machine's changing load alike. procs are the relay and
// the agent when they are processes of their own; nil measures this
// process.
func loadPhases(ctx context.Context, o options, rep *report, recv *receiverServer, public string, procs []*child, peers []*peerTunnel) error {
	// Warm up every path: connections, page cache, bbolt's first pages.
	warm := min(o.n, 500)
	drive(ctx, target{URL: recv.URL + "/hook"}, o.secret, "wd", 4, warm, o.duration)
	for _, p := range peers {
		drive(ctx, p.to, o.secret, "w"+p.name[:1], 4, warm, o.duration)
	}
	drive(ctx, target{URL: public}, o.secret, "wt", 4, warm, o.duration)
	type path struct {
		kind string
		peer *peerTunnel // nil for direct and tunnel
	}
	paths := []path{{kind: "direct"}}
	for _, p := range peers {
		paths = append(paths, path{p.name, p})
	}
	paths = append(paths, path{kind: "tunnel"})
	rounds := max(o.rounds, 1)
	if rounds > 1 {
		rep.Rounds = rounds
	}
	for round := 1; round <= rounds; round++ {
		for _, c := range o.conc {
			var direct *phaseResult
			var seen []phaseResult // the peers' phases at c in this round
			for _, pa := range paths {
				if err := ctx.Err(); err != nil {
					return err
				}
				r := 0 // one round: ids and rows as ever
				if rep.Rounds > 0 {
					r = round
				}
				ph := loadPhase(ctx, o, recv, pa.kind, c, public, procs, pa.peer, r)
				if direct != nil && direct.RPS > 0 {
					ph.Ratio = ph.RPS / direct.RPS
				}
				if pa.kind == "tunnel" {
					for _, p := range seen {
						ph.compareTo(p)
					}
				}
				rep.Phases = append(rep.Phases, ph)
				switch {
				case pa.kind == "direct":
					direct = &ph
				case pa.peer != nil:
					seen = append(seen, ph)
				}
			}
		}
	}
	return nil
}

// loadPhase drives o.n requests at concurrency c along one path: kind is
// direct, tunnel, or the name of peer, which is nil for the other two. A
// phase of a round (round > 0) says so in its requests' ids, so that each
// round's deliveries are told apart.
func loadPhase(ctx context.Context, o options, recv *receiverServer, kind string, c int, public string, procs []*child, peer *peerTunnel, round int) phaseResult {
	phase := fmt.Sprintf("%c%d", kind[0], c)
	if round > 0 {
		phase += fmt.Sprintf("r%d", round)
	}
	to := target{URL: recv.URL + "/hook"}
	var pids []int // the processes whose CPU and memory count
	switch {
	case peer != nil:
		to, pids = peer.to, pidsOf(peer.procs())
	case kind == "tunnel":
		to, pids = target{URL: public}, pidsOf(procs)
	}
	var w *peakWatch
	if pids != nil {
		w = watchPeaks(pids, 20*time.Millisecond)
	}
	o.logf("%s, concurrency %d: %d requests", kind, c, o.n)
	var lines0 int64
	countLines := kind == "tunnel" && len(procs) > 1
	if countLines {
		lines0, _ = procs[1].counts()
	}
	cpu0 := make([]time.Duration, len(pids))
	for i, p := range pids {
		cpu0[i] = cpuTime(p)
	}
	lr := drive(ctx, to, o.secret, phase, c, o.n, o.duration)
	perReq := func(i int) float64 {
		if i >= len(pids) || lr.Sent == 0 {
			return 0
		}
		return float64((cpuTime(pids[i])-cpu0[i])/time.Microsecond) / float64(lr.Sent)
	}
	var cpu []float64
	for i := range pids {
		cpu = append(cpu, perReq(i))
	}
	recv.count.settle(ctx, 200*time.Millisecond, 5*time.Second)
	delivered, dupes, bad := recv.count.tally(phase)
	ph := phaseResult{
		Phase: kind, Concurrency: c, Round: round, Sent: lr.Sent, OK: lr.OK, Failed: lr.Failed, FirstError: lr.FirstErr,
		Delivered: delivered, Duplicates: dupes, BadSignatures: bad,
		RPS: lr.rps(), P50: ms(lr.quantile(0.50)), P99: ms(lr.quantile(0.99)), Max: ms(lr.quantile(1)),
		Seconds: lr.Elapsed.Seconds(),
	}
	if w == nil {
		return ph
	}
	peaks := w.finish()
	ph.RSSRelay, ph.AnonRelay = mib(peaks[0].RSS), mib(peaks[0].Anon)
	if len(peaks) > 1 {
		ph.RSSAgent, ph.AnonAgent = mib(peaks[1].RSS), mib(peaks[1].Anon)
	}
	ph.CPURelay = cpu[0]
	if len(cpu) > 1 {
		ph.CPUAgent = cpu[1]
	}
	ph.CPUTotal = ph.CPURelay + ph.CPUAgent
	if countLines {
		// The agent prints its line after it answers: give the last ones
		// a moment to come through the pipe.
		deadline := time.Now().Add(2 * time.Second)
		for {
			lines, _ := procs[1].counts()
			ph.AgentLines = lines - lines0
			if ph.AgentLines >= int64(lr.Sent) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return ph
}

func pidsOf(procs []*child) []int {
	if procs == nil {
		return []int{os.Getpid()}
	}
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.pid())
	}
	return pids
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// startRelay starts `devhook relay serve` on a free loopback port.
func startRelay(ctx context.Context, bin, dir string) (*child, string, error) {
	return startRelayArgs(ctx, bin, dir)
}

// startRelayArgs starts `devhook relay serve` on a free loopback port, with more
// arguments.
func startRelayArgs(ctx context.Context, bin, dir string, args ...string) (*child, string, error) {
	return startRelayAt(ctx, bin, dir, "127.0.0.1:0", args...)
}

// startRelayAt starts `devhook relay serve` on addr, with more arguments.
func startRelayAt(ctx context.Context, bin, dir, addr string, args ...string) (*child, string, error) {
	const prefix = "devhook relay on "
	c, line, err := startChild(ctx, "relay", bin, append([]string{"relay", "serve", "--addr", addr, "--data", dir}, args...),
		func(l string) bool { return strings.HasPrefix(l, prefix) }, 30*time.Second)
	if err != nil {
		return nil, "", err
	}
	return c, strings.TrimSpace(strings.TrimPrefix(line, prefix)), nil
}

// readyLine is the part of listen's first --json line the harness needs.
type readyLine struct {
	Event        string `json:"event"`
	PublicURL    string `json:"public_url"`
	InspectorURL string `json:"inspector_url"`
	Channel      string `json:"channel"`
}

// startListen starts `devhook listen` against relayURL, forwarding to the
// receiver, with verification, recording and the inspector on.
func startListen(ctx context.Context, bin, relayURL, forward, secret, dir string) (*child, readyLine, error) {
	var ready readyLine
	c, _, err := startChild(ctx, "agent", bin, []string{"listen", "--forward", forward, "--relay", relayURL,
		"--secret", secret, "--verify", "report", "--data", dir, "--json", "--inspect", "127.0.0.1:0"},
		func(l string) bool {
			return strings.Contains(l, `"event":"ready"`) && jsonUnmarshal(l, &ready) == nil
		}, 30*time.Second)
	if err != nil {
		return nil, ready, err
	}
	if ready.PublicURL == "" {
		c.kill()
		return nil, ready, errors.New("agent: the ready line has no public_url")
	}
	return c, ready, nil
}
