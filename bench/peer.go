package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// peerTunnel is another tunnel, chisel, frp or localtunnel, as a server
// and a client process of its own that carry HTTP from a loopback address
// to the receiver: a point of comparison for the tunnel phase. Its phase
// is named after it, and its server's and client's figures stand in the
// relay's and the agent's columns.
type peerTunnel struct {
	name           string // the phase's name: chisel, frp or localtunnel
	server, client *child
	to             target // where senders post
	info           peerInfo
}

// peerInfo says which peer a run compared with, and how it was set up.
type peerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Mode    string `json:"mode"` // how the load goes through it
}

// procs is the server and the client, in the relay's and the agent's
// places.
func (t *peerTunnel) procs() []*child { return []*child{t.server, t.client} }

func (t *peerTunnel) kill() {
	t.client.kill()
	t.server.kill()
}

func (t *peerTunnel) exitedEither() bool {
	for _, c := range t.procs() {
		select {
		case <-c.exited:
			return true
		default:
		}
	}
	return false
}

// peerSetup is what starting a peer needs besides the path of its
// binaries.
type peerSetup struct {
	recvPort string    // the receiver's port on 127.0.0.1
	secret   string    // the signing secret, for the POST that proves the way
	dir      string    // a directory of the peer's own, for its configuration
	kids     *children // every process started is added here
}

// startPeers starts every peer that o names a path for, in the order of
// their phases: chisel, frp, localtunnel. Their processes are added to
// kids; dir is the run's temporary directory.
func startPeers(ctx context.Context, o options, receiverURL, dir string, kids *children) ([]*peerTunnel, error) {
	_, recvPort, err := net.SplitHostPort(strings.TrimPrefix(receiverURL, "http://"))
	if err != nil {
		return nil, fmt.Errorf("receiver URL %q: %w", receiverURL, err)
	}
	// A phase's requests' ids start with its name's first letter (see
	// loadPhase): keep them distinct from each other, direct's and
	// tunnel's, or the receiver counts one phase's as another's.
	starts := []struct {
		name, path string
		start      func(ctx context.Context, path string, s peerSetup) (*peerTunnel, error)
	}{
		{"chisel", o.chisel, startChiselOnce},
		{"frp", o.frp, startFRPOnce},
		{"localtunnel", o.localtunnel, startLocaltunnelOnce},
	}
	var peers []*peerTunnel
	for _, s := range starts {
		if s.path == "" {
			continue
		}
		o.logf("starting %s", s.name)
		setup := peerSetup{recvPort: recvPort, secret: o.secret, dir: filepath.Join(dir, s.name), kids: kids}
		if err := os.MkdirAll(setup.dir, 0o700); err != nil {
			return nil, err
		}
		p, err := startPeer(ctx, s.name, func() (*peerTunnel, error) { return s.start(ctx, s.path, setup) })
		if err != nil {
			for _, p := range peers {
				p.kill()
			}
			return nil, err
		}
		peers = append(peers, p)
	}
	return peers, nil
}

// startPeer calls once up to three times: free ports are picked, closed
// and then handed to the peer, so that another process may take one in
// between.
func startPeer(ctx context.Context, name string, once func() (*peerTunnel, error)) (*peerTunnel, error) {
	const tries = 3
	for i := 1; ; i++ {
		t, err := once()
		if err == nil {
			return t, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if i == tries {
			return nil, fmt.Errorf("%s did not start in %d tries; the last: %w", name, tries, err)
		}
	}
}

// ready waits until a POST through t succeeds: a tunnel's port may accept
// connections, or answer, before its way to the receiver is open. It
// kills t when none does in 15 seconds.
func (t *peerTunnel) ready(ctx context.Context, secret string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		lr := drive(ctx, t.to, secret, "r"+t.name[:1], 1, 1, 5*time.Second)
		if lr.OK == 1 {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) || t.exitedEither() {
			t.kill()
			return fmt.Errorf("%s: no POST through %s succeeded (%s); client: %s; server: %s",
				t.name, t.to.URL, lr.FirstErr, t.client.tail(), t.server.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lookBin returns bin's path if it is an executable file, else an error
// that says which peer wanted it.
func lookBin(peer, bin string) (string, error) {
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%s: %w", peer, err)
	}
	return p, nil
}

// versionOf runs bin with args, such as --version, and returns the first
// line it prints, or "" when it does not answer within two seconds.
func versionOf(ctx context.Context, bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// waitTCP waits until addr accepts a connection, for at most limit, or
// until c exits.
func waitTCP(ctx context.Context, c *child, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("%s exited before %s accepted connections (%w): %s", c.name, addr, c.exitErr, c.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not accept connections within %s: %s", c.name, addr, limit, c.tail())
		}
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
