package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/cloud"
)

// cloudFlags are the flags of every command that calls the service's API.
// Each value is resolved flag > environment > profile of
// ~/.service/config.yaml.
type cloudFlags struct {
	endpoint string
	apiKey   string
	profile  string
	team     string
	timeout  time.Duration
	json     bool
	// configPath is the configuration file; "" means ~/.service/config.yaml.
	configPath string
}

// register adds the flags to fs; withJSON adds --json too (listen has its own).
func (f *cloudFlags) register(fs *pflag.FlagSet, withJSON bool) {
	fs.StringVar(&f.endpoint, "endpoint", "", "the service's API base URL (or "+cloud.EnvEndpoint+", or endpoint: in ~/.service/config.yaml)")
	fs.StringVar(&f.apiKey, "api-key", "", "API key (or "+cloud.EnvAPIKey+", or apikey: in ~/.service/config.yaml; without one, the session of devhook login)")
	fs.StringVar(&f.profile, "profile", "", "profile of ~/.service/config.yaml (or "+cloud.EnvProfile+"; default: the top-level keys)")
	fs.StringVar(&f.team, "team", "", "act for a team: its id, or its name (looked up over HTTPS only, as devhook orgs); sent as service-account")
	fs.DurationVar(&f.timeout, "api-timeout", cloud.DefaultTimeout, "how long each call to the service may take")
	if withJSON {
		fs.BoolVar(&f.json, "json", false, "print the service's JSON answer")
	}
}

// client resolves the settings and returns a client, acting for --team
// when one is given.
func (f *cloudFlags) client(ctx context.Context) (*cloud.Client, error) {
	path := f.configPath
	if path == "" {
		path = cloud.DefaultConfigPath()
	}
	r, err := cloud.Resolve(cloud.Settings{Endpoint: f.endpoint, APIKey: f.apiKey, Profile: f.profile, Team: f.team, ConfigPath: path})
	if err != nil {
		return nil, err
	}
	// Without an API key, the profile's signed-in session, if any.
	var session cloud.Credentials
	if r.APIKey == "" {
		if session, err = storedSession(r, f.timeout); err != nil {
			return nil, err
		}
	}
	cfg, err := r.Config(session)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = f.timeout
	// SERVICE_SYSTEM_CERTS or the profile's system_certs: the system's
	// store, else the built-in roots.
	if cfg.HTTPClient, err = auth.NewHTTPClient(r.SystemCerts, f.timeout); err != nil {
		return nil, err
	}
	c, err := cloud.New(cfg)
	if err != nil {
		return nil, err
	}
	if r.Team != "" {
		id, err := c.ResolveTeam(ctx, r.Team)
		if err != nil {
			return nil, fmt.Errorf("%w (from %s)", err, r.TeamFrom)
		}
		c = c.WithTeam(id)
	}
	return c, nil
}

// printRaw prints the service's JSON answer, indented.
func printRaw(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		b.Reset()
		b.Write(raw)
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// table writes rows under a header, columns aligned.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		for i := range r {
			if r[i] == "" {
				r[i] = "-"
			}
		}
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// fields writes name: value lines, aligned.
func fields(w io.Writer, kv ...string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1]
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\n", kv[i], v)
	}
	return tw.Flush()
}
