package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/cloud"
)

// signInFlags are the settings every sign-in command shares: the profile
// (for auth_session, system_certs, sso_domain and endpoint), the session
// and the identity provider.
type signInFlags struct {
	profile      string
	session      string
	discoveryURL string
	clientID     string
	timeout      time.Duration
	// configPath is the configuration file; "" means ~/.service/config.yaml.
	configPath string
	// flags tells a --session given empty from one not given.
	flags *pflag.FlagSet
}

func (f *signInFlags) register(fs *pflag.FlagSet, provider bool) {
	fs.StringVar(&f.profile, "profile", "", "profile of ~/.service/config.yaml (or "+cloud.EnvProfile+"; default: the top-level keys)")
	f.flags = fs
	fs.StringVar(&f.session, "session", "", "sign-in session: tokens in ~/.service/auth/SESSION/tokens.json (default: the profile's auth_session, else default)")
	fs.DurationVar(&f.timeout, "api-timeout", auth.DefaultTimeout, "how long each call to the identity provider or the service may take")
	if provider {
		fs.StringVar(&f.discoveryURL, "oidc-discovery-url", "", "the identity provider's discovery document (default: the service's identity pool; devhook emulate prints its own)")
		fs.StringVar(&f.clientID, "client-id", "", "OAuth client id (default "+auth.DefaultClientID+")")
	}
}

// signIn is what the sign-in settings resolve to.
type signIn struct {
	resolved cloud.Resolved
	session  string
	store    *auth.Store
	client   *auth.Client
}

// resolve reads the profile and returns the session's name, store and
// an identity-provider client trusting the chosen certificates. endpoint is
// --endpoint, when the command has it.
func (f *signInFlags) resolve(endpoint string, mod func(*auth.Config)) (*signIn, error) {
	path := f.configPath
	if path == "" {
		path = cloud.DefaultConfigPath()
	}
	r, err := cloud.Resolve(cloud.Settings{Endpoint: endpoint, Profile: f.profile, ConfigPath: path})
	if err != nil {
		return nil, err
	}
	s := &signIn{resolved: r}
	if s.session, err = r.Session(f.session, f.flags != nil && f.flags.Changed("session")); err != nil {
		return nil, err
	}
	if s.store, err = tokenStore(path); err != nil {
		return nil, err
	}
	hc, err := auth.NewHTTPClient(r.SystemCerts, f.timeout)
	if err != nil {
		return nil, err
	}
	cfg := auth.Config{DiscoveryURL: f.discoveryURL, ClientID: f.clientID, HTTPClient: hc}
	if mod != nil {
		mod(&cfg)
	}
	if s.client, err = auth.New(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// tokenStore is the auth directory beside the configuration file:
// ~/.service/auth.
func tokenStore(configPath string) (*auth.Store, error) {
	if configPath != "" {
		dir, err := filepath.Abs(filepath.Join(filepath.Dir(configPath), "auth"))
		if err != nil {
			return nil, fmt.Errorf("find the token directory: %w", err)
		}
		return auth.NewStore(dir)
	}
	dir, err := auth.DefaultDir()
	if err != nil {
		return nil, err
	}
	return auth.NewStore(dir)
}

// storedSession returns the signed-in session of the resolved profile as
// credentials, or nil when it has no stored tokens, so that the caller's
// "no API key" error stands.
func storedSession(r cloud.Resolved, timeout time.Duration) (cloud.Credentials, error) {
	name, err := r.Session("", false)
	if err != nil {
		return nil, err
	}
	path := r.ConfigPath
	if path == "" {
		path = cloud.DefaultConfigPath()
	}
	store, err := tokenStore(path)
	if err != nil {
		return nil, err
	}
	t, err := store.Load(name)
	if err != nil || t == nil {
		return nil, err
	}
	hc, err := auth.NewHTTPClient(r.SystemCerts, timeout)
	if err != nil {
		return nil, err
	}
	c, err := auth.New(auth.Config{HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	sess, err := c.Session(store, name)
	if err != nil {
		return nil, err
	}
	return sess, nil
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

type loginOptions struct {
	signInFlags
	endpoint     string
	force        bool
	provider     string
	email        string
	noBrowser    bool
	callbackAddr string
	wait         time.Duration
	stdout       io.Writer
	stderr       io.Writer
	// openBrowser opens the system browser; tests replace it.
	openBrowser func(ctx context.Context, url string) error
}

func newLoginCmd() *cobra.Command {
	o := &loginOptions{openBrowser: auth.OpenSystemBrowser}
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Sign in to the service in the browser; API commands then work without an API key",
		Long: `Sign in through the browser (OAuth authorization code with PKCE). The tokens are kept in
~/.service/auth/SESSION/tokens.json, where the service's other clients find them too, and are
refreshed when they expire. Every API command uses them when no API key is given.

With --email (or the profile's sso_domain), a domain with single sign-on signs in through its
identity provider.`,
		Example: `  devhook login
  devhook login --email you@example.com --endpoint api.example.com
  devhook login --no-browser --oidc-discovery-url https://127.0.0.1:4010/.well-known/openid-configuration`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stdout, o.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	o.signInFlags.register(f, true)
	f.StringVar(&o.endpoint, "endpoint", "", "the service's API, for the single sign-on check (or "+cloud.EnvEndpoint+", or endpoint: in ~/.service/config.yaml)")
	f.BoolVar(&o.force, "force", false, "sign out of the identity provider in the browser first, then sign in afresh")
	f.StringVar(&o.provider, "identity-provider", "", "sign in through this identity provider (a single sign-on domain's identifier)")
	f.StringVar(&o.email, "email", "", "your e-mail: when its domain has single sign-on, sign in through it")
	f.BoolVar(&o.noBrowser, "no-browser", false, "print the sign-in URL instead of opening the browser")
	f.StringVar(&o.callbackAddr, "callback-addr", auth.DefaultCallbackAddr, "where the browser comes back to (the identity provider must accept http://ADDR/ as redirect URI)")
	f.DurationVar(&o.wait, "timeout", auth.DefaultBrowserTimeout, "how long to wait for the browser")
	return cmd
}

func (o *loginOptions) run(ctx context.Context) error {
	s, err := o.resolve(o.endpoint, func(c *auth.Config) {
		c.CallbackAddr = o.callbackAddr
		c.BrowserTimeout = o.wait
		c.OpenBrowser = o.show
	})
	if err != nil {
		return err
	}
	provider, err := o.identityProvider(ctx, s)
	if err != nil {
		return err
	}
	tokens, err := s.client.Login(ctx, auth.LoginOptions{Force: o.force, IdentityProvider: provider})
	if err != nil {
		return loginAdvice(err)
	}
	if err := s.store.Save(s.session, tokens); err != nil {
		return err
	}
	path, _ := s.store.Path(s.session)
	who := idEmail(tokens.IDToken)
	if who == "" {
		who = "you"
	}
	fmt.Fprintf(o.stdout, "Signed in as %s (session %s). Tokens in %s; the access token is good until %s and is refreshed by itself.\n",
		who, s.session, path, tokens.ExpiresAt.Local().Format(time.DateTime))
	return nil
}

// loginAdvice adds to a failed sign-in which flag of devhook login
// changes the outcome: the auth package says what went wrong.
func loginAdvice(err error) error {
	switch {
	case errors.Is(err, auth.ErrTimeout):
		return fmt.Errorf("%w; run devhook login again (with --no-browser to open the URL yourself)", err)
	case errors.Is(err, auth.ErrBrowser):
		return fmt.Errorf("%w; use --no-browser and open the printed URL yourself", err)
	case errors.Is(err, auth.ErrNoEndSession):
		return fmt.Errorf("%w (devhook login without --force)", err)
	case errors.Is(err, auth.ErrDiscovery):
		return fmt.Errorf("%w; the discovery document's URL is --oidc-discovery-url", err)
	}
	return err
}

// identityProvider is --identity-provider, or the single sign-on provider
// of --email's domain (else the profile's sso_domain) when it has one.
func (o *loginOptions) identityProvider(ctx context.Context, s *signIn) (string, error) {
	if o.provider != "" {
		return o.provider, nil
	}
	domain, from := s.resolved.ProfileData.SSODomain, "sso_domain of the profile"
	if o.email != "" {
		d, err := auth.EmailDomain(o.email)
		if err != nil {
			return "", fmt.Errorf("--email: %w", err)
		}
		domain, from = d, "--email"
	}
	if domain == "" {
		return "", nil
	}
	if s.resolved.Endpoint == "" {
		return "", fmt.Errorf("checking single sign-on for %s (from %s) needs the service's API: give --endpoint HOST, %s or endpoint: in ~/.service/config.yaml (or --identity-provider NAME)", domain, from, cloud.EnvEndpoint)
	}
	hc, err := auth.NewHTTPClient(s.resolved.SystemCerts, o.timeout)
	if err != nil {
		return "", err
	}
	sso, err := auth.CheckSSO(ctx, hc, s.resolved.Endpoint, domain)
	if err != nil {
		return "", err
	}
	if !sso.Enabled {
		fmt.Fprintf(o.stderr, "%s has no single sign-on; signing in the usual way.\n", domain)
		return "", nil
	}
	fmt.Fprintf(o.stderr, "%s signs in through single sign-on (%s).\n", domain, sso.Identifier)
	return sso.Identifier, nil
}

// show prints the URL, and opens the browser at it unless --no-browser.
// A browser that cannot be opened leaves the printed URL to the person.
func (o *loginOptions) show(ctx context.Context, url string) error {
	if o.noBrowser {
		fmt.Fprintf(o.stderr, "Open this URL in a browser to sign in:\n\n  %s\n\nWaiting for the browser...\n", url)
		return nil
	}
	fmt.Fprintf(o.stderr, "Opening the browser to sign in. If it does not open, visit:\n\n  %s\n\n", url)
	if err := o.openBrowser(ctx, url); err != nil {
		fmt.Fprintf(o.stderr, "(could not open the browser: %v)\n", err)
	}
	return nil
}

// idEmail reads the e-mail claim of an id token, for display only: the
// token is not verified.
func idEmail(idToken string) string {
	parts := strings.Split(idToken, ".")
	if len(parts) != 3 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Email string `json:"email"`
	}
	json.Unmarshal(b, &c)
	return c.Email
}

func newLogoutCmd() *cobra.Command {
	o := &signInFlags{}
	cmd := &cobra.Command{
		Use:   "logout",
		Short: "Forget the signed-in session's tokens",
		Example: `  devhook logout
  devhook logout --profile staging`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.resolve("", nil)
			if err != nil {
				return err
			}
			path, _ := s.store.Path(s.session)
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(cmd.OutOrStdout(), "Session %s was not signed in.\n", s.session)
				return nil
			}
			if err := s.store.Delete(s.session); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Signed out of session %s (removed %s).\n", s.session, path)
			return nil
		},
	}
	o.register(cmd.Flags(), false)
	return cmd
}

func newTokenCmd() *cobra.Command {
	o := &signInFlags{}
	cmd := &cobra.Command{
		Use:     "token",
		Short:   "Print a valid access token of the signed-in session, refreshing it first when it has expired",
		Example: `  curl -H "Authorization: Bearer $(devhook token)" https://api.example.com/v1/webhooks`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.resolve("", nil)
			if err != nil {
				return err
			}
			sess, err := s.client.Session(s.store, s.session)
			if err != nil {
				return err
			}
			tok, err := sess.Token(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	o.register(cmd.Flags(), true)
	return cmd
}

type orgsOptions struct {
	signInFlags
	endpoint string
	json     bool
}

func newOrgsCmd() *cobra.Command {
	o := &orgsOptions{}
	cmd := &cobra.Command{
		Use:   "orgs",
		Short: "List the organizations (teams) of the signed-in person",
		Example: `  devhook orgs
  devhook orgs --json`,
		Long: `List the organizations (teams) of the signed-in person: name, id, role and pending invite.
A team's id is what --team and the service-account header take. The call goes over HTTPS only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.register(f, false)
	f.StringVar(&o.endpoint, "endpoint", "", "the service's API host or https URL (or "+cloud.EnvEndpoint+", or endpoint: in ~/.service/config.yaml)")
	f.BoolVar(&o.json, "json", false, "print the service's JSON answer")
	return cmd
}

func (o *orgsOptions) run(ctx context.Context, stdout io.Writer) error {
	s, err := o.resolve(o.endpoint, nil)
	if err != nil {
		return err
	}
	if s.resolved.Endpoint == "" {
		return fmt.Errorf("%w for the organizations call: give the service's API host with --endpoint HOST, %s or endpoint: in ~/.service/config.yaml", cloud.ErrNoEndpoint, cloud.EnvEndpoint)
	}
	base, err := auth.HTTPSEndpoint(s.resolved.Endpoint)
	if err != nil {
		return err
	}
	sess, err := s.client.Session(s.store, s.session)
	if err != nil {
		return err
	}
	hc, err := auth.NewHTTPClient(s.resolved.SystemCerts, o.timeout)
	if err != nil {
		return err
	}
	c, err := cloud.New(cloud.Config{Endpoint: base.String(), Credentials: sess, HTTPClient: hc, Timeout: o.timeout})
	if err != nil {
		return err
	}
	teams, raw, err := c.Organizations(ctx)
	if err != nil {
		return err
	}
	if o.json {
		return printRaw(stdout, raw)
	}
	if len(teams) == 0 {
		_, err := fmt.Fprintln(stdout, "You belong to no organization.")
		return err
	}
	rows := make([][]string, 0, len(teams))
	for _, t := range teams {
		invite := "no"
		if t.PendingInvite {
			invite = "yes"
		}
		rows = append(rows, []string{t.Name, t.ID, t.Role, invite})
	}
	return table(stdout, []string{"NAME", "ID", "ROLE", "PENDING INVITE"}, rows)
}

type ssoOptions struct {
	signInFlags
	endpoint string
	json     bool
}

func newSSOCmd() *cobra.Command {
	o := &ssoOptions{}
	cmd := &cobra.Command{
		Use:   "sso DOMAIN|EMAIL",
		Short: "Tell whether an e-mail domain signs in through single sign-on, and its identity provider",
		Example: `  devhook sso example.com
  devhook sso you@example.com --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.profile, "profile", "", "profile of ~/.service/config.yaml (or "+cloud.EnvProfile+")")
	f.DurationVar(&o.timeout, "api-timeout", auth.DefaultTimeout, "how long the call may take")
	f.StringVar(&o.endpoint, "endpoint", "", "the service's API host or https URL (or "+cloud.EnvEndpoint+", or endpoint: in ~/.service/config.yaml)")
	f.BoolVar(&o.json, "json", false, "print the result as JSON")
	return cmd
}

func (o *ssoOptions) run(ctx context.Context, stdout io.Writer, arg string) error {
	s, err := o.resolve(o.endpoint, nil)
	if err != nil {
		return err
	}
	domain := arg
	if strings.Contains(arg, "@") {
		if domain, err = auth.EmailDomain(arg); err != nil {
			return err
		}
	}
	if s.resolved.Endpoint == "" {
		return fmt.Errorf("%w for the single sign-on check: give the service's API host with --endpoint HOST, %s or endpoint: in ~/.service/config.yaml", cloud.ErrNoEndpoint, cloud.EnvEndpoint)
	}
	hc, err := auth.NewHTTPClient(s.resolved.SystemCerts, o.timeout)
	if err != nil {
		return err
	}
	res, err := auth.CheckSSO(ctx, hc, s.resolved.Endpoint, domain)
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(stdout).Encode(map[string]any{"domain": res.Domain, "enabled": res.Enabled, "domain_identifier": res.Identifier})
	}
	if !res.Enabled {
		_, err = fmt.Fprintf(stdout, "%s: single sign-on is not enabled\n", res.Domain)
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s: single sign-on is enabled; identity provider %s (devhook login --identity-provider %s)\n", res.Domain, res.Identifier, res.Identifier)
	return err
}
