package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/crypto/acme/autocert"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/lifecycle"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/pending"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

type relayOptions struct {
	addr      string
	publicURL string
	dataDir   string
	maxBody   int64
	timeout   time.Duration
	openToken string

	bodyTimeout time.Duration
	// As relay.Config takes them: 0 the default, negative none.
	bodyStall          time.Duration
	bodyMinRate        int64 // bytes a second
	bodyRateWindow     time.Duration
	maxInflight        int64
	maxChannelInflight int64
	maxConns           int

	// Public HTTPS: certificates from ACME for domain, or from files.
	domain        string
	acmeEmail     string
	acmeDirectory string
	tlsCert       string
	tlsKey        string
	httpsAddr     string
	httpAddr      string
	acmeClient    *http.Client // nil: one with a timeout; tests trust their CA here

	metricsAddr string

	// Cluster: channels, tokens and queues shared through NATS.
	natsURLs     string
	natsCreds    string
	natsPrefix   string
	natsReplicas int

	// The queue's quotas, for both stores (relay.Quota), and the life of
	// an unused channel.
	queueMaxAge          time.Duration
	queueMaxBytes        int64
	queueChannelMaxBytes int64
	queueChannelMaxDeliv int
	channelIdle          time.Duration

	stdout io.Writer
	stderr io.Writer
	// listenTCP opens the relay's sockets; nil: net.Listen. Tests break
	// a listener under the running relay.
	listenTCP func(network, addr string) (net.Listener, error)
}

// newRelayCmd is the relay's group: the server (serve) and the tools
// that work on its data (parked). Alone it prints its help, as every
// group does.
func newRelayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run a relay (devhook relay serve), look after its parked deliveries, compact its file",
		Long: `A relay gives agents (devhook listen) public URLs and streams the deliveries sent to
them over WebSocket. 'devhook relay serve' runs one; 'devhook relay parked' lists, requeues
and drops the deliveries a relay parked; 'devhook relay compact' gives a stopped relay's
free space back to the disk. See docs/DEPLOY.md.`,
		Example: `  devhook relay serve --addr :4041 --public-url https://hooks.example.com
  devhook relay parked list --data /var/lib/devhook-relay
  devhook relay compact --data /var/lib/devhook-relay`,
	}
	serve := newRelayServeCmd()
	cmd.AddCommand(serve, newRelayParkedCmd(), newRelayCompactCmd())
	groupCmd(cmd)
	// devhook relay --addr ... ran the server before it moved to serve.
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok && c == cmd {
			if serve.Flags().Lookup(name) != nil {
				return fmt.Errorf("%w: the relay server is 'devhook relay serve' (devhook relay --%s ... is now devhook relay serve --%s ...)", err, name, name)
			}
		}
		return suggestFlag(c, err)
	})
	return cmd
}

func newRelayServeCmd() *cobra.Command { return newRelayServeCmdWith(&relayOptions{}) }

// newRelayServeCmdWith is newRelayServeCmd on o, whose fields no flag sets
// stay as a test gave them.
func newRelayServeCmdWith(o *relayOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a relay: public URLs for agents, deliveries streamed over WebSocket",
		Long: `A relay accepts deliveries at /c/<channel>/<any path> and streams each to the channel's
agent. With no agent connected, deliveries are kept in a queue on disk (the sender gets
202) and delivered when the agent comes back. A queued delivery the relay can never send
is parked, with the reason, so that the queue goes on: see devhook relay parked.

Public HTTPS in one command: --domain hooks.example.com obtains and renews a certificate
from Let's Encrypt (or --acme-directory) by itself, serves HTTPS on --https-addr (:443) and
answers ACME challenges and redirects to HTTPS on --http-addr (:80); the public URL
follows from the domain. --tls-cert/--tls-key serve certificates managed elsewhere
(reloaded when the files change). Or put it behind a TLS-terminating proxy and pass that
proxy's address as --public-url.

A cluster: --nats nats://host:4222[,...] makes this relay one instance of many sharing
channels, tokens and queues through NATS (JetStream keeps the queue): a delivery arriving
at any instance reaches the agent wherever it is connected. See docs/DEPLOY.md.`,
		Example: `  devhook relay serve --addr :4041 --public-url https://hooks.example.com
  devhook relay serve --domain hooks.example.com --acme-email ops@example.com
  devhook relay serve --nats nats://nats-1:4222,nats://nats-2:4222 --addr :4041`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			// Read here, not as the flag's default, so that --help never
			// prints a token.
			if o.openToken == "" {
				o.openToken = os.Getenv("DEVHOOK_RELAY_TOKEN")
			}
			if err := o.bodyBoundsOff(cmd.Flags()); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:4041", "address to listen on (use :4041 to accept from other machines)")
	f.StringVar(&o.publicURL, "public-url", "", "base URL senders reach this relay at (default: from each request's Host)")
	f.StringVar(&o.dataDir, "data", filepath.Join(defaultDataDir(), "relay"), "directory for channels and the queue")
	f.Int64Var(&o.maxBody, "max-body", wire.DefaultMaxBody, "largest delivery body in bytes (larger: 413)")
	f.DurationVar(&o.timeout, "timeout", relay.DefaultResponseTimeout, "how long a sender waits for the agent's answer (then 504)")
	f.DurationVar(&o.bodyTimeout, "body-timeout", relay.DefaultBodyTimeout, "how long a sender may take to send a body, after its headers (then 408)")
	f.DurationVar(&o.bodyStall, "body-stall", relay.DefaultBodyStall, "a body from which no byte arrives for this long is cut with 408 and the bytes it held are freed (0: none)")
	f.Int64Var(&o.bodyMinRate, "body-min-rate", relay.DefaultBodyMinRate, "bytes a second a body must keep after its first --body-rate-window, measured over each window; slower: 408 (0: none)")
	f.DurationVar(&o.bodyRateWindow, "body-rate-window", relay.DefaultBodyRateWindow, "the window --body-min-rate is measured over, and the grace a body has before it is")
	f.Int64Var(&o.maxChannelInflight, "max-channel-inflight", 0, fmt.Sprintf(
		"body bytes of one channel held at once, being read or waiting for the agent; beyond, 429 with Retry-After (default %d MiB, or --max-body if larger)", relay.DefaultMaxChannelInflight>>20))
	f.Int64Var(&o.maxInflight, "max-inflight", 0, fmt.Sprintf(
		"body bytes of all channels held at once; beyond, 503 with Retry-After (default %d MiB, or --max-channel-inflight if larger)", relay.DefaultMaxInflight>>20))
	f.IntVar(&o.maxConns, "max-conns", defaultMaxConns(), "connections (senders and agents) open at once; more wait to be accepted, so that descriptors never run out")
	f.SetAnnotation("max-conns", docDefault, []string{"the open-files limit less 1024"})
	f.StringVar(&o.openToken, "open-token", "", "require this bearer token to open channels (or DEVHOOK_RELAY_TOKEN)")
	f.StringVar(&o.domain, "domain", "", "serve HTTPS for this DNS name with a certificate obtained and renewed by ACME (Let's Encrypt); the public URL is https://<domain>")
	f.StringVar(&o.acmeEmail, "acme-email", "", "contact address for the ACME account (expiry notices), with --domain")
	f.StringVar(&o.acmeDirectory, "acme-directory", autocert.DefaultACMEDirectory, "ACME directory URL, with --domain (for example Let's Encrypt's staging directory)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this certificate file (PEM, chain included), managed elsewhere; needs --tls-key")
	f.StringVar(&o.tlsKey, "tls-key", "", "the private key file (PEM) of --tls-cert")
	f.StringVar(&o.httpsAddr, "https-addr", ":443", "address for HTTPS, with --domain or --tls-cert (replaces --addr)")
	f.StringVar(&o.httpAddr, "http-addr", ":80", `address for plain HTTP with --domain or --tls-cert: ACME HTTP-01 challenges, and a redirect to HTTPS for everything else ("" = none; --domain then uses TLS-ALPN-01 only)`)
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics (and /healthz) on this address only, such as 127.0.0.1:9091 (default: /metrics on the relay's own address)")
	f.StringVar(&o.natsURLs, "nats", "", "run as one instance of a cluster: NATS server URLs (comma-separated, JetStream enabled) where the instances share channels, tokens and queues; without it, the single-process relay with its queue in --data")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS credentials file (JWT and NKey), with --nats")
	f.StringVar(&o.natsPrefix, "nats-prefix", natsrelay.DefaultPrefix, "prefix of the NATS subjects, streams and buckets, so that several relay clusters can share NATS servers")
	f.IntVar(&o.natsReplicas, "nats-replicas", 1, "JetStream replicas of the queue and channels (3 on a NATS cluster of three servers or more)")
	f.DurationVar(&o.queueMaxAge, "queue-max-age", relay.DefaultQueueMaxAge, "a queued delivery whose agent does not connect within this is dropped (counted in /metrics and logged)")
	f.Int64Var(&o.queueMaxBytes, "queue-max-bytes", relay.DefaultQueueBytes, "bytes the queues of all channels may hold; beyond, senders get 503 with Retry-After")
	f.Int64Var(&o.queueChannelMaxBytes, "queue-channel-max-bytes", relay.DefaultChannelQueueBytes, "bytes one channel's queue may hold; beyond, its senders get 429 with Retry-After (at most --queue-max-bytes)")
	f.IntVar(&o.queueChannelMaxDeliv, "queue-channel-max-deliveries", relay.DefaultChannelQueueDeliveries, "deliveries one channel's queue may hold; beyond, its senders get 429 with Retry-After")
	f.DurationVar(&o.channelIdle, "channel-idle", relay.DefaultChannelIdle, "a channel with no agent connected for this long is removed with its queue (counted in /metrics and logged); one whose agent is connected never is")
	return cmd
}

// bodyBoundsOff turns --body-stall 0 and --body-min-rate 0 into none,
// relay.Config's negative values (a zero field is the default, as for a
// relayOptions a test makes).
func (o *relayOptions) bodyBoundsOff(f *pflag.FlagSet) error {
	if o.bodyStall < 0 || o.bodyMinRate < 0 || o.bodyRateWindow <= 0 {
		return errors.New("--body-stall and --body-min-rate take 0 (none) or more, --body-rate-window more than 0")
	}
	if f.Changed("body-stall") && o.bodyStall == 0 {
		o.bodyStall = -1
	}
	if f.Changed("body-min-rate") && o.bodyMinRate == 0 {
		o.bodyMinRate = -1
	}
	return nil
}

func (o *relayOptions) run(ctx context.Context) error {
	quota, err := o.check()
	if err != nil {
		return err
	}
	if err := ensureDir(o.dataDir); err != nil {
		return err
	}
	// Stopped in the reverse order of adding: the servers, then the relay
	// Server, its store (and NATS), and the sockets.
	var g lifecycle.Group
	if err := o.wire(ctx, &g, quota); err != nil {
		return g.Abandon(err)
	}
	return stopReason(ctx, g.Run(ctx))
}

// check refuses flags that do not go together, and returns the queue's
// quota.
func (o *relayOptions) check() (relay.Quota, error) {
	switch {
	case o.domain != "" && (o.tlsCert != "" || o.tlsKey != ""):
		return relay.Quota{}, errors.New("--domain obtains certificates itself and --tls-cert/--tls-key use yours: choose one")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return relay.Quota{}, errors.New("--tls-cert and --tls-key go together: give both files")
	case o.maxConns < 1:
		return relay.Quota{}, fmt.Errorf("--max-conns must be at least 1, not %d", o.maxConns)
	case o.openToken != "" && len(o.openToken) < relay.MinOpenToken:
		return relay.Quota{}, fmt.Errorf("the token to open channels (--open-token or DEVHOOK_RELAY_TOKEN) is %d bytes long: use at least %d, for example one made by: openssl rand -hex 16", len(o.openToken), relay.MinOpenToken)
	}
	quota, err := o.quota()
	if err != nil {
		return quota, err
	}
	if o.domain != "" {
		return quota, validDomain(o.domain)
	}
	return quota, nil
}

// wire opens the relay's sockets and store and makes its servers, adding
// each to g.
func (o *relayOptions) wire(ctx context.Context, g *lifecycle.Group, quota relay.Quota) error {
	logger := log.New(o.stderr, "", log.LstdFlags)
	ls, err := o.listen(logger)
	if err != nil {
		return err
	}
	g.Close("the relay's sockets", func() error { ls.close(); return nil }) // should they never serve
	// Bound before the relay says where it serves.
	if o.metricsAddr != "" {
		if ls.metrics, err = net.Listen("tcp", o.metricsAddr); err != nil {
			return fmt.Errorf("listen on %s: %w (choose another with --metrics-addr)", o.metricsAddr, err)
		}
	}
	if o.domain != "" && o.publicURL == "" {
		o.publicURL = publicURLFor(o.domain, ls.main.Addr().String())
	}
	store, router, clusterLine, err := o.openStore(ctx, g, logger, quota)
	if err != nil {
		return err
	}
	srv, err := relay.NewServer(relay.Config{
		Store: store, Router: router, PublicURL: o.publicURL, MaxBody: o.maxBody, ResponseTimeout: o.timeout,
		BodyTimeout: o.bodyTimeout, MaxChannelInflight: o.maxChannelInflight, MaxInflight: o.maxInflight,
		BodyStall: o.bodyStall, BodyMinRate: o.bodyMinRate, BodyRateWindow: o.bodyRateWindow,
		OpenToken: o.openToken, Logf: logger.Printf, PrivateMetrics: o.metricsAddr != "", ChannelIdle: o.channelIdle,
	})
	if err != nil {
		return err
	}
	g.Close("the relay", srv.Close)
	o.printStart(ls, clusterLine, quota)
	if ls.metrics != nil {
		fmt.Fprintf(o.stdout, "  metrics     http://%s/metrics\n", ls.metrics.Addr())
		mux := http.NewServeMux()
		mux.Handle("/metrics", srv.Metrics())
		mux.Handle("/healthz", srv)
		g.Serve("the metrics server", newHTTPServer(mux), ls.metrics)
	}
	o.printSettings()
	main := ls.main
	if ls.tls != nil {
		main = tls.NewListener(main, ls.tls.config)
	}
	// ErrorLog: failed handshakes, certificates that could not be obtained.
	serveRelay(g, "the relay's server", srv, main, relay.ServeConfig{ErrorLog: logger})
	if ls.plain != nil {
		g.Serve("the relay's plain HTTP server", newHTTPServer(ls.tls.httpHandler), ls.plain)
	}
	return nil
}

// openStore opens the relay's store: the cluster's on NATS with --nats
// (and its router, and the line that says so), else the single relay's
// in --data. g closes it after the relay Server.
func (o *relayOptions) openStore(ctx context.Context, g *lifecycle.Group, logger *log.Logger, quota relay.Quota) (relay.Store, relay.Router, string, error) {
	if o.natsURLs == "" {
		db, err := openRelayStore(o.dataDir, boltrelay.Config{Quota: quota})
		if err != nil {
			return nil, nil, "", err
		}
		g.Close("the relay's store", db.Close)
		return db, nil, "", nil
	}
	c, err := o.openCluster(ctx, logger)
	if err != nil {
		return nil, nil, "", err
	}
	g.Close("the cluster's NATS connection", func() error { c.close(); return nil })
	line := fmt.Sprintf("  cluster     NATS %s as instance %s; queue in JetStream",
		c.nc.ConnectedUrlRedacted(), c.router.ID())
	return c.store, c.router, line, nil
}

// openRelayStore opens the single relay's store in dir (relay serve's,
// listen's built-in relay's); one a full disk cannot take says what to do.
func openRelayStore(dir string, cfg boltrelay.Config) (*boltrelay.Store, error) {
	db, err := boltrelay.Open(filepath.Join(dir, "relay.db"), cfg)
	if pending.NoRoom(err) {
		return nil, fmt.Errorf("%w; free some space in %s and start again", err, dir)
	}
	return db, err
}

// printStart prints where the relay serves.
func (o *relayOptions) printStart(ls *relayListeners, clusterLine string, quota relay.Quota) {
	scheme := "http"
	if ls.tls != nil {
		scheme = "https"
	}
	fmt.Fprintf(o.stdout, "devhook relay on %s://%s\n", scheme, ls.main.Addr())
	if ls.plain != nil {
		fmt.Fprintf(o.stdout, "  http        http://%s (ACME challenges; everything else redirects to HTTPS)\n", ls.plain.Addr())
	}
	if clusterLine != "" {
		fmt.Fprintln(o.stdout, clusterLine)
	}
	idle := o.channelIdle
	if idle == 0 {
		idle = relay.DefaultChannelIdle
	}
	fmt.Fprintf(o.stdout, "  queue       %s and %d deliveries a channel, %s in all, %s at most; channels unused for %s removed\n",
		sizeText(quota.ChannelBytes), quota.ChannelDeliveries, sizeText(quota.TotalBytes), quota.MaxAge, idle)
	if o.domain != "" {
		fmt.Fprintf(o.stdout, "  certificate %s from %s (obtained at the first connection, renewed by itself)\n", o.domain, o.acmeDirectory)
	}
}

// quota is the queue's quota from the flags (0: the default), checked.
func (o *relayOptions) quota() (relay.Quota, error) {
	if o.queueMaxBytes < 0 || o.queueChannelMaxBytes < 0 || o.queueChannelMaxDeliv < 0 || o.queueMaxAge < 0 || o.channelIdle < 0 {
		return relay.Quota{}, errors.New("--queue-max-bytes, --queue-channel-max-bytes, --queue-channel-max-deliveries, --queue-max-age and --channel-idle may not be negative")
	}
	q, err := relay.Quota{ChannelBytes: o.queueChannelMaxBytes, ChannelDeliveries: o.queueChannelMaxDeliv, TotalBytes: o.queueMaxBytes, MaxAge: o.queueMaxAge}.WithDefaults()
	switch {
	case err != nil:
		return q, fmt.Errorf("--queue-channel-max-bytes (%d) may not exceed --queue-max-bytes (%d)", q.ChannelBytes, q.TotalBytes)
	case o.maxBody > 0 && q.ChannelBytes < o.maxBody:
		return q, fmt.Errorf("--queue-channel-max-bytes (%d) is below --max-body (%d): the largest deliveries could never be queued; raise it or lower --max-body", q.ChannelBytes, o.maxBody)
	}
	return q, nil
}

// relayListeners are the relay's sockets: main for the relay itself (TLS
// is added over it when tls is set), plain for ACME challenges and
// redirects to HTTPS.
type relayListeners struct {
	main, plain net.Listener
	metrics     net.Listener // --metrics-addr's, or nil
	tls         *relayTLS
}

func (ls *relayListeners) close() {
	for _, ln := range []net.Listener{ls.main, ls.plain, ls.metrics} {
		if ln != nil {
			ln.Close()
		}
	}
}

func (o *relayOptions) listen(logger *log.Logger) (*relayListeners, error) {
	listenTCP := o.listenTCP
	if listenTCP == nil {
		listenTCP = net.Listen
	}
	if o.domain == "" && o.tlsCert == "" {
		ln, err := listenTCP("tcp", o.addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w (choose another with --addr)", o.addr, err)
		}
		return &relayListeners{main: relay.LimitListener(ln, o.maxConns)}, nil
	}
	// The plain HTTP port gets an eighth of --max-conns: it only answers
	// challenges and redirects.
	httpConns := 0
	if o.httpAddr != "" {
		httpConns = max(1, o.maxConns/8)
	}
	ln, err := listenTCP("tcp", o.httpsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (choose another with --https-addr; ports below 1024 need root or CAP_NET_BIND_SERVICE)", o.httpsAddr, err)
	}
	ls := &relayListeners{main: relay.LimitListener(ln, max(1, o.maxConns-httpConns))}
	if o.httpAddr != "" {
		pln, err := listenTCP("tcp", o.httpAddr)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen on %s: %w (choose another with --http-addr, or none with --http-addr \"\")", o.httpAddr, err)
		}
		ls.plain = relay.LimitListener(pln, httpConns)
	}
	client := o.acmeClient
	if client == nil {
		client = acmeHTTPClient()
	}
	if ls.tls, err = o.newRelayTLS(logger, client, ln.Addr().String()); err != nil {
		ls.close()
		return nil, err
	}
	return ls, nil
}

func (o *relayOptions) printSettings() {
	if o.publicURL != "" {
		fmt.Fprintf(o.stdout, "  public URL  %s\n", o.publicURL)
	}
	fmt.Fprintf(o.stdout, "  data        %s\n", o.dataDir)
}

// relayCluster is the NATS side of a clustered relay.
type relayCluster struct {
	nc     *nats.Conn
	store  *natsrelay.Store
	router *natsrelay.Router
}

func (c *relayCluster) close() {
	if c.router != nil {
		c.router.Close()
	}
	if err := c.nc.Drain(); err != nil {
		c.nc.Close()
	}
}

// openCluster connects to NATS and opens the cluster's store and router.
// The relay Server must be closed before it.
func (o *relayOptions) openCluster(ctx context.Context, logger *log.Logger) (*relayCluster, error) {
	// Reconnects forever, with a backoff (natsrelay.ReconnectOptions);
	// its loss, return and errors logged, a repeated error once
	// (natsrelay.ConnLog).
	opts := append(natsrelay.ReconnectOptions(),
		nats.Name("devhook relay"),
		// A network that silently drops everything is seen after two
		// unanswered pings (10-20 s) rather than nats.go's 4 minutes: from
		// then on deliveries that need NATS get 503 at once.
		nats.PingInterval(10*time.Second), nats.MaxPingsOutstanding(2),
	)
	opts = append(opts, (&natsrelay.ConnLog{Logf: logger.Printf}).Options()...)
	if o.natsCreds != "" {
		opts = append(opts, nats.UserCredentials(o.natsCreds))
	}
	nc, err := nats.Connect(o.natsURLs, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (check --nats, and that nats-server runs with JetStream: nats-server -js)", o.natsURLs, err)
	}
	c := &relayCluster{nc: nc}
	quota, err := o.quota()
	if err != nil {
		c.close()
		return nil, err
	}
	cfg := natsrelay.Config{
		Conn: nc, Prefix: o.natsPrefix, Replicas: o.natsReplicas, Quota: quota,
		MaxBody: o.maxBody, ResponseTimeout: o.timeout, Logf: logger.Printf,
	}
	if c.store, err = natsrelay.OpenStore(ctx, cfg); err != nil {
		c.close()
		return nil, err
	}
	if c.router, err = natsrelay.OpenRouter(ctx, cfg); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}
