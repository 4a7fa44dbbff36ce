package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/lifecycle"
	"github.com/devhook/devhook/pending"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/storage"
)

// deliveryStore is what listen needs of its delivery store.
type deliveryStore interface {
	agent.Store
	inspector.Store
	Close() error
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
	defer listenProcs(os.LookupEnv)()
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
	return stopReason(ctx, g.Run(ctx))
}

// listening is a listen wired and about to run: what its announcement
// needs.
type listening struct {
	o          *listenOptions
	out        *printer
	ag         *agent.Agent
	service    *cloud.Client // nil: listen does not talk to the service
	creds      wire.Credentials
	relay      listenRelay
	inspectURL string
	// relayUnreached: the relay did not answer the check of the saved
	// channel at start (it may be down); the ready block of a listen not
	// connected yet says so rather than that it queues.
	relayUnreached error

	// The agent's first connection, or its word that it cannot record (a
	// full disk) before it connects: listen is ready all the same, its
	// history readable, and its ready line says it is not connected yet.
	connected    chan struct{}
	cannotRecord chan struct{}
	mu           sync.Mutex // orders the ready line and the first connection's line
	everUp       bool       // the agent has connected
	waitingSince time.Time  // the ready line said "not connected yet", at this time
}

// onConnect says that the agent connected: as usual, or, after a ready
// line that said listen was not connected yet, that it now is.
func (l *listening) onConnect(c agent.Connection) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.everUp && !l.waitingSince.IsZero() {
		l.out.connectedAfterWait(c, time.Since(l.waitingSince), l.o.stderr)
	} else {
		l.out.connection(c, l.o.stderr)
	}
	l.everUp = true
	select {
	case l.connected <- struct{}{}:
	default:
	}
}

// wire opens listen's stores and makes its parts, adding each to g, each
// after what it uses; the servers, the agent's connection and the
// announcement wait for g.Run (docs/ARCHITECTURE.md says which
// constructors start goroutines of their own).
func (o *listenOptions) wire(ctx context.Context, g *lifecycle.Group, service *cloud.Client) error {
	lines := newLineWriter(o.stdout, lineGap)
	g.Close("the output", lines.Close) // last: after every line is printed
	l := &listening{o: o, service: service, connected: make(chan struct{}, 1), cannotRecord: make(chan struct{}, 1)}
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
	if l.creds, l.relayUnreached, err = o.channel(ctx, l.relay.url, l.relay.key, l.relay.local, l.relay.store); err != nil {
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
	if !o.json { // before the agent runs: before its "connected"
		fmt.Fprintf(o.stderr, "connecting to %s ...\n", l.relay.url)
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
		OnResult:  l.out.result,
		OnConnect: l.onConnect,
		Logf:      l.out.logf(o.stderr),
	})
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
func (o *listenOptions) agentStopped(err error, creds wire.Credentials) error {
	switch {
	case errors.Is(err, relayclient.ErrRejected):
		return fmt.Errorf("%w; the channel in %s is no longer valid: start again to open a new one", err, o.dataDir)
	case errors.Is(err, relayclient.ErrReplaced):
		return fmt.Errorf("another devhook listen took over channel %s (the same channels.json in two --data directories?); this one stops. Give each devhook listen its own --data directory, or stop the other one", creds.Channel)
	}
	return err
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
