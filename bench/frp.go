package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// frpHost is the custom domain of the harness's frp proxy: senders post
// to frps's vhost HTTP port with it as their Host header, so that no name
// needs to resolve.
const frpHost = "bench.frp.localhost"

// frpConfigs returns frps's and frpc's TOML configuration: frps on
// 127.0.0.1, its vhost HTTP port on vhostPort, and frpc with one http
// proxy for frpHost to the receiver's port. frpc talks to frps in plain
// TCP, as chisel and devhook do in this harness: frpc's default, TLS,
// would add cost that no other tunnel here pays. Everything else is
// frp's default (tcpMux on, no pool, info logs to the console).
func frpConfigs(bindPort, vhostPort int, recvPort string) (frps, frpc string) {
	frps = fmt.Sprintf(`bindAddr = "127.0.0.1"
bindPort = %d
vhostHTTPPort = %d
`, bindPort, vhostPort)
	frpc = fmt.Sprintf(`serverAddr = "127.0.0.1"
serverPort = %d
loginFailExit = true
transport.tls.enable = false

[[proxies]]
name = "devhook-bench"
type = "http"
localIP = "127.0.0.1"
localPort = %s
customDomains = [%q]
`, bindPort, recvPort, frpHost)
	return frps, frpc
}

// startFRPOnce starts frps and frpc from dir, with the configuration of
// frpConfigs written to s.dir, and waits until a POST through frps's
// vhost HTTP port succeeds. Both processes are added to s.kids.
func startFRPOnce(ctx context.Context, dir string, s peerSetup) (*peerTunnel, error) {
	frpsBin, err := lookBin("frp", filepath.Join(dir, "frps"))
	if err != nil {
		return nil, err
	}
	frpcBin, err := lookBin("frp", filepath.Join(dir, "frpc"))
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	frpsConf, frpcConf := frpConfigs(ports[0], ports[1], s.recvPort)
	sPath, cPath := filepath.Join(s.dir, "frps.toml"), filepath.Join(s.dir, "frpc.toml")
	if err := os.WriteFile(sPath, []byte(frpsConf), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cPath, []byte(frpcConf), 0o600); err != nil {
		return nil, err
	}
	server, err := spawn("frps", frpsBin, []string{"-c", sPath}, nil)
	if err != nil {
		return nil, err
	}
	s.kids.add(server)
	for _, p := range ports {
		if err := waitTCP(ctx, server, "127.0.0.1:"+strconv.Itoa(p), 15*time.Second); err != nil {
			server.kill()
			return nil, err
		}
	}
	client, err := spawn("frpc", frpcBin, []string{"-c", cPath}, nil)
	if err != nil {
		server.kill()
		return nil, err
	}
	s.kids.add(client)
	t := &peerTunnel{name: "frp", server: server, client: client,
		to: target{URL: "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/hook", Host: frpHost},
		info: peerInfo{Name: "frp", Version: versionOf(ctx, frpsBin, "--version"),
			Mode: "http proxy on frps's vhost HTTP port (Host: " + frpHost + "), plain TCP between frpc and frps"}}
	// frps answers 404 until frpc has logged in and its proxy is up.
	if err := t.ready(ctx, s.secret); err != nil {
		return nil, err
	}
	return t, nil
}
