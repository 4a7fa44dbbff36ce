package main

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/lifecycle"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
)

// relayNetwork is how listen reaches its relay, for the channel's HTTP
// calls and the WebSocket alike: the environment's proxy, and --relay-ca.
func (o *listenOptions) relayNetwork() (relayclient.Network, error) {
	var n relayclient.Network
	if o.relayCA == "" {
		return n, nil
	}
	pool, err := caPool("--relay-ca", o.relayCA)
	if err != nil {
		return n, err
	}
	n.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return n, nil
}

// caPool is the system's roots and the CA certificates of the PEM file
// given with flag.
func caPool(flag, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", flag, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", flag, file)
	}
	return pool, nil
}

// relayURLs reads --relay: one relay, or several comma-separated
// (instances of one relay cluster). Each is an http(s) URL, or what
// --forward takes: host:port, a host, or a port alone. Without a scheme, a
// relay on this machine (localhost, 127.x.y.z, [::1], a port alone) is
// reached over http://, any other over https://, as a relay beyond this
// machine is served behind TLS (devhook relay serve --tls, a proxy, a
// tunnel): give http:// to reach one without TLS. An error names the flag
// and the part that is wrong.
func relayURLs(flag string) (first string, others []string, err error) {
	parts := strings.Split(flag, ",")
	for _, part := range parts {
		if strings.TrimSpace(part) == "" {
			continue
		}
		u, err := relayURL(part)
		if err != nil {
			if len(parts) > 1 {
				return "", nil, fmt.Errorf("--relay %q: %q %w", flag, strings.TrimSpace(part), err)
			}
			return "", nil, fmt.Errorf("--relay %q %w", strings.TrimSpace(part), err)
		}
		if first == "" {
			first = u
		} else {
			others = append(others, u)
		}
	}
	return first, others, nil
}

// relayURL is one relay of --relay as a URL, without a trailing slash.
// Its error completes "--relay PART ...".
func relayURL(part string) (string, error) {
	const give = "give an http(s) URL such as https://relay.example.com, or host:port (http:// for this machine, https:// for another)"
	raw := strings.TrimSpace(part)
	switch {
	case strings.Trim(raw, "0123456789") == "":
		raw = "http://localhost:" + raw
	case strings.HasPrefix(raw, ":"):
		raw = "http://localhost" + raw
	case !strings.Contains(raw, "://"):
		host := raw
		if i := strings.IndexAny(host, "/?#"); i >= 0 {
			host = host[:i]
		}
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		scheme := "https://"
		if inspector.IsLoopbackHost(strings.Trim(host, "[]")) {
			scheme = "http://"
		}
		raw = scheme + raw
	}
	u, err := url.Parse(raw)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err // what is wrong, without the URL again
	}
	switch {
	case err != nil:
		return "", fmt.Errorf("is not a relay's address (%w): %s", err, give)
	case u.Scheme == "ws" || u.Scheme == "wss":
		return "", fmt.Errorf("is a WebSocket URL: give the relay's http:// or https:// URL; devhook opens the WebSocket itself")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("has the scheme %s: %s", u.Scheme, give)
	case u.Hostname() == "":
		return "", fmt.Errorf("has no host: %s", give)
	case u.User != nil:
		return "", errors.New("has a user and password, which devhook does not send: give the relay's token with --relay-token (or DEVHOOK_RELAY_TOKEN)")
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("has a query or a fragment: give the relay's address alone (%s://%s)", u.Scheme, u.Host)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("has the port %s, not one from 1 to 65535", p)
		}
	}
	// As given (a scheme added): it keys the saved channel
	// (channels.json), which an earlier start may have saved.
	return strings.TrimRight(raw, "/"), nil
}

// builtinPublic checks --public-url: the address where something this
// machine runs (a tunnel) takes requests and passes them to --relay-addr.
// It returns the base URL without a trailing slash, or "" without it.
func (o *listenOptions) builtinPublic() (string, error) {
	if o.publicURL == "" {
		return "", nil
	}
	if o.relayURL != "" {
		return "", errors.New("--public-url is the built-in relay's public address; a relay given with --relay has its own (devhook relay serve --public-url): drop one of them")
	}
	u, err := url.Parse(o.publicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", fmt.Errorf("--public-url %q must be an http:// or https:// URL, such as https://hooks.example.com", o.publicURL)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--public-url %q has a path or a query: give the address alone (https://%s); the tunnel passes every path to --relay-addr as it is, and deliveries go to its /c/<channel>/", o.publicURL, u.Host)
	}
	return u.Scheme + "://" + u.Host, nil
}

// newOpenToken is the built-in relay's open token when it is public: no
// one but this listen (which opens its channel in process) may open a
// channel through the tunnel.
func newOpenToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make the built-in relay's open token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
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
	rdb, err := openRelayStore(o.dataDir, boltrelay.Config{})
	if err != nil {
		return rl, err
	}
	g.Close("the built-in relay's store", rdb.Close)
	ln, err := net.Listen("tcp", o.relayAddr)
	if err != nil {
		return rl, fmt.Errorf("start the built-in relay on %s: %w (choose another with --relay-addr)", o.relayAddr, err)
	}
	cfg := relay.Config{Store: rdb, PublicURL: "http://" + ln.Addr().String(), ResponseTimeout: builtinResponseTimeout(o.timeout)}
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
	serveRelay(g, "the built-in relay", local, ln, relay.ServeConfig{})
	rl.url, rl.key, rl.local, rl.store = "http://"+ln.Addr().String(), "local", local, rdb
	rl.localOnly = public == ""
	return rl, nil
}

// answerMargin is how long past the agent's wait for the receiver the
// built-in relay waits for the agent: recording the attempt and sending
// its answer take a moment.
const answerMargin = 5 * time.Second

// builtinResponseTimeout is how long the built-in relay lets a sender wait
// for the agent: longer than the agent waits for the receiver (forward,
// listen's --timeout; 0: the agent's default), so that the sender gets
// the answer the agent records, the receiver's or the agent's 502 for a
// receiver too slow, never the relay's 504 while the agent records
// another.
func builtinResponseTimeout(forward time.Duration) time.Duration {
	if forward <= 0 {
		forward = agent.DefaultForwardTimeout
	}
	return forward + answerMargin
}
