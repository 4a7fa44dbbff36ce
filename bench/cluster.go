package main

// The relay cluster of the cluster phases: a NATS server with JetStream
// (bench/natsserver) and N `devhook relay serve --nats` instances, each a
// process of its own on loopback, so that the CPU time and memory of each
// are measured apart from the harness's senders and receiver, and an
// instance can be crashed and started again on its address.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// natsReady is the line bench/natsserver prints once it accepts
// connections.
const natsReady = "nats on "

// cluster is a NATS server and relay instances sharing it.
type cluster struct {
	bin     string // devhook
	dir     string
	kids    *children
	nats    *child
	natsURL string
	relays  []*child // by instance; a crashed instance's until it is restarted
	urls    []string // each instance's base URL
	args    []string // the instances' arguments after --nats
}

// startCluster starts the NATS server natsBin (with its store under dir)
// and n relay instances of bin on it, with args.
func startCluster(ctx context.Context, bin, natsBin, dir string, n int, kids *children, args ...string) (*cluster, error) {
	ns, line, err := startChild(ctx, "nats", natsBin, []string{"-dir", filepath.Join(dir, "nats")},
		func(l string) bool { return strings.HasPrefix(l, natsReady) }, 30*time.Second)
	if err != nil {
		return nil, err
	}
	kids.add(ns)
	c := &cluster{bin: bin, dir: dir, kids: kids, nats: ns, natsURL: strings.TrimSpace(strings.TrimPrefix(line, natsReady)), args: args}
	for i := range n {
		r, u, err := startRelayAt(ctx, bin, c.relayDir(i), "127.0.0.1:0", append([]string{"--nats", c.natsURL}, args...)...)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("relay instance %d: %w", i, err)
		}
		kids.add(r)
		c.relays, c.urls = append(c.relays, r), append(c.urls, u)
	}
	return c, nil
}

func (c *cluster) relayDir(i int) string { return filepath.Join(c.dir, fmt.Sprintf("relay%d", i)) }

// crash kills instance i at once (SIGKILL): its connections close without
// a word, as when its machine fails.
func (c *cluster) crash(i int) { c.relays[i].crash() }

// restart starts instance i again on its address, once it has been
// crashed or stopped.
func (c *cluster) restart(ctx context.Context, i int) error {
	addr := strings.TrimPrefix(c.urls[i], "http://")
	r, u, err := startRelayAt(ctx, c.bin, c.relayDir(i), addr, append([]string{"--nats", c.natsURL}, c.args...)...)
	if err != nil {
		return fmt.Errorf("restart relay instance %d: %w", i, err)
	}
	c.kids.add(r)
	if u != c.urls[i] {
		r.kill()
		return fmt.Errorf("restart relay instance %d: it came back on %s, not %s", i, u, c.urls[i])
	}
	c.relays[i] = r
	return nil
}

// relayPIDs are the instances' processes, in order.
func (c *cluster) relayPIDs() []int { return pidsOf(c.relays) }

// stop ends the relays, then NATS.
func (c *cluster) stop() {
	for _, r := range c.relays {
		r.kill()
	}
	c.nats.kill()
}

// order is the relay URLs an agent whose home is instance home is given,
// as `listen --relay` takes them: its home first, then the instances
// after it, round. agent.Config.RelayFallbacks tries them in that order,
// at once, when the connection in use is lost.
func (c *cluster) order(home int) []string {
	var out []string
	for k := range c.urls {
		out = append(out, c.urls[(home+k)%len(c.urls)])
	}
	return out
}

// onOtherRelay is the public URL public (on relay from) as reached
// through relay to.
func onOtherRelay(public, from, to string) string {
	return to + strings.TrimPrefix(public, from)
}
