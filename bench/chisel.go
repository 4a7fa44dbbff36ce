package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// startChiselOnce starts `chisel server --reverse` and a `chisel client`
// whose reverse remote forwards a free port on the server to the
// receiver's port, and waits until a POST through it succeeds: a bare
// TCP-over-WebSocket tunnel with nothing stored, verified or inspected.
// Both processes are added to s.kids.
func startChiselOnce(ctx context.Context, bin string, s peerSetup) (*peerTunnel, error) {
	bin, err := lookBin("chisel", bin)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	p, tp := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
	server, err := spawn("chisel server", bin, []string{"server", "--host", "127.0.0.1", "--port", p, "--reverse"}, nil)
	if err != nil {
		return nil, err
	}
	s.kids.add(server)
	if err := waitTCP(ctx, server, "127.0.0.1:"+p, 15*time.Second); err != nil {
		server.kill()
		return nil, err
	}
	client, err := spawn("chisel client", bin, []string{"client", "http://127.0.0.1:" + p,
		"R:127.0.0.1:" + tp + ":127.0.0.1:" + s.recvPort}, nil)
	if err != nil {
		server.kill()
		return nil, err
	}
	s.kids.add(client)
	t := &peerTunnel{name: "chisel", server: server, client: client, to: target{URL: "http://127.0.0.1:" + tp + "/hook"},
		info: peerInfo{Name: "chisel", Version: versionOf(ctx, bin, "--version"),
			Mode: "reverse TCP port forward over WebSocket (R:), plain HTTP between client and server"}}
	if err := waitTCP(ctx, client, "127.0.0.1:"+tp, 15*time.Second); err != nil {
		t.kill()
		return nil, fmt.Errorf("%w (chisel server: %s)", err, server.tail())
	}
	// The port accepts once the client has asked for it; a request
	// answered through it proves the way to the receiver.
	if err := t.ready(ctx, s.secret); err != nil {
		return nil, err
	}
	return t, nil
}
