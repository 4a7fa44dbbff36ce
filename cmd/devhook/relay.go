package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

type relayOptions struct {
	addr      string
	publicURL string
	dataDir   string
	maxBody   int64
	timeout   time.Duration
	openToken string

	bodyTimeout        time.Duration
	maxInflight        int64
	maxChannelInflight int64
	maxConns           int
	stdout             io.Writer
	stderr             io.Writer
}

func newRelayCmd() *cobra.Command {
	o := &relayOptions{}
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run a relay: public URLs for agents, deliveries streamed over WebSocket",
		Long: `Relay accepts deliveries at /c/<channel>/<any path> and streams each to the channel's
agent. With no agent connected, deliveries are kept in a queue on disk (the sender gets
202) and delivered when the agent comes back. Put it behind a TLS-terminating proxy and
pass that proxy's address as --public-url.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:4041", "address to listen on (use :4041 to accept from other machines)")
	f.StringVar(&o.publicURL, "public-url", "", "base URL senders reach this relay at (default: from each request's Host)")
	f.StringVar(&o.dataDir, "data", filepath.Join(defaultDataDir(), "relay"), "directory for channels and the queue")
	f.Int64Var(&o.maxBody, "max-body", relay.DefaultMaxBody, "largest delivery body in bytes (larger: 413)")
	f.DurationVar(&o.timeout, "timeout", relay.DefaultResponseTimeout, "how long a sender waits for the agent's answer (then 504)")
	f.DurationVar(&o.bodyTimeout, "body-timeout", relay.DefaultBodyTimeout, "how long a sender may take to send a body, after its headers (then 408)")
	f.Int64Var(&o.maxChannelInflight, "max-channel-inflight", 0, fmt.Sprintf(
		"body bytes of one channel held at once, being read or waiting for the agent; beyond, 429 with Retry-After (default %d MiB, or --max-body if larger)", relay.DefaultMaxChannelInflight>>20))
	f.Int64Var(&o.maxInflight, "max-inflight", 0, fmt.Sprintf(
		"body bytes of all channels held at once; beyond, 503 with Retry-After (default %d MiB, or --max-channel-inflight if larger)", relay.DefaultMaxInflight>>20))
	f.IntVar(&o.maxConns, "max-conns", defaultMaxConns(), "connections (senders and agents) open at once; more wait to be accepted, so that descriptors never run out")
	f.StringVar(&o.openToken, "open-token", os.Getenv("DEVHOOK_RELAY_TOKEN"), "require this bearer token to open channels (or DEVHOOK_RELAY_TOKEN)")
	return cmd
}

func (o *relayOptions) run(ctx context.Context) error {
	if err := ensureDir(o.dataDir); err != nil {
		return err
	}
	db, err := storage.OpenRelayStore(filepath.Join(o.dataDir, "relay.db"), storage.RelayStoreConfig{})
	if err != nil {
		return err
	}
	defer db.Close()
	logger := log.New(o.stderr, "", log.LstdFlags)
	srv, err := relay.NewServer(relay.Config{
		Store: db, PublicURL: o.publicURL, MaxBody: o.maxBody, ResponseTimeout: o.timeout,
		BodyTimeout: o.bodyTimeout, MaxChannelInflight: o.maxChannelInflight, MaxInflight: o.maxInflight,
		OpenToken: o.openToken, Logf: logger.Printf,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	if o.maxConns < 1 {
		return fmt.Errorf("--max-conns must be at least 1, not %d", o.maxConns)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (choose another with --addr)", o.addr, err)
	}
	ln = relay.LimitListener(ln, o.maxConns)
	fmt.Fprintf(o.stdout, "devhook relay on http://%s\n", ln.Addr())
	if o.publicURL != "" {
		fmt.Fprintf(o.stdout, "  public URL  %s\n", o.publicURL)
	}
	fmt.Fprintf(o.stdout, "  data        %s\n", o.dataDir)
	wait := serve(ctx, newHTTPServer(srv), ln)
	return wait()
}
