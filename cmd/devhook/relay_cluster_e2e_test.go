package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/natsrelay/natstest"
)

// Two devhook relay --nats processes: listen connects to A, a delivery
// sent to B gets the receiver's answer. A is killed: deliveries to B are
// queued (202); A comes back on its address, listen reconnects to it and
// the receiver gets what was queued, once each; B's /metrics and /healthz
// speak for the cluster.
func TestRelay_ClusterOnNATS(t *testing.T) {
	ns := natstest.Run(t)
	recv := &bodies{}
	rs := httptest.NewServer(recv)
	defer rs.Close()

	relayA, urlA := relayProc(t, "--nats", ns.ClientURL())
	_, urlB := relayProc(t, "--nats", ns.ClientURL())
	l, ready := listenProc(t, urlA, t.TempDir(), rs.URL)
	public := ready["public_url"].(string)
	if !strings.HasPrefix(public, urlA+"/c/") {
		t.Fatalf("public URL %s, relay A %s", public, urlA)
	}
	viaB := urlB + strings.TrimPrefix(public, urlA)
	if st, body := sendTo(t, viaB+"/hook", nil, "live via B"); st != http.StatusOK || body != "ok" {
		t.Fatalf("delivery via B: %d %q", st, body)
	}
	if recv.count("live via B") != 1 {
		t.Fatal("the receiver did not get the delivery sent to B")
	}

	relayA.kill()
	pollUntil(t, "the NATS server to drop relay A", func() bool { return ns.NumClients() == 1 })
	for _, b := range []string{"queued 1", "queued 2"} {
		if st, body := sendTo(t, viaB+"/hook", nil, b); st != http.StatusAccepted {
			t.Fatalf("with A dead: %d %q", st, body)
		}
	}
	// A comes back where it was; listen reconnects by itself.
	startProc(t, "relay", "serve", "--addr", strings.TrimPrefix(urlA, "http://"), "--data", t.TempDir(), "--nats", ns.ClientURL()).
		nextLine(t, "devhook relay on ")
	pollUntil(t, "the queued deliveries to reach the receiver", func() bool {
		return recv.count("queued 1") == 1 && recv.count("queued 2") == 1
	})
	pollUntil(t, "the queue to empty", func() bool {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(urlB + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "\ndevhook_relay_queue_depth 0\n") && strings.Contains(string(b), "\ndevhook_relay_channels 1\n")
	})
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(urlB + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "nats: connected") {
		t.Fatalf("healthz: %s %q", resp.Status, b)
	}
	l.stop(t, 10*time.Second)
	if recv.total() != 3 {
		t.Fatalf("the receiver got %d deliveries, want 3", recv.total())
	}
}

// listen --relay A,B: when relay A is killed, listen moves to relay B by
// itself, and every delivery sent to B meanwhile reaches the receiver
// once (live, or queued until listen is there).
func TestListen_MovesToAnotherRelayOfTheCluster(t *testing.T) {
	ns := natstest.Run(t)
	recv := &bodies{}
	rs := httptest.NewServer(recv)
	defer rs.Close()
	relayA, urlA := relayProc(t, "--nats", ns.ClientURL())
	_, urlB := relayProc(t, "--nats", ns.ClientURL())
	l, ready := listenProc(t, urlA+","+urlB, t.TempDir(), rs.URL)
	viaB := urlB + strings.TrimPrefix(ready["public_url"].(string), urlA)

	relayA.kill()
	pollUntil(t, "the NATS server to drop relay A", func() bool { return ns.NumClients() == 1 })
	for _, b := range []string{"after 1", "after 2", "after 3"} {
		if st, body := sendTo(t, viaB+"/hook", nil, b); st != http.StatusOK && st != http.StatusAccepted {
			t.Fatalf("with A dead: %d %q", st, body)
		}
	}
	pollUntil(t, "every delivery to reach the receiver", func() bool {
		return recv.count("after 1") == 1 && recv.count("after 2") == 1 && recv.count("after 3") == 1
	})
	l.stop(t, 10*time.Second)
	if recv.total() != 3 {
		t.Fatalf("the receiver got %d deliveries, want 3", recv.total())
	}
}
