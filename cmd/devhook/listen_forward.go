package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/devhook/devhook/agent"
)

// forwardSettings are the agent's settings for forwarding, from the flags.
type forwardSettings struct {
	header   http.Header // --header
	tls      *tls.Config // --forward-ca, --forward-insecure
	retryFor time.Duration
	routes   []agent.Route // --route, then --routes FILE's
}

func (o *listenOptions) forwardSettings(logf func(string, ...any)) (forwardSettings, error) {
	var fw forwardSettings
	fw.retryFor = o.retryFor
	if fw.retryFor <= 0 {
		fw.retryFor = -1 // the flag's 0 is "off"; the agent's is "default"
	}
	// The agent checks these too; here the error names the flag.
	switch o.verify {
	case agent.VerifyReport, agent.VerifyEnforce, agent.VerifyOff:
	default:
		return fw, fmt.Errorf("--verify %q: give report, enforce or off", o.verify)
	}
	for _, f := range o.forward {
		if _, err := agent.ParseTarget(f); err != nil {
			return fw, fmt.Errorf("--forward: %w", err)
		}
	}
	var err error
	if fw.routes, err = parseRoutes(o.routes, o.routesFile); err != nil {
		return fw, err
	}
	if fw.header, err = parseHeaders(o.headers); err != nil {
		return fw, err
	}
	if fw.tls, err = forwardTLS(o.forwardCA, o.insecure); err != nil {
		return fw, err
	}
	if o.insecure {
		logf("--forward-insecure: the certificates of https receivers are not checked")
	}
	return fw, nil
}

// parseRoutes reads the routes of --route, in order, then those of
// --routes FILE. An error names the flag and the route, or the file and
// its line.
func parseRoutes(flags []string, file string) ([]agent.Route, error) {
	var routes []agent.Route
	for _, s := range flags {
		r, err := agent.ParseRoute(s)
		if err != nil {
			return nil, fmt.Errorf("--route %q: %w", s, err)
		}
		routes = append(routes, r)
	}
	if file == "" {
		return routes, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--routes: %w", err)
	}
	more, err := agent.ParseRoutes(file, b)
	if err != nil {
		return nil, fmt.Errorf("--routes %w", err)
	}
	return append(routes, more...), nil
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
		pool, err := caPool("--forward-ca", caFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	return c, nil
}
