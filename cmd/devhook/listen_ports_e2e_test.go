package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/receiver"
)

// waitExit waits for p to end on its own and returns its stderr.
func waitExit(t *testing.T, p *proc) string {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("devhook did not stop; stderr: %s", p.stderr)
	}
	if p.err == nil {
		t.Fatalf("devhook exited 0; stderr: %s", p.stderr)
	}
	return p.stderr.String()
}

// --relay takes host:port (and a port alone) as --forward does: a relay
// on this machine over http://; several comma-separated; a part that is
// not an address is named, without a raw URL error.
func TestListen_RelayHostPort(t *testing.T) {
	recv := httptest.NewServer(receiver.New(receiver.Config{}))
	defer recv.Close()
	_, relayURL := startRelay(t, t.TempDir())
	hostPort := strings.TrimPrefix(relayURL, "http://")
	_, port, _ := strings.Cut(hostPort, ":")
	for _, given := range []string{hostPort, "localhost:" + port, port, hostPort + ",127.0.0.1:9"} {
		l := startProc(t, "listen", "--json", "--relay", given, "--forward", recv.URL, "--inspect", "off", "--data", t.TempDir())
		ready := l.nextJSON(t, "ready")
		// The relay names itself with the host it was asked for.
		if pub := ready["public_url"].(string); !strings.HasPrefix(pub, relayURL+"/c/") && !strings.HasPrefix(pub, "http://localhost:"+port+"/c/") {
			t.Errorf("--relay %s: public URL %s, want on %s", given, pub, relayURL)
		}
		l.stop(t, 20*time.Second)
	}
	for given, want := range map[string]string{
		"127.0.0.1:99999":         `--relay "127.0.0.1:99999" has the port 99999, not one from 1 to 65535`,
		hostPort + ",http://a b":  `"http://a b" is not a relay's address (invalid character " " in host name)`,
		"wss://relay.example.com": "is a WebSocket URL",
	} {
		_, stderr, err := runDevhook(t, "listen", "--relay", given, "--forward", recv.URL, "--inspect", "off", "--data", t.TempDir())
		if err == nil || !strings.Contains(stderr, want) || strings.Contains(stderr, `parse "`) {
			t.Errorf("--relay %s: %v\n%s\nwant %s", given, err, stderr, want)
		}
	}
}

// A second listen on this machine, on the first's ports, says in one
// message both ports, the listen that holds them and how to run beside
// it; sharing the first's relay as it says works.
func TestListen_SecondListenSaysWhatHoldsItsPorts(t *testing.T) {
	const secret = "whsec_second"
	home := t.TempDir()
	t.Setenv("HOME", home) // the first listen's data: ~/.devhook
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	// The first takes any free ports; the others are given the same.
	first := startProc(t, "listen", "--json", "--forward", recv.URL, "--relay-addr", "127.0.0.1:0", "--inspect", "127.0.0.1:0")
	ready := first.nextJSON(t, "ready")
	pub := ready["public_url"].(string)
	relayAddr := strings.TrimPrefix(pub[:strings.Index(pub, "/c/")], "http://")
	inspectAddr := strings.TrimPrefix(ready["inspector_url"].(string), "http://")
	ports := []string{"--relay-addr", relayAddr, "--inspect", inspectAddr}

	// Another data directory: both ports, the first listen, the ways.
	other := filepath.Join(t.TempDir(), "other")
	second := startProc(t, append([]string{"listen", "--forward", recv.URL, "--data", other}, ports...)...)
	msg := waitExit(t, second)
	for _, want := range []string{
		fmt.Sprintf("devhook listen (pid %d, data %s) already runs here and holds %s (the built-in relay, --relay-addr) and %s (the inspector, --inspect)",
			first.cmd.Process.Pid, filepath.Join(home, ".devhook"), relayAddr, inspectAddr),
		"its public URL is " + pub,
		"its inspector http://" + inspectAddr,
		"share its relay:  --relay http://" + relayAddr + " --inspect 127.0.0.1:0  (",
		"other ports:      --relay-addr 127.0.0.1:0 --inspect 127.0.0.1:0  (",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the second listen's message lacks %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "devhook:"); n != 1 {
		t.Errorf("%d errors, want one message:\n%s", n, msg)
	}
	// The same data directory: that too.
	third := startProc(t, append([]string{"listen", "--forward", recv.URL}, ports...)...)
	msg = waitExit(t, third)
	if !strings.Contains(msg, "records in this listen's data directory (--data)") || !strings.Contains(msg, "--data ANOTHER_DIR") {
		t.Errorf("a second listen of the same data directory:\n%s", msg)
	}

	// As it says: its relay, shared.
	shared := startProc(t, "listen", "--json", "--forward", recv.URL, "--data", other, "--relay", "http://"+relayAddr, "--inspect", "127.0.0.1:0")
	sharedPub := shared.nextJSON(t, "ready")["public_url"].(string)
	if !strings.HasPrefix(sharedPub, "http://"+relayAddr+"/c/") || sharedPub == pub {
		t.Fatalf("the shared relay's channel: %s (the first's %s)", sharedPub, pub)
	}
	if out, stderr, err := runDevhook(t, "send", sharedPub+"/hook", "--secret", secret); err != nil || !strings.Contains(out, "200") {
		t.Fatalf("send to the second listen: %v %s\n%s", err, stderr, out)
	}
	shared.nextJSON(t, "delivery")
	if _, err := os.Stat(filepath.Join(other, "deliveries.db")); err != nil {
		t.Errorf("the second listen's store: %v", err)
	}
}
