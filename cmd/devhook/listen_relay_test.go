package main

import (
	"strings"
	"testing"

	"github.com/devhook/devhook/running"
)

// --relay's parts: host:port, a host or a port alone become URLs, http://
// for this machine and https:// for another; what is not a relay's
// address is said, naming the part.
func TestRelayURLs(t *testing.T) {
	for given, want := range map[string]string{
		"127.0.0.1:4041":                    "http://127.0.0.1:4041",
		"localhost:4041":                    "http://localhost:4041",
		"relay.localhost:80":                "http://relay.localhost:80",
		"[::1]:4041":                        "http://[::1]:4041",
		"4041":                              "http://localhost:4041",
		":4041":                             "http://localhost:4041",
		"relay.example.com":                 "https://relay.example.com",
		"relay.example.com:8443":            "https://relay.example.com:8443",
		"10.0.0.5:4041/team/":               "https://10.0.0.5:4041/team",
		"http://10.0.0.5:4041":              "http://10.0.0.5:4041",
		"HTTPS://Relay.Example.com/":        "HTTPS://Relay.Example.com",
		" https://relay.example.com/base/ ": "https://relay.example.com/base",
	} {
		got, others, err := relayURLs(given)
		if err != nil || got != want || len(others) != 0 {
			t.Errorf("--relay %q = %q %v, %v; want %q", given, got, others, err, want)
		}
	}
	first, others, err := relayURLs("relay-a.example.com, 127.0.0.1:4041,,https://relay-c.example.com/")
	if err != nil || first != "https://relay-a.example.com" || strings.Join(others, " ") != "http://127.0.0.1:4041 https://relay-c.example.com" {
		t.Errorf("a list: %q %q %v", first, others, err)
	}
	if first, _, err := relayURLs(""); err != nil || first != "" {
		t.Errorf("no --relay: %q %v", first, err)
	}
	for given, want := range map[string]string{
		"127.0.0.1:9x":               `--relay "127.0.0.1:9x" is not a relay's address (invalid port ":9x" after host)`,
		"70000":                      `--relay "70000" has the port 70000, not one from 1 to 65535`,
		"ftp://relay.example.com":    `--relay "ftp://relay.example.com" has the scheme ftp`,
		"ws://127.0.0.1:4041":        "is a WebSocket URL: give the relay's http:// or https:// URL",
		"https://:4041":              "has no host",
		"https://me:pw@relay.ex":     "has a user and password, which devhook does not send: give the relay's token with --relay-token",
		"https://relay.ex/?a=1":      "has a query or a fragment: give the relay's address alone (https://relay.ex)",
		"https://relay.ex,http://%z": `--relay "https://relay.ex,http://%z": "http://%z" is not a relay's address`,
	} {
		_, _, err := relayURLs(given)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), `parse "`) {
			t.Errorf("--relay %q: %v; want %q", given, err, want)
		}
	}
}

// With nothing found on a taken port, the message says so and how to
// choose others.
func TestPortsMessage_NoListenFound(t *testing.T) {
	msg := portsMessage([]portInUse{{"127.0.0.1:4041", "--relay-addr", "the built-in relay"}}, running.Listen{}, false, "/d")
	for _, want := range []string{"127.0.0.1:4041 (the built-in relay, --relay-addr) is in use by another program", "other ports:      --relay-addr 127.0.0.1:0  ("} {
		if !strings.Contains(msg, want) {
			t.Errorf("lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "share its relay") || strings.Contains(msg, "--inspect") {
		t.Errorf("offers what does not apply:\n%s", msg)
	}
}

// A listen whose built-in relay is public through a tunnel opens
// channels for itself alone: sharing it is not offered.
func TestPortsMessage_PublicRelayNotOffered(t *testing.T) {
	taken := []portInUse{{"127.0.0.1:4041", "--relay-addr", "the built-in relay"}}
	other := running.Listen{PID: 7, Data: "/a", RelayURL: "http://127.0.0.1:4041", PublicURL: "https://jane.tunnel.example/c/x"}
	if msg := portsMessage(taken, other, true, "/b"); strings.Contains(msg, "share its relay") || !strings.Contains(msg, "--relay-addr 127.0.0.1:0") {
		t.Errorf("a public built-in relay:\n%s", msg)
	}
	other.PublicURL = "http://127.0.0.1:4041/c/x"
	if msg := portsMessage(taken, other, true, "/b"); !strings.Contains(msg, "share its relay:  --relay http://127.0.0.1:4041") {
		t.Errorf("a local built-in relay:\n%s", msg)
	}
}
