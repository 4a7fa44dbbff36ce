package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/lifecycle"
	"github.com/devhook/devhook/pending"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/storage"
)

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
	network    relay.Network
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

// deliveryStore is what listen needs of its delivery store.
type deliveryStore interface {
	agent.Store
	inspector.Store
	Close() error
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

A delivery is recorded before it is forwarded. When it cannot be (a full disk), a
sender still waiting gets 503 and the delivery is not forwarded; deliveries that waited
in the relay's queue are held and go through once recording works again. Started on a
full disk, listen says so and does not connect until there is room: the relay keeps the
deliveries queued meanwhile, and the inspector shows the history.

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
	f := cmd.Flags()
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
	cmd.MarkFlagRequired("forward")
	return cmd
}

// checkService validates the service flags and returns the client, or nil
// when listen does not talk to the service.
func (o *listenOptions) checkService(ctx context.Context) (*cloud.Client, error) {
	switch {
	case o.register && o.webhook != "":
		return nil, errors.New("--register creates a webhook and --webhook uses an existing one: give one of them")
	case (o.register || o.webhook != "") && o.secret != "":
		return nil, errors.New("--secret is not needed with --register or --webhook: the webhook's secret is fetched from the service")
	case o.updateURL && o.webhook == "":
		return nil, errors.New("--update-url needs --webhook ID")
	case o.keep && !o.register:
		return nil, errors.New("--keep needs --register")
	case !o.register && o.webhook == "":
		return nil, nil
	}
	return o.cloud.client(ctx)
}

// connectService registers or takes the webhook once the channel is open,
// and gives its secret to the agent. It returns nil when there is nothing
// to do.
func (o *listenOptions) connectService(ctx context.Context, c *cloud.Client, publicURL string, ag *agent.Agent) (*registration, error) {
	var reg *registration
	var err error
	if o.register {
		reg, err = registerWebhook(ctx, c, o.dataDir, o.writes, publicURL, o.keep, time.Now())
	} else {
		reg, err = useWebhook(ctx, c, o.webhook, publicURL, o.updateURL)
	}
	if err != nil {
		return nil, err
	}
	ag.SetSecret(reg.secret)
	return reg, nil
}

func (o *listenOptions) run(ctx context.Context) error {
	defer listenGC(os.LookupEnv)()
	if err := ensureDir(o.dataDir); err != nil {
		return err
	}
	service, err := o.checkService(ctx)
	if err != nil {
		return err
	}
	if o.network, err = o.relayNetwork(); err != nil {
		return err
	}
	if err := o.checkPorts(ctx); err != nil {
		return err
	}
	// Stopped in the reverse order of adding: the announcement (the
	// webhook undone, listen.json removed), the agent, the inspector, the
	// built-in relay; then the stores close, and the output last.
	var g lifecycle.Group
	if err := o.wire(ctx, &g, service); err != nil {
		return g.Abandon(err)
	}
	return g.Run(ctx)
}

// listening is a listen wired and about to run: what its announcement
// needs.
type listening struct {
	o          *listenOptions
	out        *printer
	ag         *agent.Agent
	service    *cloud.Client // nil: listen does not talk to the service
	creds      relay.Credentials
	relay      listenRelay
	inspectURL string

	connected chan agent.Connection
	// The agent says it cannot record (a full disk) before it connects:
	// listen is ready all the same, its history readable.
	cannotRecord chan struct{}
	readyFirst   atomic.Bool // ready was printed before the first connection
}

// wire opens listen's stores and makes its parts, adding each to g; none
// runs before g.Run, so that none sees another half made.
func (o *listenOptions) wire(ctx context.Context, g *lifecycle.Group, service *cloud.Client) error {
	lines := newLineWriter(o.stdout, lineGap)
	g.Close("the output", lines.Close) // last: after every line is printed
	l := &listening{o: o, service: service, connected: make(chan agent.Connection, 1), cannotRecord: make(chan struct{}, 1)}
	l.out = &printer{w: lines, json: o.json, retryFor: o.retryFor, holdUntilReady: true,
		color: useColor(o.stdout, o.json, os.Getenv, isTerminal)}
	g.Close("the output held for the ready line", func() error { l.out.flush(); return nil }) // of a listen never ready
	o.writes = pending.New(pending.Config{Logf: l.out.logf(o.stderr)})
	g.Go("the writes waiting for room", o.writes.Run, nil) // stopped after the announcement's last write

	db, err := o.openDeliveries(l.out)
	if err != nil {
		return err
	}
	g.Close("the delivery store", db.Close)
	if l.relay, err = o.startRelay(g); err != nil {
		return err
	}
	if l.creds, err = o.channel(ctx, l.relay.url, l.relay.key, l.relay.local, l.relay.store); err != nil {
		return err
	}
	if service != nil && (o.register || o.updateURL) {
		if err := refuseLocalOnly(service, l.creds.PublicURL, l.relay.localOnly); err != nil {
			return err
		}
	}
	var insp *inspector.Server // set before any part runs: the agent publishes to it
	if l.ag, err = o.newAgent(l, db, func(c devhook.Change) {
		if insp != nil {
			insp.Publish(c)
		}
	}); err != nil {
		return err
	}
	if o.inspect != "off" {
		insp, l.inspectURL, err = o.startInspector(g, db, l.ag, inspector.Settings{
			Forward: l.ag.Targets(), Routes: l.ag.Routes(), RelayURL: l.relay.url, PublicURL: l.creds.PublicURL, Channel: l.creds.Channel,
			SecretKnown: l.ag.SecretKnown, Verify: o.verify, DataDir: absDir(o.dataDir),
		})
		if err != nil {
			return err
		}
	}
	g.Go("the agent", func(ctx context.Context) error { return o.agentStopped(l.ag.Run(ctx), l.creds) }, nil)
	g.Go("listen", func(actx context.Context) error { return l.announce(actx, ctx) }, nil)
	return nil
}

// openDeliveries opens the delivery store. What it finds wrong (a damaged
// journal set aside, a full disk) is printed like the agent's own
// messages.
func (o *listenOptions) openDeliveries(out *printer) (deliveryStore, error) {
	open := o.openStore
	if open == nil {
		open = func(path string, cfg storage.Config) (deliveryStore, error) { return storage.Open(path, cfg) }
	}
	db, err := open(filepath.Join(o.dataDir, "deliveries.db"), storage.Config{Logf: out.logf(o.stderr), NoSpace: o.noSpace})
	if errors.Is(err, storage.ErrLocked) {
		return nil, o.dataInUse()
	}
	return db, err
}

// newAgent makes listen's agent, which publishes its changes with publish.
func (o *listenOptions) newAgent(l *listening, db deliveryStore, publish func(devhook.Change)) (*agent.Agent, error) {
	fw, err := o.forwardSettings(l.out.logf(o.stderr))
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Config{
		Header: fw.header, TLS: fw.tls,
		RelayURL: l.relay.url, RelayFallbacks: l.relay.fallbacks, RelayNetwork: o.network, Credentials: l.creds, Forward: o.forward, Routes: fw.routes, Store: db,
		Secret: o.secret, Verify: o.verify, Skew: o.skew, ForwardTimeout: o.timeout,
		RetryFor: fw.retryFor,
		OnChange: func(c devhook.Change) {
			if c.Kind == devhook.ChangeHealth && c.Health != nil && c.Health.StorageError != "" {
				select {
				case l.cannotRecord <- struct{}{}:
				default:
				}
			}
			publish(c)
		},
		OnResult: l.out.result,
		OnConnect: func(c agent.Connection) {
			if c.Reconnect || l.readyFirst.Load() {
				l.out.connection(c, o.stderr)
				return
			}
			select {
			case l.connected <- c:
			default:
			}
		},
		Logf: l.out.logf(o.stderr),
	})
}

// announce waits for the agent's first connection (or its word that it
// cannot record), takes the service's webhook, writes listen.json and
// prints the ready line; then it waits for ctx, and undoes the webhook
// and removes listen.json before the agent stops. parent is the
// command's context: its end (Ctrl-C) is said on the terminal.
func (l *listening) announce(ctx, parent context.Context) error {
	o, out := l.o, l.out
	if !o.json {
		fmt.Fprintf(o.stderr, "connecting to %s ...\n", l.relay.url)
	}
	select {
	case <-ctx.Done():
		return nil
	case c := <-l.connected:
		out.connection(c, o.stderr)
	case <-l.cannotRecord:
		l.readyFirst.Store(true)
		select { // connected meanwhile
		case c := <-l.connected:
			out.connection(c, o.stderr)
		default:
		}
	}
	var webhook, webhookNote, secret string
	if l.service != nil {
		reg, err := o.connectService(ctx, l.service, l.creds.PublicURL, l.ag)
		if err != nil {
			return err
		}
		webhook, webhookNote, secret = reg.id, reg.note(l.creds.PublicURL, o.dataDir), reg.secret
		out.setWebhook(webhook)
		defer func() { // while the agent still runs
			if err := reg.undo(context.WithoutCancel(ctx)); err != nil {
				out.logf(o.stderr)("%v", err)
			} else if msg := reg.undone(); msg != "" {
				out.note(msg)
			}
		}()
	}
	// Where the other commands find this listen: written before the
	// ready line, so that a script that waits for it finds the file
	// (on a full disk, once there is room).
	remove, err := l.writeRunning(running.Listen{PID: os.Getpid(), Data: absDir(o.dataDir),
		InspectorURL: l.inspectURL, PublicURL: l.creds.PublicURL, RelayURL: l.relay.url, Channel: l.creds.Channel,
		Webhook: webhook, StartedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	defer remove()
	out.ready(readyInfo{PublicURL: l.creds.PublicURL, InspectorURL: l.inspectURL, Channel: l.creds.Channel,
		Forward: l.ag.Targets(), Routes: l.ag.Routes(), Local: l.relay.localOnly, SecretKnown: l.ag.SecretKnown(), Verify: o.verify, Data: o.dataDir,
		Webhook: webhook, Secret: secret, webhookNote: webhookNote})
	<-ctx.Done()
	if parent.Err() != nil {
		out.stopping(l.ag.InFlight(), o.stderr)
	}
	return nil
}

// writeRunning writes listen.json, now or once there is room, and returns
// what removes it: at once, or, while it still waits, by writing nothing.
func (l *listening) writeRunning(me running.Listen) (remove func(), err error) {
	dir := l.o.dataDir
	var written func() error // set under the writes' lock
	err = l.o.writes.Do(running.Path(dir), running.FileName, func() (err error) {
		written, err = running.Write(dir, me)
		return err
	})
	return func() {
		l.o.writes.Do(running.Path(dir), running.FileName, func() error {
			if written == nil {
				return nil
			}
			return written()
		})
	}, err
}

// dataInUse is the short error for a data directory whose store another
// process holds: the listen that says so in its listen.json, named.
func (o *listenOptions) dataInUse() error {
	if l, err := running.Read(o.dataDir); err == nil {
		return fmt.Errorf("devhook listen (pid %d, %s) already records in %s (%w): stop it, or give this one another --data", l.PID, l.PublicURL, o.dataDir, storage.ErrLocked)
	}
	return fmt.Errorf("another devhook uses %s (%w): stop it, or give this listen another --data", o.dataDir, storage.ErrLocked)
}

// agentStopped says why the agent stopped on its own.
func (o *listenOptions) agentStopped(err error, creds relay.Credentials) error {
	switch {
	case errors.Is(err, relay.ErrRejected):
		return fmt.Errorf("%w; the channel in %s is no longer valid: start again to open a new one", err, o.dataDir)
	case errors.Is(err, relay.ErrReplaced):
		return fmt.Errorf("another devhook listen took over channel %s (the same channels.json in two --data directories?); this one stops. Give each devhook listen its own --data directory, or stop the other one", creds.Channel)
	}
	return err
}

// listenRelay is the relay listen connects to.
type listenRelay struct {
	url       string
	fallbacks []string // other instances of the same relay cluster
	key       string   // the relay's name in channels.json
	local     *relay.Server
	store     *boltrelay.Store // the built-in relay's
	localOnly bool             // the built-in relay, without --public-url
}

// startRelay returns --relay's first URL and the others, or, without
// --relay, starts a relay inside this process on --relay-addr.
func (o *listenOptions) startRelay(g *lifecycle.Group) (listenRelay, error) {
	var rl listenRelay
	var err error
	if rl.url, rl.fallbacks, err = relayURLs(o.relayURL); err != nil {
		return rl, err
	}
	rl.key = rl.url
	public, err := o.builtinPublic()
	if err != nil || rl.url != "" {
		return rl, err
	}
	rdb, err := boltrelay.Open(filepath.Join(o.dataDir, "relay.db"), boltrelay.Config{})
	if err != nil {
		return rl, err
	}
	g.Close("the built-in relay's store", rdb.Close)
	ln, err := net.Listen("tcp", o.relayAddr)
	if err != nil {
		return rl, fmt.Errorf("start the built-in relay on %s: %w (choose another with --relay-addr)", o.relayAddr, err)
	}
	cfg := relay.Config{Store: rdb, PublicURL: "http://" + ln.Addr().String()}
	if public != "" {
		// Reachable by anyone through the tunnel: deliveries to this
		// listen's channel, and nothing else of use.
		cfg.PublicURL, cfg.PrivateMetrics = public, true
		if cfg.OpenToken, err = newOpenToken(); err != nil {
			ln.Close()
			return rl, err
		}
	}
	local, err := relay.NewServer(cfg)
	if err != nil {
		ln.Close()
		return rl, err
	}
	g.Close("the built-in relay", local.Close)
	serveRelay(g, "the built-in relay", newHTTPServer(local), local, ln, nil, 5*time.Second)
	rl.url, rl.key, rl.local, rl.store = "http://"+ln.Addr().String(), "local", local, rdb
	rl.localOnly = public == ""
	return rl, nil
}

// startInspector serves the inspector on --inspect and returns its URL.
func (o *listenOptions) startInspector(g *lifecycle.Group, db deliveryStore, ag *agent.Agent, settings inspector.Settings) (*inspector.Server, string, error) {
	var allowed []string
	if host, _, err := net.SplitHostPort(o.inspect); err == nil && host != "" && !inspector.IsLoopbackHost(host) {
		// Bound beyond loopback on purpose: accept that name in Host too.
		allowed = append(allowed, host)
	}
	insp, err := inspector.New(inspector.Config{
		Store: db, Replayer: ag, AllowedHosts: allowed, Health: ag.Health, Settings: settings, Deleted: ag.Forget,
	})
	if err != nil {
		return nil, "", err
	}
	g.Close("the inspector", insp.Close)
	ln, err := net.Listen("tcp", o.inspect)
	if err != nil {
		return nil, "", fmt.Errorf("start the inspector on %s: %w (choose another with --inspect, or --inspect off)", o.inspect, err)
	}
	isrv := newHTTPServer(insp)
	// Live streams never end on their own: end them so Shutdown can finish.
	isrv.RegisterOnShutdown(func() { insp.Close() })
	g.Serve("the inspector", isrv, ln)
	return insp, "http://" + ln.Addr().String(), nil
}
