package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

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
