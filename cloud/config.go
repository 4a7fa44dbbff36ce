package cloud

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/devhook/devhook/auth"
)

// Environment variables, as the commands' help names them (docs/commands).
const (
	EnvProfile     = "SERVICE_PROFILE"
	EnvAPIKey      = "SERVICE_API_KEY"
	EnvEndpoint    = "SERVICE_ENDPOINT"
	EnvSystemCerts = auth.EnvSystemCerts
)

// Profile is one profile of the configuration file: the top-level keys
// form the default one, named ones live under profiles:.
type Profile struct {
	APIKey   string `yaml:"apikey"`
	Endpoint string `yaml:"endpoint"`
	// AuthSession is nil when the profile has no auth_session key, so
	// that an empty value (an error) is told from an absent one (the
	// reserved name default).
	AuthSession *string `yaml:"auth_session"`
	SystemCerts bool    `yaml:"system_certs"`
	SSODomain   string  `yaml:"sso_domain"`
	Team        string  `yaml:"team"`
}

// File is the configuration file, ~/.service/config.yaml.
type File struct {
	Path     string
	Default  Profile
	Profiles map[string]Profile
}

type fileYAML struct {
	Profile  `yaml:",inline"`
	Profiles map[string]Profile `yaml:"profiles"`
}

// DefaultConfigPath is ~/.service/config.yaml, or "" when there is no home.
func DefaultConfigPath() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".service", "config.yaml")
}

// LoadFile reads the configuration file at path. A missing file is an
// empty configuration; a file that is not valid YAML of the expected shape
// is an error naming the file and the line.
func LoadFile(path string) (*File, error) {
	f := &File{Path: path, Profiles: map[string]Profile{}}
	if path == "" {
		return f, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	} else if err != nil {
		return nil, fmt.Errorf("read the configuration file: %w", err)
	}
	var y fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil && !errors.Is(err, io.EOF) {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		msg = strings.ReplaceAll(msg, "\n ", ";")
		return nil, fmt.Errorf("configuration file %s is not valid: %s (fix it or move it away; keys: apikey, endpoint, auth_session, system_certs, sso_domain, team, profiles)", path, msg)
	}
	f.Default = y.Profile
	for n, p := range y.Profiles {
		f.Profiles[n] = p
	}
	return f, nil
}

// Profile returns the named profile; "" or "default" is the top-level one.
func (f *File) Profile(name string) (Profile, error) {
	if name == "" || name == "default" {
		return f.Default, nil
	}
	p, ok := f.Profiles[name]
	if !ok {
		names := make([]string, 0, len(f.Profiles))
		for n := range f.Profiles {
			names = append(names, n)
		}
		sort.Strings(names)
		where := "it has none under profiles:"
		if len(names) > 0 {
			where = "it has: " + strings.Join(names, ", ")
		}
		if f.Path == "" {
			return p, fmt.Errorf("no profile %q: there is no configuration file", name)
		}
		return p, fmt.Errorf("no profile %q in %s (%s)", name, f.Path, where)
	}
	return p, nil
}

// Settings are what a command gives on its flags; empty means not given.
type Settings struct {
	Endpoint string
	APIKey   string
	Profile  string
	Team     string
	// ConfigPath is the configuration file; "" means none.
	ConfigPath string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// Resolved is the outcome of Resolve: each value with where it came from.
type Resolved struct {
	Endpoint, EndpointFrom string
	APIKey, APIKeyFrom     string
	Team, TeamFrom         string
	Profile                string
	ProfileData            Profile
	SystemCerts            bool
	ConfigPath             string
}

// Resolve applies the order flag, environment, profile of the
// configuration file to each setting.
func Resolve(s Settings) (Resolved, error) {
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	r := Resolved{ConfigPath: s.ConfigPath}
	r.Profile = first(s.Profile, getenv(EnvProfile))
	f, err := LoadFile(s.ConfigPath)
	if err != nil {
		return r, err
	}
	p, err := f.Profile(r.Profile)
	if err != nil {
		return r, err
	}
	r.ProfileData = p
	from := "profile " + cmpStr(r.Profile, "default") + " of " + s.ConfigPath
	pick := func(flag, flagName, env, envName, prof string) (string, string) {
		switch {
		case flag != "":
			return flag, flagName
		case env != "":
			return env, envName
		case prof != "":
			return prof, from
		}
		return "", ""
	}
	r.Endpoint, r.EndpointFrom = pick(s.Endpoint, "--endpoint", getenv(EnvEndpoint), EnvEndpoint, p.Endpoint)
	r.APIKey, r.APIKeyFrom = pick(s.APIKey, "--api-key", getenv(EnvAPIKey), EnvAPIKey, p.APIKey)
	r.Team, r.TeamFrom = pick(s.Team, "--team", "", "", p.Team)
	// The environment says yes, or else the profile decides.
	r.SystemCerts = auth.UseSystemCerts(getenv(EnvSystemCerts), p.SystemCerts)
	return r, nil
}

// Session returns the sign-in session name: the flag's when given
// (flagSet), else the profile's auth_session, else auth.DefaultSession. A
// name that is empty or not one plain path element is an error naming
// where it came from; the caller must then touch no token file.
func (r Resolved) Session(flag string, flagSet bool) (string, error) {
	if flagSet {
		if err := auth.ValidSession(flag); err != nil {
			return "", fmt.Errorf("--session: %w", err)
		}
		return flag, nil
	}
	if r.ProfileData.AuthSession == nil {
		return auth.DefaultSession, nil
	}
	name := *r.ProfileData.AuthSession
	if err := auth.ValidSession(name); err != nil {
		return "", fmt.Errorf("auth_session of profile %s in %s: %w", cmpStr(r.Profile, "default"), cmpStr(r.ConfigPath, "the configuration file"), err)
	}
	return name, nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func cmpStr(a, def string) string {
	if a == "" {
		return def
	}
	return a
}

// Config turns the resolved settings into a client configuration. Without
// an API key it uses session, a signed-in session's credentials, when not
// nil. The errors say which setting is missing and how to give it.
func (r Resolved) Config(session Credentials) (Config, error) {
	where := "in " + cmpStr(r.ConfigPath, "~/.service/config.yaml")
	if r.Profile != "" {
		where += " (under profiles: " + r.Profile + ":)"
	}
	if r.Endpoint == "" {
		return Config{}, fmt.Errorf("%w for the service's API: give its base URL with --endpoint URL, %s=URL, or endpoint: %s; devhook emulate prints its own (such as http://127.0.0.1:4010)", ErrNoEndpoint, EnvEndpoint, where)
	}
	if _, err := ParseEndpoint(r.Endpoint); err != nil {
		return Config{}, fmt.Errorf("%w, from %s", err, r.EndpointFrom)
	}
	cfg := Config{Endpoint: r.Endpoint}
	switch {
	case r.APIKey != "":
		cfg.Credentials = APIKey(r.APIKey)
	case session != nil:
		cfg.Credentials = session
	default:
		return Config{}, fmt.Errorf("%w for %s: give it with --api-key KEY, %s=KEY, or apikey: %s; API keys come from the account settings in the web console (devhook emulate prints its own); or sign in with devhook login", ErrNoCredentials, r.Endpoint, EnvAPIKey, where)
	}
	return cfg, nil
}
