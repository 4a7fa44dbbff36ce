package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// localtunnel's layout under the directory --localtunnel names: the
// client is the localtunnel npm package, the server localtunnel's server
// (github.com/localtunnel/server, not on npm under its own name) with its
// dependencies installed, esm among them.
const (
	ltClientJS = "node_modules/localtunnel/bin/lt.js"
	ltServerJS = "server/bin/server"
	ltESM      = "server/node_modules/esm"
)

// ltDomain is the server's base domain, and ltSubdomain the tunnel the
// client asks for: senders post to the server with Host
// ltSubdomain.ltDomain, so that no name needs to resolve.
const (
	ltDomain    = "lt.localhost"
	ltSubdomain = "devhookbench"
)

// ltLayout is the node scripts of a localtunnel install directory.
type ltLayout struct {
	client, server, esm string
}

// findLocaltunnel checks that dir holds localtunnel's client and server
// where ltClientJS, ltServerJS and ltESM say, and returns their paths.
func findLocaltunnel(dir string) (ltLayout, error) {
	l := ltLayout{client: filepath.Join(dir, ltClientJS), server: filepath.Join(dir, ltServerJS), esm: filepath.Join(dir, ltESM)}
	for _, p := range []string{l.client, l.server, l.esm} {
		if _, err := os.Stat(p); err != nil {
			return l, fmt.Errorf("localtunnel: %s needs the client at %s, the server at %s and esm at %s: %w",
				dir, ltClientJS, ltServerJS, ltESM, err)
		}
	}
	return l, nil
}

// packageVersion is the version in a package.json, or "".
func packageVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var pkg struct{ Version string }
	if json.Unmarshal(b, &pkg) != nil {
		return ""
	}
	return pkg.Version
}

// startLocaltunnelOnce starts localtunnel's server on 127.0.0.1 and its
// client with the tunnel ltSubdomain to the receiver, both under the
// machine's node, and waits until a POST through the server succeeds.
// The server and client run as their defaults have them, with at most 10
// TCP connections from client to server (--max-sockets); NODE_ENV is
// production so that the server reads no .env file (its own turns debug
// logs on). Both run in s.dir, where esm keeps its cache
// (node_modules/.cache). Both processes are added to s.kids.
func startLocaltunnelOnce(ctx context.Context, dir string, s peerSetup) (*peerTunnel, error) {
	l, err := findLocaltunnel(dir)
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("localtunnel: %w", err)
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	p := strconv.Itoa(ports[0])
	env := []string{"NODE_ENV=production", "DEBUG="}
	server, err := spawnIn(s.dir, env, "localtunnel server", node, []string{"-r", l.esm, l.server,
		"--port", p, "--address", "127.0.0.1", "--domain", ltDomain}, nil)
	if err != nil {
		return nil, err
	}
	s.kids.add(server)
	if err := waitTCP(ctx, server, "127.0.0.1:"+p, 15*time.Second); err != nil {
		server.kill()
		return nil, err
	}
	client, err := spawnIn(s.dir, env, "localtunnel client", node, []string{l.client, "--port", s.recvPort,
		"--host", "http://127.0.0.1:" + p, "--local-host", "127.0.0.1", "--subdomain", ltSubdomain}, nil)
	if err != nil {
		server.kill()
		return nil, err
	}
	s.kids.add(client)
	version := strings.TrimSpace(fmt.Sprintf("client %s, server %s",
		packageVersion(filepath.Join(filepath.Dir(filepath.Dir(l.client)), "package.json")),
		packageVersion(filepath.Join(filepath.Dir(filepath.Dir(l.server)), "package.json"))))
	t := &peerTunnel{name: "localtunnel", server: server, client: client,
		to: target{URL: "http://127.0.0.1:" + p + "/hook", Host: ltSubdomain + "." + ltDomain},
		info: peerInfo{Name: "localtunnel", Version: version,
			Mode: "HTTP through the server (Host: " + ltSubdomain + "." + ltDomain + ") over the client's pool of TCP connections (default --max-sockets 10), node " + versionOf(ctx, node, "--version")}}
	// The server answers 404 until the client has asked for its tunnel,
	// and holds requests until the client's connections are up.
	if err := t.ready(ctx, s.secret); err != nil {
		return nil, err
	}
	return t, nil
}
