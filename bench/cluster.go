package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startNATS runs a NATS server with JetStream in this process, on a free
// loopback port, its store under dir, for the cluster phases.
func startNATS(dir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		MaxPayload: 16 << 20, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats server did not start")
	}
	return ns, nil
}

// clusterRelays starts two `devhook relay --nats` instances on ns. The
// agent connects to the first; senders post to the second, so that every
// delivery crosses NATS (request/reply) to reach it.
func clusterRelays(ctx context.Context, bin, tmp string, ns *server.Server, kids *children) (agentSide, senderSide *child, agentURL, senderURL string, err error) {
	for i, p := range []*struct {
		c   **child
		url *string
	}{{&agentSide, &agentURL}, {&senderSide, &senderURL}} {
		c, u, err := startRelayArgs(ctx, bin, filepath.Join(tmp, fmt.Sprintf("relay%d", i)), "--nats", ns.ClientURL())
		if err != nil {
			return nil, nil, "", "", err
		}
		kids.add(c)
		*p.c, *p.url = c, u
	}
	return agentSide, senderSide, agentURL, senderURL, nil
}

// onOtherRelay is the public URL public (on relay from) as reached
// through relay to.
func onOtherRelay(public, from, to string) string {
	return to + strings.TrimPrefix(public, from)
}
