package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

type listenOptions struct {
	forward    []string
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

	// The service: --register creates a webhook for this listen, --webhook
	// uses an existing one.
	register  bool
	webhook   string
	updateURL bool
	keep      bool
	cloud     cloudFlags

	stdout, stderr io.Writer
}

func newListenCmd() *cobra.Command {
	o := &listenOptions{}
	cmd := &cobra.Command{
		Use:   "listen --forward URL",
		Short: "Receive deliveries at a public URL, verify, record and forward them to a local receiver",
		Long: `Listen opens a channel on a relay and forwards every delivery sent to its public URL
to the local receiver, byte-exact, passing the receiver's answer back to the sender.
Each delivery's service-signature is checked and everything is recorded under --data.

Without --relay, a relay runs inside this process on loopback: its URL is reachable
from this machine only (useful with 'devhook send' and 'devhook emulate').

A delivery is recorded before it is forwarded. When it cannot be (a full disk), a
sender still waiting gets 503 and the delivery is not forwarded; deliveries that waited
in the relay's queue are held and go through once recording works again.

A delivery that waited in the relay's queue (its sender got 202) and that the receiver
does not take (no answer, 408, 429 or 5xx) is retried with backoff for --retry-for,
each retry recorded as an attempt; then devhook gives up on it and says so.

--register creates a webhook at the service (--endpoint, --api-key, as for
'devhook webhooks') pointing at the public URL, verifies every delivery with its
secret, and deletes it on exit unless --keep. A webhook a killed listen left is
taken over by the next start with the same --data. --webhook ID uses an existing
webhook's secret instead, and with --update-url points it here until exit.`,
		Example: `  devhook listen --forward localhost:8080 --secret whsec_...
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
	f.StringVar(&o.relayURL, "relay", "", "relay URL (default: a relay inside this process, local only); several, comma-separated, for instances of one relay cluster: the next is tried when one cannot be reached")
	f.StringVar(&o.relayToken, "relay-token", "", "token the relay requires to open a channel (or DEVHOOK_RELAY_TOKEN)")
	f.StringVar(&o.relayAddr, "relay-addr", "127.0.0.1:4041", "address of the built-in relay (without --relay)")
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
		reg, err = registerWebhook(ctx, c, o.dataDir, publicURL, o.keep, time.Now())
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
	if err := ensureDir(o.dataDir); err != nil {
		return err
	}
	service, err := o.checkService(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Shutdown order: stop everything that runs (ctx), wait for it, then
	// close what it used, last opened first.
	var waits []func() error
	var closers []func() error
	defer func() {
		cancel()
		for _, w := range waits {
			w()
		}
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()

	lines := newLineWriter(o.stdout, lineGap)
	closers = append(closers, lines.Close) // runs last: after every line is printed
	out := &printer{w: lines, json: o.json, retryFor: o.retryFor, holdUntilReady: true,
		color: useColor(o.stdout, o.json, os.Getenv, isTerminal)}
	closers = append(closers, func() error { out.flush(); return nil }) // lines of a listen never ready

	// What the store finds wrong (a damaged journal set aside, a full
	// disk) is printed like the agent's own messages.
	db, err := storage.Open(filepath.Join(o.dataDir, "deliveries.db"), storage.Config{Logf: out.logf(o.stderr)})
	if err != nil {
		return err
	}
	closers = append(closers, db.Close)

	// The relay: remote, or one inside this process.
	var relayURL string
	var fallbacks []string // other instances of the same relay cluster
	for _, u := range strings.Split(o.relayURL, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u == "" {
			continue
		}
		if relayURL == "" {
			relayURL = u
		} else {
			fallbacks = append(fallbacks, u)
		}
	}
	relayKey := relayURL
	var local *relay.Server
	var rdb *storage.RelayStore
	if relayURL == "" {
		rdb, err = storage.OpenRelayStore(filepath.Join(o.dataDir, "relay.db"), storage.RelayStoreConfig{})
		if err != nil {
			return err
		}
		closers = append(closers, rdb.Close)
		ln, err := net.Listen("tcp", o.relayAddr)
		if err != nil {
			return fmt.Errorf("start the built-in relay on %s: %w (choose another with --relay-addr)", o.relayAddr, err)
		}
		local, err = relay.NewServer(relay.Config{Store: rdb, PublicURL: "http://" + ln.Addr().String()})
		if err != nil {
			ln.Close()
			return err
		}
		closers = append(closers, local.Close)
		waits = append(waits, serveRelay(ctx, newHTTPServer(local), local, ln, nil, 5*time.Second))
		relayURL, relayKey = "http://"+ln.Addr().String(), "local"
	}

	creds, err := o.channel(ctx, relayURL, relayKey, local, rdb)
	if err != nil {
		return err
	}
	if service != nil && (o.register || o.updateURL) {
		if err := refuseLocalOnly(service, creds.PublicURL, local != nil); err != nil {
			return err
		}
	}

	var insp *inspector.Server
	var ag *agent.Agent
	connected := make(chan agent.Connection, 1)
	retryFor := o.retryFor
	if retryFor <= 0 {
		retryFor = -1 // the flag's 0 is "off"; the agent's is "default"
	}
	extra, err := parseHeaders(o.headers)
	if err != nil {
		return err
	}
	tlsConfig, err := forwardTLS(o.forwardCA, o.insecure)
	if err != nil {
		return err
	}
	if o.insecure {
		out.logf(o.stderr)("--forward-insecure: the certificates of https receivers are not checked")
	}
	ag, err = agent.New(agent.Config{
		Header: extra, TLS: tlsConfig,
		RelayURL: relayURL, RelayFallbacks: fallbacks, Credentials: creds, Forward: o.forward, Store: db,
		Secret: o.secret, Verify: o.verify, Skew: o.skew, ForwardTimeout: o.timeout,
		RetryFor: retryFor,
		OnChange: func(c devhook.Change) {
			if insp != nil {
				insp.Publish(c)
			}
		},
		OnResult: out.result,
		OnConnect: func(c agent.Connection) {
			if c.Reconnect {
				out.connection(c, o.stderr)
				return
			}
			select {
			case connected <- c:
			default:
			}
		},
		Logf: out.logf(o.stderr),
	})
	if err != nil {
		return err
	}

	inspectURL := ""
	if o.inspect != "off" {
		var allowed []string
		if host, _, err := net.SplitHostPort(o.inspect); err == nil && host != "" && !inspector.IsLoopbackHost(host) {
			// Bound beyond loopback on purpose: accept that name in Host too.
			allowed = append(allowed, host)
		}
		insp, err = inspector.New(inspector.Config{
			Store: db, Replayer: ag, AllowedHosts: allowed, Health: ag.Health,
			Settings: inspector.Settings{
				Forward: ag.Targets(), RelayURL: relayURL, PublicURL: creds.PublicURL, Channel: creds.Channel,
				SecretKnown: ag.SecretKnown, Verify: o.verify, DataDir: absDir(o.dataDir),
			},
		})
		if err != nil {
			return err
		}
		closers = append(closers, insp.Close)
		ln, err := net.Listen("tcp", o.inspect)
		if err != nil {
			return fmt.Errorf("start the inspector on %s: %w (choose another with --inspect, or --inspect off)", o.inspect, err)
		}
		inspectURL = "http://" + ln.Addr().String()
		isrv := newHTTPServer(insp)
		// Live streams never end on their own: end them so Shutdown can finish.
		isrv.RegisterOnShutdown(func() { insp.Close() })
		waits = append(waits, serve(ctx, isrv, ln))
	}

	agentErr := make(chan error, 1)
	go func() { agentErr <- ag.Run(ctx) }()
	waits = append(waits, func() error { return <-agentErr })

	if !o.json {
		fmt.Fprintf(o.stderr, "connecting to %s ...\n", relayURL)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-agentErr:
		agentErr <- err
		return o.agentStopped(err, creds)
	case c := <-connected:
		out.connection(c, o.stderr)
	}
	var webhook, webhookNote string
	if service != nil {
		reg, err := o.connectService(ctx, service, creds.PublicURL, ag)
		if err != nil {
			return err
		}
		webhook = reg.id
		switch {
		case reg.reused:
			webhookNote = "registered webhook " + reg.id + " → " + creds.PublicURL + " (taken over from an earlier devhook listen of " + o.dataDir + ")"
		case reg.created:
			webhookNote = "registered webhook " + reg.id + " → " + creds.PublicURL
		case reg.restoreURL != "":
			webhookNote = "using webhook " + reg.id + " → " + creds.PublicURL + " (was " + reg.restoreURL + "; put back on exit)"
		default:
			webhookNote = "using the secret of webhook " + reg.id
		}
		// Undone before the agent stops, while ctx is cancelled.
		defer func() {
			if err := reg.undo(context.WithoutCancel(ctx)); err != nil {
				out.logf(o.stderr)("%v", err)
			} else if msg := reg.undone(); msg != "" {
				out.note(msg)
			}
		}()
	}
	out.ready(readyInfo{PublicURL: creds.PublicURL, InspectorURL: inspectURL, Channel: creds.Channel,
		Forward: ag.Targets(), Local: local != nil, SecretKnown: ag.SecretKnown(), Verify: o.verify, Data: o.dataDir,
		Webhook: webhook, webhookNote: webhookNote})

	select {
	case <-ctx.Done():
		out.stopping(ag.InFlight(), o.stderr)
		return nil
	case err := <-agentErr:
		agentErr <- err
		return o.agentStopped(err, creds)
	}
}

// connection says that the agent is connected: "connected" after
// "connecting to …", and after an outage "reconnected after 12s, 3 queued
// deliveries follow" ({"event":"reconnected",…} with --json; the first
// connection's line in --json is the ready line).
func (p *printer) connection(c agent.Connection, stderr io.Writer) {
	if p.json {
		if c.Reconnect {
			p.emit(struct {
				Event  string `json:"event"`
				DownMS int64  `json:"down_ms"`
				Queued int    `json:"queued"`
			}{"reconnected", c.Down.Milliseconds(), c.Queued})
		}
		return
	}
	msg := "connected"
	if c.Reconnect {
		msg = "reconnected after " + agent.FormatDuration(c.Down.Round(time.Second))
	}
	switch {
	case c.Queued == 1:
		msg += ", 1 queued delivery follows"
	case c.Queued > 1:
		msg += fmt.Sprintf(", %d queued deliveries follow", c.Queued)
	}
	p.mu.Lock()
	fmt.Fprintln(stderr, msg)
	p.mu.Unlock()
}

// stopping says that listen stops and what it waits for: the deliveries
// under way get agent.ShutdownGrace to finish; a second Ctrl-C quits at
// once (main's signalContext).
func (p *printer) stopping(inFlight int, stderr io.Writer) {
	if p.json {
		p.emit(struct {
			Event    string `json:"event"`
			InFlight int    `json:"in_flight"`
		}{"stopping", inFlight})
		return
	}
	msg := "stopping"
	if inFlight > 0 {
		what := "deliveries"
		if inFlight == 1 {
			what = "delivery"
		}
		msg = fmt.Sprintf("stopping, waiting up to %d s for %d %s in flight (Ctrl-C again to quit now)", int(agent.ShutdownGrace/time.Second), inFlight, what)
	}
	p.mu.Lock()
	fmt.Fprintln(stderr, msg)
	p.mu.Unlock()
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

// channel returns the saved channel for this relay, or opens a new one.
func (o *listenOptions) channel(ctx context.Context, relayURL, relayKey string, local *relay.Server, rdb *storage.RelayStore) (relay.Credentials, error) {
	saved := savedChannels{path: filepath.Join(o.dataDir, "channels.json")}
	cr, ok, err := saved.get(relayKey)
	if err != nil {
		return cr, err
	}
	if ok && local != nil {
		if _, err := rdb.Channel(cr.Channel); err == nil {
			cr.PublicURL = local.PublicURL(nil, cr.Channel) // the port may differ from last time
			return cr, nil
		}
	} else if ok && o.usable(ctx, relayURL, cr) {
		return cr, nil
	}
	if local != nil {
		cr, err = local.OpenChannel(nil)
	} else {
		client := &http.Client{Timeout: 15 * time.Second}
		cr, err = relay.Open(ctx, client, relayURL, o.relayToken)
	}
	switch {
	case errors.Is(err, relay.ErrOpenRefused) && o.relayToken == "":
		return cr, fmt.Errorf("%w; this relay needs its open token: pass it with --relay-token (or DEVHOOK_RELAY_TOKEN)", err)
	case errors.Is(err, relay.ErrOpenRefused):
		return cr, fmt.Errorf("%w; check the token given with --relay-token (or DEVHOOK_RELAY_TOKEN)", err)
	case err != nil:
		return cr, err
	}
	if ok {
		fmt.Fprintf(o.stderr, "the saved channel is gone from the relay; opened a new one: the public URL changed\n")
	}
	return cr, saved.put(relayKey, cr)
}

// usable reports whether the relay still knows cr: a relay that rejects
// it means no; any other outcome (relay down too) keeps the channel. It
// does not connect: that would take the channel over from a running agent
// and draw the queue to a connection about to close.
func (o *listenOptions) usable(ctx context.Context, relayURL string, cr relay.Credentials) bool {
	err := relay.Check(ctx, &http.Client{Timeout: 5 * time.Second}, relayURL, cr)
	return !errors.Is(err, relay.ErrRejected)
}

type readyInfo struct {
	PublicURL    string   `json:"public_url"`
	InspectorURL string   `json:"inspector_url"`
	Channel      string   `json:"channel"`
	Forward      []string `json:"forward"`
	Local        bool     `json:"local_only"`
	SecretKnown  bool     `json:"secret_known"`
	Verify       string   `json:"verify"`
	Data         string   `json:"data"`
	Webhook      string   `json:"webhook,omitempty"`
	webhookNote  string   // the human line about the webhook
}

// printer writes listen's output: human lines or one JSON object a line.
// Each goes to w in one Write, without a lock held: w must take whole
// lines from many goroutines (listen gives it a lineWriter).
type printer struct {
	mu   sync.Mutex // for logf's writer
	w    io.Writer
	json bool
	// color: verdicts and statuses in colour (useColor decides).
	color bool
	loc   *time.Location // nil: local time
	// retryFor is --retry-for, for the note on an owed delivery.
	retryFor time.Duration

	// The ready line comes first: deliveries and retries may be handled
	// between the agent's connection and the ready line, and with
	// holdUntilReady their lines wait in early until it is written.
	holdUntilReady bool
	isReady        atomic.Bool
	gate           sync.Mutex
	early          [][]byte
}

// write sends one or more whole lines to w, or keeps them until the ready
// line is out.
func (p *printer) write(b []byte) {
	if p.holdUntilReady && !p.isReady.Load() {
		p.gate.Lock()
		if !p.isReady.Load() {
			p.early = append(p.early, b)
			p.gate.Unlock()
			return
		}
		p.gate.Unlock()
	}
	p.w.Write(b)
}

// writeReady writes the ready line b, then the lines that waited for it.
func (p *printer) writeReady(b []byte) {
	p.gate.Lock()
	defer p.gate.Unlock()
	p.w.Write(b)
	p.flushLocked()
}

// flush writes the lines that wait for a ready line that will not come.
func (p *printer) flush() {
	p.gate.Lock()
	defer p.gate.Unlock()
	p.flushLocked()
}

func (p *printer) flushLocked() {
	for _, l := range p.early {
		p.w.Write(l)
	}
	p.early = nil
	p.isReady.Store(true)
}

func (p *printer) emit(v any) { p.write(jsonLine(v)) }

// jsonLine is v as one line of JSON.
func jsonLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"event": "log", "message": "devhook: cannot print an event: " + err.Error()})
	}
	return append(b, '\n')
}

func (p *printer) ready(r readyInfo) {
	if p.json {
		p.writeReady(jsonLine(struct {
			Event string `json:"event"`
			readyInfo
		}{"ready", r}))
		return
	}
	var b bytes.Buffer
	if r.webhookNote != "" {
		fmt.Fprintf(&b, "%s\n", r.webhookNote)
	}
	fmt.Fprintf(&b, "devhook is listening\n")
	fmt.Fprintf(&b, "  public URL  %s\n", r.PublicURL)
	if r.Local {
		fmt.Fprintf(&b, "              (built-in relay: reachable from this machine only; use --relay for a public one)\n")
	}
	fmt.Fprintf(&b, "  forward to  %s\n", strings.Join(r.Forward, ", "))
	if r.InspectorURL != "" {
		fmt.Fprintf(&b, "  inspector   %s\n", r.InspectorURL)
	}
	secret := "no secret: signatures cannot be checked (pass --secret, or --register)"
	if r.SecretKnown {
		secret = "secret known, verify=" + r.Verify
	}
	fmt.Fprintf(&b, "  signature   %s\n", secret)
	fmt.Fprintf(&b, "  recording   %s\n\n", r.Data)
	p.writeReady(b.Bytes())
}

func (p *printer) result(r agent.Result) {
	switch {
	case r.Replay:
		p.replayed(r)
		return
	case r.GaveUp:
		p.gaveUp(r)
		return
	case r.Retry > 0:
		p.retried(r)
		return
	}
	d := r.Delivery
	var dur devhook.Duration
	status := r.Status
	if r.Attempt != nil {
		dur = r.Attempt.Duration
	}
	if p.json {
		l := deliveryLine{"delivery", d.ID, d.Method, d.Path, d.Event.RunID, d.Event.StatusV2, d.Verdict.Result, status, receiverStatus(r.Attempt),
			float64(dur) / float64(time.Millisecond), d.Queued, r.Cut, r.Duplicate, r.Owed && p.retryFor > 0, cmp.Or(r.Error, attemptError(r.Attempt)),
			check.Hint(d, r.Attempt), failedCopies(r.Copies)}
		p.write(l.appendJSON(make([]byte, 0, 256)))
		return
	}
	p.write(p.humanLine(r))
}

// The columns of a delivery line.
const (
	pathWidth = 24
	runWidth  = 28
)

// humanLine is the terminal line of a delivery handled from the relay,
// with a line more for each copy target that did not take it.
//
// The arrow shows what the receiver answered, as the record keeps it and
// the filters find it: its status, or "none" when it gave no status (no
// answer, or not forwarded). When the sender got something else, the line
// says so in brackets: "→ none (sender got 502)".
func (p *printer) humanLine(r agent.Result) []byte {
	d := r.Delivery
	var b bytes.Buffer
	b.WriteString(d.ReceivedAt.In(p.location()).Format("15:04:05.000"))
	fmt.Fprintf(&b, "  %-6s %-*s %-*s ", d.Method, pathWidth, clip(pathQuery(d.Path, d.RawQuery), pathWidth), runWidth, runColumn(d.Event, runWidth))
	b.WriteString(p.paint(verdictColor(d.Verdict.Result), fmt.Sprintf("%-18s", d.Verdict.Result)))
	received := 0
	if r.Attempt != nil {
		received = r.Attempt.Status
	}
	b.WriteString(" → ")
	b.WriteString(p.paint(statusColor(received), statusWord(received)))
	switch {
	case r.Cut && !d.Queued:
		b.WriteString(" (sender got 202: queued by the relay)")
	case !d.Queued && r.Status != received && r.Status != 0:
		fmt.Fprintf(&b, " (sender got %d)", r.Status)
	}
	took := "-"
	if r.Attempt != nil {
		took = formatDuration(time.Duration(r.Attempt.Duration))
	}
	b.WriteString("  " + took)
	switch {
	case r.Rejected:
		b.WriteString("  (not forwarded: the signature check failed)")
	case r.Error != "":
		b.WriteString("  " + r.Error)
	}
	if d.Queued {
		b.WriteString("  (was queued)")
	}
	if r.Duplicate {
		b.WriteString("  (already delivered)")
	}
	if e := attemptError(r.Attempt); e != "" {
		b.WriteString("  " + e)
	}
	switch {
	case r.Cut:
		b.WriteString("  (devhook stopped before the relay had the answer: the relay keeps the delivery and sends it again on the next start)")
	case r.Owed && p.retryFor > 0:
		b.WriteString("  (owed: retried for up to " + agent.FormatDuration(p.retryFor) + ")")
	}
	if h := check.Hint(d, r.Attempt); h != "" {
		b.WriteString("\n              hint: " + h)
	}
	b.WriteByte('\n')
	for _, c := range r.Copies {
		if copyTaken(c) {
			continue
		}
		fmt.Fprintf(&b, "              copy to %s → %s  %s", c.Target, p.paint(statusColor(c.Status), statusWord(c.Status)), formatDuration(time.Duration(c.Duration)))
		if c.Error != "" {
			b.WriteString("  " + c.Error)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// statusWord is a receiver's status as the terminal, the filters and the
// inspector name it: the number, or "none" when it gave none.
func statusWord(status int) string {
	if status == 0 {
		return "none"
	}
	return strconv.Itoa(status)
}

// runColumn is the run id and its status_v2, clipped to n by cutting the
// run id: status_v2 always shows.
func runColumn(ev devhook.Event, n int) string {
	if ev.RunID == "" {
		return "-"
	}
	if ev.StatusV2 == "" {
		return clip(ev.RunID, n)
	}
	keep := n - 1 - len(ev.StatusV2)
	if keep < 4 {
		return clip(ev.RunID+" "+ev.StatusV2, n)
	}
	return clip(ev.RunID, keep) + " " + ev.StatusV2
}

// pathQuery is a path with its query string, as the sender posted it.
func pathQuery(path, rawQuery string) string {
	if rawQuery == "" {
		return path
	}
	return path + "?" + rawQuery
}

// formatDuration is the one format of durations in the terminal:
// milliseconds with one decimal under a second, seconds with two above.
func formatDuration(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
}

// retried prints a retry that delivered an owed delivery.
func (p *printer) retried(r agent.Result) {
	d, at := r.Delivery, r.Attempt
	after := at.StartedAt.Sub(r.Since)
	if p.json {
		p.emit(struct {
			Event    string  `json:"event"`
			ID       string  `json:"id"`
			Method   string  `json:"method"`
			Path     string  `json:"path"`
			Status   int     `json:"status"`
			Duration float64 `json:"duration_ms"`
			Retry    int     `json:"retry"`
			AfterMS  int64   `json:"after_ms"`
			Error    string  `json:"error,omitempty"`
		}{"retry", d.ID, d.Method, d.Path, r.Status, float64(at.Duration) / float64(time.Millisecond), r.Retry, after.Milliseconds(), at.Error})
		return
	}
	line := fmt.Sprintf("%s  %-6s %-*s → %s  %s  (delivered by retry %d, %s after the first try failed)",
		at.StartedAt.In(p.location()).Format("15:04:05.000"), d.Method, pathWidth, clip(pathQuery(d.Path, d.RawQuery), pathWidth),
		p.paint(statusColor(r.Status), statusWord(r.Status)), formatDuration(time.Duration(at.Duration)), r.Retry, agent.FormatDuration(after))
	p.write([]byte(line + "\n"))
}

// replayed prints a replay asked for from the inspector or devhook replay.
func (p *printer) replayed(r agent.Result) {
	d, at := r.Delivery, r.Attempt
	resigned := at.Request != nil && at.Request.Resigned
	if p.json {
		p.emit(struct {
			Event    string  `json:"event"`
			ID       string  `json:"id"`
			Seq      int     `json:"seq"`
			Target   string  `json:"target"`
			Status   int     `json:"status"`
			Duration float64 `json:"duration_ms"`
			Resigned bool    `json:"resigned,omitempty"`
			Error    string  `json:"error,omitempty"`
		}{"replay", d.ID, at.Seq, at.Target, at.Status, float64(at.Duration) / float64(time.Millisecond), resigned, at.Error})
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s  %-6s %-*s replay of %s → %s  %s", at.StartedAt.In(p.location()).Format("15:04:05.000"), d.Method,
		pathWidth, clip(pathQuery(d.Path, d.RawQuery), pathWidth), d.ID, p.paint(statusColor(at.Status), statusWord(at.Status)),
		formatDuration(time.Duration(at.Duration)))
	if resigned {
		b.WriteString("  (re-signed)")
	}
	if at.Error != "" {
		b.WriteString("  " + at.Error)
	}
	b.WriteByte('\n')
	p.write(b.Bytes())
}

// gaveUp prints that the agent stopped retrying a delivery.
func (p *printer) gaveUp(r agent.Result) {
	d := r.Delivery
	msg := "gave up on delivery " + d.ID + " " + strings.TrimPrefix(r.Error, "gave up ")
	if p.json {
		p.emit(struct {
			Event   string `json:"event"`
			ID      string `json:"id"`
			Method  string `json:"method"`
			Path    string `json:"path"`
			Status  int    `json:"status"`
			Error   string `json:"error"`
			Message string `json:"message"`
		}{"gave_up", d.ID, d.Method, d.Path, r.Status, r.Error, msg})
		return
	}
	at := time.Now()
	if r.Attempt != nil && !r.Attempt.StartedAt.IsZero() {
		at = r.Attempt.StartedAt
	}
	p.write([]byte(at.In(p.location()).Format("15:04:05.000") + "  FAILED: " + msg + "\n"))
}

// note prints a line about what listen did, such as deleting its webhook:
// {"event":"webhook","message":…} with --json.
func (p *printer) note(msg string) {
	if p.json {
		p.emit(map[string]string{"event": "webhook", "message": msg})
		return
	}
	p.write([]byte(msg + "\n"))
}

func (p *printer) location() *time.Location {
	if p.loc == nil {
		return time.Local
	}
	return p.loc
}

func (p *printer) logf(w io.Writer) func(string, ...any) {
	return func(format string, args ...any) {
		if p.json {
			p.emit(map[string]string{"event": "log", "message": fmt.Sprintf(format, args...)})
			return
		}
		p.mu.Lock()
		fmt.Fprintf(w, "devhook: "+format+"\n", args...)
		p.mu.Unlock()
	}
}

func attemptError(a *devhook.Attempt) string {
	if a == nil {
		return ""
	}
	return a.Error
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

// copyLine is a copy target that did not take a delivery, for --json.
type copyLine struct {
	Target   string `json:"target"`
	Receiver *int   `json:"receiver_status"`
	Error    string `json:"error,omitempty"`
}

// failedCopies are the copies that were not answered 2xx or 3xx; nil
// when all were (or there are none).
func failedCopies(copies []*devhook.Attempt) []copyLine {
	var out []copyLine
	for _, c := range copies {
		if !copyTaken(c) {
			out = append(out, copyLine{c.Target, receiverStatus(c), c.Error})
		}
	}
	return out
}

func copyTaken(c *devhook.Attempt) bool { return c.Status >= 200 && c.Status < 400 }

// receiverStatus is the receiver's status for --json: nil (null) when it
// gave none.
func receiverStatus(a *devhook.Attempt) *int {
	if a == nil || a.Status == 0 {
		return nil
	}
	return &a.Status
}

// parseHeaders reads --header values "Name: value" into a header.
func parseHeaders(values []string) (http.Header, error) {
	if len(values) == 0 {
		return nil, nil
	}
	h := http.Header{}
	for _, v := range values {
		name, value, ok := strings.Cut(v, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") || strings.ContainsAny(value, "\r\n") {
			return nil, fmt.Errorf("--header %q is not 'Name: value'", v)
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return h, nil
}

// forwardTLS is the TLS configuration for https receivers: nil (the
// system's roots) unless --forward-ca or --forward-insecure says otherwise.
func forwardTLS(caFile string, insecure bool) (*tls.Config, error) {
	if caFile == "" && !insecure {
		return nil, nil
	}
	c := &tls.Config{InsecureSkipVerify: insecure}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read --forward-ca: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--forward-ca %s holds no PEM certificate", caFile)
		}
		c.RootCAs = pool
	}
	return c, nil
}
