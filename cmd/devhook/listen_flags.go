package main

import (
	"io"
	"os"
	"time"

	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/pending"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/storage"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// listen's options, its command, help and flags; listen.go wires what they
// say.

type listenOptions struct {
	forward    []string
	routes     []string // --route
	routesFile string   // --routes
	relayURL   string
	relayToken string
	relayAddr  string
	secret     string
	dataDir    string
	inspect    string
	json       bool
	verify     string
	skew       time.Duration
	timeout    time.Duration
	retryFor   time.Duration
	headers    []string // --header "Name: value"
	forwardCA  string
	insecure   bool
	relayCA    string // --relay-ca
	publicURL  string // --public-url, of the built-in relay
	network    relayclient.Network
	// writes are the files of the start (channels.json, webhooks.json,
	// listen.json): on a full disk they wait for room rather than stop
	// listen. Made by wire.
	writes *pending.Writes

	// The service: --register creates a webhook for this listen, --webhook
	// uses an existing one.
	register  bool
	webhook   string
	updateURL bool
	keep      bool
	cloud     cloudFlags

	stdout, stderr io.Writer
	noSpace        func() error // tests fill the disk: storage.Config.NoSpace
	// openStore opens the delivery store; nil: storage.Open. Tests wrap
	// the real store (one whose final flush fails).
	openStore func(path string, cfg storage.Config) (deliveryStore, error)
}

func newListenCmd() *cobra.Command { return newListenCmdWith(&listenOptions{}) }

// newListenCmdWith is newListenCmd on o, whose fields no flag sets stay as
// a test gave them.
func newListenCmdWith(o *listenOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "listen --forward URL",
		Short: "Receive deliveries at a public URL, verify, record and forward them to a local receiver",
		Long: `Listen opens a channel on a relay and forwards every delivery sent to its public URL
to the local receiver, byte-exact, passing the receiver's answer back to the sender.
Each delivery's service-signature is checked and everything is recorded under --data.

Without --relay, a relay runs inside this process on loopback: its URL is reachable
from this machine only (useful with 'devhook send' and 'devhook emulate').

--route 'MATCH -> TARGET' sends what MATCH matches (path:GLOB, json:PATH=VALUE,
header:NAME=VALUE, joined with ' & ') to another receiver, or drops it (recorded, answered
202); the first route that matches wins, the rest goes to --forward (docs/LISTEN.md).
With several receivers, one that does not answer holds at most 3/4 of the forwards
under way: a delivery to it over that is not sent, and its sender gets 503.

A delivery is recorded before it is forwarded. When it cannot be (a full disk), a
sender still waiting gets 503 and the delivery is not forwarded; deliveries that waited
in the relay's queue are held and go through once recording works again. Started on a
full disk with its store made before, listen says so in its ready block ("not connected
yet") and does not connect until there is room: the relay keeps the deliveries queued
meanwhile (the built-in relay, on the same disk, while its queue has room; then 503), and
the inspector shows the history. A first start, whose store a full disk cannot take, says
to free space and exits.

A delivery that waited in the relay's queue (its sender got 202) and that the receiver
does not take (no answer, 408, 429 or 5xx) is retried with backoff for --retry-for,
each retry recorded as an attempt; then devhook gives up on it and says so.

--register creates a webhook at the service (--endpoint, --api-key, as for
'devhook webhooks') pointing at the public URL, verifies every delivery with its
secret, and deletes it on exit unless --keep. A webhook a killed listen left is
taken over by the next start with the same --data. --webhook ID uses an existing
webhook's secret instead, and with --update-url points it here until exit.`,
		Example: `  devhook listen --forward localhost:8080 --secret whsec_...
  devhook listen --forward localhost:8080 --route 'path:/github/** -> localhost:9001' --route 'header:X-Env=test -> drop'
  devhook listen --forward localhost:8080 --routes routes.yaml
  devhook listen --forward localhost:8080 --register --endpoint http://127.0.0.1:4010 --api-key devkey
  devhook listen --forward localhost:8080 --relay https://relay.example.com --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if o.secret == "" {
				o.secret = os.Getenv("DEVHOOK_SECRET")
			}
			// Read here, not as the flag's default, so that --help never
			// prints a token.
			if o.relayToken == "" {
				o.relayToken = os.Getenv("DEVHOOK_RELAY_TOKEN")
			}
			return o.run(cmd.Context())
		},
	}
	o.addFlags(cmd.Flags())
	cmd.MarkFlagRequired("forward")
	return cmd
}

// addFlags adds listen's flags to f, each setting a field of o.
func (o *listenOptions) addFlags(f *pflag.FlagSet) {
	f.StringArrayVar(&o.forward, "forward", nil, "receiver to forward to (host:port or URL); repeat for more, the first one answers")
	f.StringArrayVar(&o.routes, "route", nil, "send what MATCH matches to TARGET instead: 'MATCH -> TARGET', MATCH path:GLOB, json:PATH=VALUE or header:NAME=VALUE (joined with ' & '), TARGET host:port, a URL or drop; repeat for more, the first that matches wins (docs/LISTEN.md)")
	f.StringVar(&o.routesFile, "routes", "", "a file of routes, tried after --route's: one 'MATCH -> TARGET' a line, or YAML (.yaml, .yml)")
	f.StringVar(&o.relayURL, "relay", "", "relay URL, or host:port (http:// for this machine, https:// for another) (default: a relay inside this process, local only); several, comma-separated, for instances of one relay cluster: the next is tried when one cannot be reached")
	f.StringVar(&o.relayToken, "relay-token", "", "token the relay requires to open a channel (or DEVHOOK_RELAY_TOKEN)")
	f.StringVar(&o.relayAddr, "relay-addr", "127.0.0.1:4041", "address of the built-in relay (without --relay)")
	f.StringVar(&o.publicURL, "public-url", "", "the built-in relay's public URL: an address that a tunnel you already run forwards to --relay-addr (see docs/LISTEN.md)")
	f.StringVar(&o.relayCA, "relay-ca", "", "PEM file of the CA that signed an https relay's certificate (trusted besides the system's)")
	f.StringVar(&o.secret, "secret", "", "the webhook's signing secret (or DEVHOOK_SECRET)")
	f.StringVar(&o.dataDir, "data", defaultDataDir(), "directory for recorded deliveries and the channel")
	f.StringVar(&o.inspect, "inspect", "127.0.0.1:4040", "address of the web inspector, or off")
	f.BoolVar(&o.json, "json", false, "print one JSON object a line")
	f.StringVar(&o.verify, "verify", agent.VerifyReport, "signature check: report (record the verdict), enforce (reject failures), off")
	f.DurationVar(&o.skew, "skew", 0, "how far ahead of this clock a signature's t may be (default 60s)")
	f.DurationVar(&o.timeout, "timeout", 0, "how long to wait for the receiver (default 30s)")
	f.DurationVar(&o.retryFor, "retry-for", agent.DefaultRetryFor, "how long to retry a queued delivery the receiver did not take (no answer, 408, 429, 5xx) before giving up; 0: do not retry")
	f.StringArrayVarP(&o.headers, "header", "H", nil, "add this header to every forward, replacing one of the same name: 'Name: value'; repeat for more")
	f.StringVar(&o.forwardCA, "forward-ca", "", "PEM file of the CA that signed an https receiver's certificate (trusted besides the system's)")
	f.BoolVar(&o.insecure, "forward-insecure", false, "do not check https receivers' certificates (a warning says so)")
	f.BoolVar(&o.register, "register", false, "create a webhook at the service for this listen, verify with its secret, delete it on exit")
	f.StringVar(&o.webhook, "webhook", "", "use this existing webhook's secret")
	f.BoolVar(&o.updateURL, "update-url", false, "with --webhook: point it at this listen's public URL, and back on exit")
	f.BoolVar(&o.keep, "keep", false, "with --register: keep the webhook on exit (the next start reuses it)")
	o.cloud.register(f, false)
}
