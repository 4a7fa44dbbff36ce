package agent_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/natsrelay/natstest"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/storage"
)

// clusterRelay is one relay instance of a cluster on NATS, served on ln.
func clusterRelay(t *testing.T, ns *server.Server, ln net.Listener) (url string, stop func()) {
	t.Helper()
	url, stop, _ = clusterRelayStore(t, ns, ln)
	return url, stop
}

// clusterRelayStore is clusterRelay, with the instance's store.
func clusterRelayStore(t *testing.T, ns *server.Server, ln net.Listener) (url string, stop func(), store *natsrelay.Store) {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsrelay.Config{Conn: nc, ResponseTimeout: 10 * time.Second, Logf: t.Logf}
	store, err = natsrelay.OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	router, err := natsrelay.OpenRouter(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := relay.NewServer(relay.Config{Store: store, Router: router, ResponseTimeout: 10 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	if ln != nil {
		hs.Listener.Close()
		hs.Listener = ln
	}
	hs.Start()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		nc.Close()
		srv.Close()
		hs.CloseClientConnections()
		hs.Close()
		router.Close()
	}
	t.Cleanup(stop)
	return hs.URL, stop, store
}

// An agent given several relays of a cluster moves to another when its
// relay dies, and receives there what was queued meanwhile (sent to a
// third instance while no relay of its own was up).
func TestRunMovesToAnotherRelayOfTheCluster(t *testing.T) {
	ns := natstest.Run(t)

	urlA, stopA := clusterRelay(t, ns, nil)
	urlC, _ := clusterRelay(t, ns, nil)
	// B's address is kept free until B starts.
	lnB, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addrB := lnB.Addr().String()
	lnB.Close()

	rec, rs := newRecorder(t)
	cr, err := relayclient.Open(context.Background(), http.DefaultClient, urlA, "")
	if err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(filepath.Join(t.TempDir(), "deliveries.db"), storage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	connected := make(chan agent.Connection, 8)
	ag, err := agent.New(agent.Config{
		RelayURL: urlA, RelayFallbacks: []string{"http://" + addrB}, Credentials: cr,
		Forward: []string{rs.URL}, Store: db, Secret: secret,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		OnConnect: func(c agent.Connection) { connected <- c },
		Logf:      t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- ag.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitConnect := func(what string) agent.Connection {
		t.Helper()
		select {
		case c := <-connected:
			return c
		case <-time.After(20 * time.Second):
			t.Fatalf("the agent did not connect %s", what)
		}
		return agent.Connection{}
	}
	waitConnect("to A")

	post := func(u, body string) int {
		t.Helper()
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(u+"/c/"+cr.Channel+"/hook", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// C's watch of the cluster's agents may learn of the agent on A after
	// its connection (a loaded machine delays it): C reads where the agent
	// is when it passes a delivery on, and the delivery goes through live,
	// not queued as if the agent had moved meanwhile.
	if st := post(urlC, `{"n":"live"}`); st != http.StatusOK {
		t.Fatalf("live delivery through C to the agent on A: %d", st)
	}
	rec.waitFor(t, 1)

	stopA()
	for deadline := time.Now().Add(10 * time.Second); ns.NumClients() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the NATS server still has %d clients", ns.NumClients())
		}
		time.Sleep(5 * time.Millisecond) // polling the NATS server's state
	}
	for _, b := range []string{`{"n":"q1"}`, `{"n":"q2"}`} {
		if st := post(urlC, b); st != http.StatusAccepted {
			t.Fatalf("with no relay of the agent up: %d, want 202", st)
		}
	}
	lnB, err = net.Listen("tcp", addrB)
	if err != nil {
		t.Skipf("B's port was taken meanwhile: %v", err)
	}
	clusterRelay(t, ns, lnB)
	if c := waitConnect("to B"); !c.Reconnect || c.Queued != 2 {
		t.Fatalf("connection to B: %+v", c)
	}
	got := rec.waitFor(t, 3)
	bodies := map[string]int{}
	for _, s := range got {
		bodies[string(s.Body)]++
	}
	if bodies[`{"n":"q1"}`] != 1 || bodies[`{"n":"q2"}`] != 1 {
		t.Fatalf("receiver got %v", bodies)
	}
}
