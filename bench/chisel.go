package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// chiselTunnel is a chisel server and client carrying TCP from a loopback
// port to the receiver: the comparison point for the tunnel phase, a bare
// TCP-over-WebSocket tunnel with nothing stored, verified or inspected.
type chiselTunnel struct {
	server, client *child
	URL            string // senders post here: the server's reverse port
}

// procs is the server and the client, in the relay's and the agent's
// places.
func (t *chiselTunnel) procs() []*child { return []*child{t.server, t.client} }

func (t *chiselTunnel) kill() {
	t.client.kill()
	t.server.kill()
}

// startChisel starts `chisel server --reverse` and a `chisel client` whose
// reverse remote forwards a free port on the server to the receiver, and
// waits until a POST through it succeeds. Both processes are added to
// kids. Free ports are picked, closed and then handed to chisel, so that
// another process may take one in between: startChisel tries three times.
func startChisel(ctx context.Context, bin, receiverURL, secret string, kids *children) (*chiselTunnel, error) {
	_, recvPort, err := net.SplitHostPort(strings.TrimPrefix(receiverURL, "http://"))
	if err != nil {
		return nil, fmt.Errorf("chisel: receiver URL %q: %w", receiverURL, err)
	}
	if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("chisel: %w", err)
	}
	const tries = 3
	for i := 1; ; i++ {
		t, err := startChiselOnce(ctx, bin, recvPort, secret, kids)
		if err == nil {
			return t, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if i == tries {
			return nil, fmt.Errorf("chisel did not start in %d tries; the last: %w", tries, err)
		}
	}
}

func startChiselOnce(ctx context.Context, bin, recvPort, secret string, kids *children) (*chiselTunnel, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	p, tp := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
	server, err := spawn("chisel server", bin, []string{"server", "--host", "127.0.0.1", "--port", p, "--reverse"}, nil)
	if err != nil {
		return nil, err
	}
	kids.add(server)
	if err := waitTCP(ctx, server, "127.0.0.1:"+p, 15*time.Second); err != nil {
		server.kill()
		return nil, err
	}
	client, err := spawn("chisel client", bin, []string{"client", "http://127.0.0.1:" + p,
		"R:127.0.0.1:" + tp + ":127.0.0.1:" + recvPort}, nil)
	if err != nil {
		server.kill()
		return nil, err
	}
	kids.add(client)
	t := &chiselTunnel{server: server, client: client, URL: "http://127.0.0.1:" + tp + "/hook"}
	if err := waitTCP(ctx, client, "127.0.0.1:"+tp, 15*time.Second); err != nil {
		t.kill()
		return nil, fmt.Errorf("%w (chisel server: %s)", err, server.tail())
	}
	// The port accepts once the client has asked for it; a request
	// answered through it proves the way to the receiver.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		lr := drive(ctx, t.URL, secret, "rc", 1, 1, 5*time.Second)
		if lr.OK == 1 {
			return t, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) || t.exitedEither() {
			t.kill()
			return nil, fmt.Errorf("chisel: no POST through %s succeeded (%s); client: %s; server: %s", t.URL, lr.FirstErr, client.tail(), server.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (t *chiselTunnel) exitedEither() bool {
	for _, c := range t.procs() {
		select {
		case <-c.exited:
			return true
		default:
		}
	}
	return false
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
			return fmt.Errorf("%s exited before %s accepted connections (%v): %s", c.name, addr, c.exitErr, c.tail())
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
