package cloud_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devhook/devhook/cloud"
)

const configYAML = `apikey: file-key
endpoint: http://file.example:4010
team: Top Team
profiles:
  staging:
    apikey: staging-key
    endpoint: https://staging.example
    system_certs: true
`

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), ".service", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveOrder(t *testing.T) {
	path := writeConfig(t, configYAML)
	tests := []struct {
		name                   string
		s                      cloud.Settings
		env                    map[string]string
		endpoint, key, keyFrom string
		team                   string
		systemCerts            bool
	}{
		{name: "profile", s: cloud.Settings{}, endpoint: "http://file.example:4010", key: "file-key", keyFrom: "profile default of " + path, team: "Top Team"},
		{name: "env over profile", env: map[string]string{"SERVICE_API_KEY": "env-key", "SERVICE_ENDPOINT": "http://env.example"},
			endpoint: "http://env.example", key: "env-key", keyFrom: "SERVICE_API_KEY", team: "Top Team"},
		{name: "flag over env", s: cloud.Settings{APIKey: "flag-key", Endpoint: "http://flag.example", Team: "t"},
			env:      map[string]string{"SERVICE_API_KEY": "env-key", "SERVICE_ENDPOINT": "http://env.example"},
			endpoint: "http://flag.example", key: "flag-key", keyFrom: "--api-key", team: "t"},
		{name: "named profile by env", env: map[string]string{"SERVICE_PROFILE": "staging"},
			endpoint: "https://staging.example", key: "staging-key", keyFrom: "profile staging of " + path, systemCerts: true},
		{name: "named profile by flag over env", s: cloud.Settings{Profile: "staging"}, env: map[string]string{"SERVICE_PROFILE": "nope"},
			endpoint: "https://staging.example", key: "staging-key", keyFrom: "profile staging of " + path, systemCerts: true},
		{name: "system certs by env", env: map[string]string{"SERVICE_SYSTEM_CERTS": " Yes "},
			endpoint: "http://file.example:4010", key: "file-key", keyFrom: "profile default of " + path, team: "Top Team", systemCerts: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s
			s.ConfigPath = path
			s.Getenv = func(k string) string { return tt.env[k] }
			r, err := cloud.Resolve(s)
			if err != nil {
				t.Fatal(err)
			}
			if r.Endpoint != tt.endpoint || r.APIKey != tt.key || r.APIKeyFrom != tt.keyFrom || r.Team != tt.team || r.SystemCerts != tt.systemCerts {
				t.Errorf("got endpoint %q key %q from %q team %q certs %v", r.Endpoint, r.APIKey, r.APIKeyFrom, r.Team, r.SystemCerts)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	noEnv := func(string) string { return "" }
	tests := []struct {
		name   string
		config string // "" means no file
		s      cloud.Settings
		want   []string
		is     error
	}{
		{name: "corrupt file names file and line", config: "apikey: k\nendpoint: [unclosed\n",
			want: []string{"config.yaml is not valid", "line"}},
		{name: "wrong shape names line", config: "apikey: k\nprofiles:\n  - a\n",
			want: []string{"config.yaml is not valid", "line 3"}},
		{name: "unknown key", config: "apikey: k\napi_key: x\n", want: []string{"line 2", "api_key"}},
		{name: "unknown profile", config: configYAML, s: cloud.Settings{Profile: "prod"},
			want: []string{`no profile "prod"`, "staging"}},
		{name: "no endpoint", s: cloud.Settings{APIKey: "k"},
			want: []string{"--endpoint", "SERVICE_ENDPOINT", "devhook emulate"}, is: cloud.ErrNoEndpoint},
		{name: "no key", s: cloud.Settings{Endpoint: "http://127.0.0.1:1"},
			want: []string{"--api-key", "SERVICE_API_KEY", "apikey:", "web console"}, is: cloud.ErrNoCredentials},
		{name: "bad endpoint", s: cloud.Settings{Endpoint: "ftp://x", APIKey: "k"}, want: []string{"not an http or https URL", "--endpoint"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s
			s.Getenv = noEnv
			if tt.config != "" {
				s.ConfigPath = writeConfig(t, tt.config)
			} else {
				s.ConfigPath = filepath.Join(t.TempDir(), "none.yaml")
			}
			r, err := cloud.Resolve(s)
			if err == nil {
				_, err = r.Config(nil)
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

// A signed-in session stands in for a missing API key.
func TestConfigUsesSessionWithoutKey(t *testing.T) {
	r, err := cloud.Resolve(cloud.Settings{Endpoint: "localhost:9", Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.Config(cloud.APIKey("from-session"))
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := cfg.Credentials.Token(t.Context()); tok != "from-session" {
		t.Errorf("token %q", tok)
	}
	c, err := cloud.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint() != "https://localhost:9" || !c.IsLoopback() {
		t.Errorf("endpoint %s loopback %v", c.Endpoint(), c.IsLoopback())
	}
}
