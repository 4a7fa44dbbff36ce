package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/lifecycle"
	"github.com/devhook/devhook/receiver"
)

type receiveOptions struct {
	addr   string
	secret string
	skew   time.Duration
	stdout io.Writer
	stderr io.Writer
}

func newReceiveCmd() *cobra.Command {
	o := &receiveOptions{}
	cmd := &cobra.Command{
		Use:   "receive --secret S",
		Short: "Run the reference receiver: checks service-signature and answers as the service's receivers do",
		Example: `  devhook receive --secret whsec_test
  devhook receive --secret whsec_test --addr 127.0.0.1:9090 --skew 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if o.secret == "" {
				o.secret = os.Getenv("DEVHOOK_SECRET")
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	cmd.Flags().StringVar(&o.secret, "secret", "", "signing secret (or DEVHOOK_SECRET); without one every request gets 500, as the reference does")
	cmd.Flags().DurationVar(&o.skew, "skew", 0, "how far ahead a signature's t may be (default 60s; the stricter reference uses 5s)")
	return cmd
}

func (o *receiveOptions) run(ctx context.Context) error {
	var mu sync.Mutex
	h := receiver.New(receiver.Config{Secret: o.secret, Skew: o.skew, OnRequest: func(r *http.Request, body []byte, v devhook.Verdict) {
		ev := devhook.ParseEvent(body)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(o.stdout, "%s  %s %s  %d bytes  run=%s %s  → %d %s\n", time.Now().Format("15:04:05.000"),
			r.Method, r.URL.RequestURI(), len(body), ev.RunID, ev.StatusV2, v.Status, v.Result)
	}})
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (choose another with --addr)", o.addr, err)
	}
	fmt.Fprintf(o.stdout, "reference receiver on http://%s\n", ln.Addr())
	if o.secret == "" {
		fmt.Fprintln(o.stderr, "devhook: no --secret (nor DEVHOOK_SECRET): this receiver answers 500 to every request, as the service's receivers do without a secret; pass --secret S")
	}
	var g lifecycle.Group
	g.Serve("the receiver", newHTTPServer(h), ln)
	return stopReason(ctx, g.Run(ctx))
}
