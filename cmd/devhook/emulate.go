package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook/emulator"
	"github.com/devhook/devhook/lifecycle"
)

type emulateOptions struct {
	addr      string
	apiKeys   []string
	dataDir   string
	tls       bool
	queueTime time.Duration
	runTime   time.Duration
	retries   []time.Duration
	teams     []string // id=name
	sso       []string // domain=identifier
	userEmail string
	noRotate  bool
	// Pushed applications' runs.
	runTimeout time.Duration
	maxPackage int64
	maxPushed  int64
	maxOutput  int64
	parallel   int
	stdout     io.Writer
	stderr     io.Writer
}

func newEmulateCmd() *cobra.Command {
	o := &emulateOptions{}
	cmd := &cobra.Command{
		Use:   "emulate",
		Short: "Run the service locally: webhook API, signed deliveries, applications and runs, sign-in",
		Example: `  devhook emulate --api-key devkey
  devhook emulate --api-key devkey --data ./emulator --run-time 2s
  devhook emulate --api-key devkey --run-timeout 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:4010", "address to listen on")
	f.StringArrayVar(&o.apiKeys, "api-key", nil, "accepted API key (repeatable); one is generated and printed when none is given")
	f.StringVar(&o.dataDir, "data", "", "keep the emulator's state in this directory across restarts (default: in memory)")
	f.BoolVar(&o.tls, "tls", false, "serve HTTPS with a self-signed certificate; its CA is written to a file whose path is printed")
	f.DurationVar(&o.queueTime, "queue-time", emulator.DefaultQueueTime, "how long a run stays queued")
	f.DurationVar(&o.runTime, "run-time", emulator.DefaultRunTime, "how long a run runs")
	f.DurationSliceVar(&o.retries, "retry-delays", emulator.DefaultRetryDelays(), "waits before each retry of a failed delivery")
	f.StringArrayVar(&o.teams, "team", nil, "a team of the signed-in user, as ID=NAME (repeatable; default one team, printed)")
	f.StringArrayVar(&o.sso, "sso-domain", nil, "an e-mail domain with single sign-on, as DOMAIN=IDENTIFIER (repeatable; default sso.devhook.test=devhook-sso)")
	f.StringVar(&o.userEmail, "user-email", emulator.DefaultUserEmail, "e-mail of the user who signs in")
	f.DurationVar(&o.runTimeout, "run-timeout", emulator.DefaultRunTimeout, "time limit of a run of a pushed application: past it the run is killed and fails with error \"timeout\"")
	f.Int64Var(&o.maxPackage, "max-package", emulator.DefaultMaxPackageBytes, "largest pushed package (gzip'd tar) taken, in bytes")
	f.Int64Var(&o.maxPushed, "max-pushed", emulator.DefaultMaxPushedBytes, "most bytes all pushed packages take together, unpacked, with their runs' working copies: "+
		"packages no instance uses make room first, past it an upload is refused")
	f.Int64Var(&o.maxOutput, "max-output", emulator.DefaultMaxOutputBytes, "most bytes a run of a pushed application may print on standard output: beyond it the run is killed and fails")
	f.IntVar(&o.parallel, "parallel-runs", 0, "most runs of pushed applications executing at once; more stay queued (default: the number of CPUs, at least 2)")
	f.BoolVar(&o.noRotate, "no-rotate-refresh", false, "keep refresh tokens good until they expire and answer refreshes without a new one (default: each refresh token is good once)")
	return cmd
}

func (o *emulateOptions) run(ctx context.Context) error {
	if o.stdout == nil {
		o.stdout = io.Discard
	}
	if o.stderr == nil {
		o.stderr = io.Discard
	}
	var g lifecycle.Group
	if err := o.wire(&g); err != nil {
		return g.Abandon(err)
	}
	return stopReason(ctx, g.Run(ctx))
}

// wire makes the emulator and its server, adding them to g.
func (o *emulateOptions) wire(g *lifecycle.Group) error {
	teams, sso, err := o.parseTeams()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (choose another with --addr)", o.addr, err)
	}
	closeListener(g, "the emulator's server", ln) // should it never serve
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	scheme, caPath := "http", ""
	if o.tls {
		if caPath, err = o.selfSigned(g, srv); err != nil {
			return err
		}
		scheme = "https"
	}
	base := scheme + "://" + ln.Addr().String()
	e, err := emulator.New(emulator.Config{
		APIKeys: o.apiKeys, DataDir: o.dataDir, BaseURL: base,
		QueueTime: o.queueTime, RunTime: o.runTime, RetryDelays: o.retries,
		Teams: teams, SSODomains: sso, UserEmail: o.userEmail, NoRotateRefresh: o.noRotate,
		RunTimeout: o.runTimeout, MaxPackageBytes: o.maxPackage, MaxPushedBytes: o.maxPushed, MaxOutputBytes: o.maxOutput, MaxParallelRuns: o.parallel,
		Logf: log.New(o.stderr, "", log.LstdFlags).Printf,
	})
	if err != nil {
		return err
	}
	g.Close("the emulator", e.Close)
	srv.Handler = e
	o.printStart(e, base, caPath)
	if o.tls {
		g.ServeTLS("the emulator's server", srv, ln)
	} else {
		g.Serve("the emulator's server", srv, ln)
	}
	return nil
}

// parseTeams reads --team and --sso-domain.
func (o *emulateOptions) parseTeams() ([]emulator.Team, map[string]string, error) {
	var teams []emulator.Team
	for _, t := range o.teams {
		id, name, ok := strings.Cut(t, "=")
		if !ok || id == "" || name == "" {
			return nil, nil, fmt.Errorf("--team %q: want ID=NAME", t)
		}
		teams = append(teams, emulator.Team{ID: id, Name: name, Role: "admin"})
	}
	var sso map[string]string
	for _, d := range o.sso {
		domain, ident, ok := strings.Cut(d, "=")
		if !ok || domain == "" || ident == "" {
			return nil, nil, fmt.Errorf("--sso-domain %q: want DOMAIN=IDENTIFIER", d)
		}
		if sso == nil {
			sso = map[string]string{}
		}
		sso[domain] = ident
	}
	return teams, sso, nil
}

// selfSigned gives srv a self-signed certificate whose CA it writes to
// --data, or to a temporary directory g removes; it returns the CA's path.
func (o *emulateOptions) selfSigned(g *lifecycle.Group, srv *http.Server) (string, error) {
	dir := o.dataDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "devhook-emulate-"); err != nil {
			return "", fmt.Errorf("create a directory for the CA certificate: %w", err)
		}
		g.Close("the CA certificate's directory", func() error { return os.RemoveAll(dir) })
	}
	caPath := filepath.Join(dir, "emulate-ca.pem")
	cfg, err := emulator.SelfSignedTLS(caPath, time.Now())
	srv.TLSConfig = cfg
	return caPath, err
}

// printStart prints where the emulator serves, its keys and teams.
func (o *emulateOptions) printStart(e *emulator.Emulator, base, caPath string) {
	fmt.Fprintf(o.stdout, "service emulator on %s\n", base)
	for _, k := range e.APIKeys() {
		fmt.Fprintf(o.stdout, "API key: %s\n", k)
	}
	for _, t := range e.Teams() {
		fmt.Fprintf(o.stdout, "team: %s (%s; send service-account: %s)\n", t.Name, t.ID, t.ID)
	}
	if caPath != "" {
		fmt.Fprintf(o.stdout, "CA certificate: %s (trust it with SSL_CERT_FILE=%s)\n", caPath, caPath)
	}
	fmt.Fprintf(o.stdout, "sign-in discovery: %s/.well-known/openid-configuration\n", base)
	if o.dataDir != "" {
		fmt.Fprintf(o.stdout, "state kept in %s\n", o.dataDir)
	}
}
