package cloud_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/emulator"
)

// newTLSService is the emulator over HTTPS, and a client that trusts it;
// seen, when not nil, is called with each request's path.
func newTLSService(t *testing.T, seen func(path string)) *cloud.Client {
	t.Helper()
	e, err := emulator.New(emulator.Config{APIKeys: []string{key}, RetryDelays: []time.Duration{}, Teams: []emulator.Team{testTeam, emulator.DefaultTeam()}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(observe(e, seen))
	t.Cleanup(func() { srv.Close(); e.Close() })
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key), HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func observe(h http.Handler, seen func(string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen != nil {
			seen(r.URL.Path)
		}
		h.ServeHTTP(w, r)
	})
}

// The organizations call goes over HTTPS only, as the interface says of
// organization calls: a team named on an http:// endpoint is not looked up
// over plain http (the error says to give its id, or an https endpoint),
// while a team's id needs no call and works on any endpoint.
func TestResolveTeam_OverHTTPSOnly(t *testing.T) {
	e, err := emulator.New(emulator.Config{APIKeys: []string{key}, RetryDelays: []time.Duration{}, Teams: []emulator.Team{testTeam, emulator.DefaultTeam()}})
	if err != nil {
		t.Fatal(err)
	}
	var orgCalls atomic.Int32
	srv := httptest.NewServer(observe(e, func(p string) {
		if strings.Contains(p, "organization") {
			orgCalls.Add(1)
		}
	}))
	defer e.Close()
	defer srv.Close()
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ResolveTeam(t.Context(), "team one")
	if !errors.Is(err, auth.ErrNotHTTPS) || !strings.Contains(err.Error(), "HTTPS only") || !strings.Contains(err.Error(), "give the team's id") {
		t.Errorf("ResolveTeam by name over http: %v", err)
	}
	if _, _, err := c.Organizations(t.Context()); !errors.Is(err, auth.ErrNotHTTPS) {
		t.Errorf("Organizations over http: %v", err)
	}
	if n := orgCalls.Load(); n != 0 {
		t.Errorf("%d organization calls went over plain http", n)
	}
	if id, err := c.ResolveTeam(t.Context(), emulator.DefaultTeam().ID); err != nil || id != emulator.DefaultTeam().ID {
		t.Errorf("ResolveTeam by id over http = %q, %v", id, err)
	}

	var tlsCalls atomic.Int32
	tc := newTLSService(t, func(p string) {
		if strings.Contains(p, "organization") {
			tlsCalls.Add(1)
		}
	})
	if id, err := tc.ResolveTeam(t.Context(), "team one"); err != nil || id != "team-one-id" || tlsCalls.Load() != 1 {
		t.Errorf("ResolveTeam by name over https = %q, %v (%d calls)", id, err, tlsCalls.Load())
	}
}
