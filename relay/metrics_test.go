package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
)

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue returns the value of the sample line name (labels included,
// as the exposition format writes them), or "" when there is none.
func metricValue(text, name string) string {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

func post(t *testing.T, u, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(u, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// devhook_relay_parked_deliveries counts the parked deliveries of every
// channel, and goes down when one is requeued or dropped.
func TestMetricsCountParked(t *testing.T) {
	_, hs, db := relaytest.New(t, relay.Config{})
	parked := func() string {
		t.Helper()
		_, m := get(t, hs.URL+"/metrics")
		return metricValue(m, "devhook_relay_parked_deliveries")
	}
	if got := parked(); got != "0" {
		t.Fatalf("parked = %q, want 0", got)
	}
	var ids []string
	for range 3 {
		cr := relaytest.Open(t, hs)
		st, _ := post(t, cr.PublicURL+"/hook", "x")
		if st != http.StatusAccepted {
			t.Fatalf("queued delivery: %d", st)
		}
		q, err := db.Queued(cr.Channel, "", 0)
		if err != nil || len(q) != 1 {
			t.Fatal(q, err)
		}
		if err := db.Park(cr.Channel, q[0].ID, "test"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, q[0].ID)
	}
	if got := parked(); got != "3" {
		t.Fatalf("parked = %q, want 3", got)
	}
	if _, err := db.Requeue(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DropParked(ids[1]); err != nil {
		t.Fatal(err)
	}
	if got := parked(); got != "1" {
		t.Fatalf("parked = %q, want 1", got)
	}
}

// /metrics counts deliveries by the status answered and the outcome, the
// latency of each outcome, connected agents, channels, queue depth and
// acknowledgements; each Server has its own registry.
func TestMetrics(t *testing.T) {
	_, hs, _ := relaytest.New(t, relay.Config{ResponseTimeout: 10 * time.Second})
	_, other, _ := relaytest.New(t, relay.Config{})
	cr := relaytest.Open(t, hs)

	for _, body := range []string{"q1", "q2"} {
		if st, _ := post(t, cr.PublicURL+"/hook", body); st != http.StatusAccepted {
			t.Fatalf("queued delivery: %d", st)
		}
	}
	if st, _ := post(t, hs.URL+"/c/0123456789abcdef0123456789abcdef/x", "nobody"); st != http.StatusNotFound {
		t.Fatalf("unknown channel: %d", st)
	}
	_, m := get(t, hs.URL+"/metrics")
	for name, want := range map[string]string{
		"devhook_relay_channels":                                                   "1",
		"devhook_relay_queue_depth":                                                "2",
		"devhook_relay_agents_connected":                                           "0",
		`devhook_relay_deliveries_total{outcome="queued",status="202"}`:            "2",
		`devhook_relay_deliveries_total{outcome="refused",status="404"}`:           "1",
		`devhook_relay_delivery_duration_seconds_count{outcome="queued"}`:          "2",
		"devhook_relay_queue_acked_total":                                          "0",
		`devhook_relay_delivery_duration_seconds_bucket{outcome="queued",le="60"}`: "2",
	} {
		if got := metricValue(m, name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	acked := make(chan struct{}, 2)
	agentDone := make(chan error, 1)
	go func() {
		for {
			d, err := conn.Receive()
			if err != nil {
				agentDone <- err
				return
			}
			conn.Respond(d.ID, http.StatusTeapot, nil, []byte("brewed"))
			if d.Queued {
				conn.Ack(d.ID)
				acked <- struct{}{}
			}
		}
	}()
	if st, body := post(t, cr.PublicURL+"/hook", "live"); st != http.StatusTeapot || body != "brewed" {
		t.Fatalf("live delivery: %d %q", st, body)
	}
	<-acked
	<-acked
	if st, _ := post(t, cr.PublicURL+"/hook", "live 2"); st != http.StatusTeapot {
		t.Fatalf("second live delivery: %d", st)
	}
	conn.Close()
	<-agentDone
	// Acknowledged deliveries leave the store off the connection's
	// reader (drain.go), and a scrape is no snapshot: the registry reads
	// its collectors at once, each at its own moment (the queue's depth
	// from the store, the acks from a counter). Wait for one scrape that
	// shows every value settled.
	want := map[string]string{
		"devhook_relay_queue_depth":                                         "0",
		"devhook_relay_queue_acked_total":                                   "2",
		"devhook_relay_agents_connected":                                    "0",
		`devhook_relay_deliveries_total{outcome="answered",status="418"}`:   "2",
		`devhook_relay_delivery_duration_seconds_count{outcome="answered"}`: "2",
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, m = get(t, hs.URL+"/metrics")
		var wrong []string
		for name, v := range want {
			if got := metricValue(m, name); got != v {
				wrong = append(wrong, fmt.Sprintf("%s = %q, want %s", name, got, v))
			}
		}
		if len(wrong) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %s", strings.Join(wrong, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(m, "go_goroutines ") || !strings.Contains(m, "process_") {
		t.Error("no Go runtime or process metrics")
	}

	// Another Server in the same process counts apart.
	_, om := get(t, other.URL+"/metrics")
	if got := metricValue(om, `devhook_relay_deliveries_total{outcome="queued",status="202"}`); got != "" {
		t.Errorf("another relay's metrics count this one's deliveries: %q", got)
	}
	if st, body := get(t, hs.URL+"/healthz"); st != http.StatusOK || body != "ok\n" {
		t.Errorf("healthz: %d %q", st, body)
	}
}

type sickStore struct {
	*boltrelay.Store
	err error
}

func (s sickStore) Health() (string, error) { return "backend: fine", s.err }

// /healthz reports the health of the store (the cluster's NATS
// connection): 503 with the reason while it is down. PrivateMetrics keeps
// /metrics off the public handler.
func TestHealthzAndPrivateMetrics(t *testing.T) {
	db, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := &sickStore{Store: db}
	srv, err := relay.NewServer(relay.Config{Store: store, PrivateMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	if st, body := get(t, hs.URL+"/healthz"); st != http.StatusOK || body != "ok\nbackend: fine\n" {
		t.Errorf("healthy: %d %q", st, body)
	}
	store.err = errors.New("nats: disconnected")
	if st, body := get(t, hs.URL+"/healthz"); st != http.StatusServiceUnavailable || !strings.Contains(body, "nats: disconnected") {
		t.Errorf("unhealthy: %d %q", st, body)
	}
	if st, _ := get(t, hs.URL+"/metrics"); st != http.StatusNotFound {
		t.Errorf("/metrics with PrivateMetrics: %d", st)
	}
	rec := httptest.NewRecorder()
	srv.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "devhook_relay_channels 0") {
		t.Errorf("Metrics(): %d %.200q", rec.Code, rec.Body.String())
	}
}

// Deliveries of one outcome with different statuses, one after the
// other, are each counted under their own status.
func TestMetricsCountEachStatus(t *testing.T) {
	_, hs, _ := relaytest.New(t, relay.Config{})
	cr := relaytest.Open(t, hs)
	unknown := hs.URL + "/c/0123456789abcdef0123456789abcdef/x"
	dotted := cr.PublicURL + "/x/%2e%2e/y"
	for _, u := range []string{unknown, dotted, unknown, unknown, dotted} {
		post(t, u, "refused")
	}
	_, m := get(t, hs.URL+"/metrics")
	for name, want := range map[string]string{
		`devhook_relay_deliveries_total{outcome="refused",status="404"}`:   "3",
		`devhook_relay_deliveries_total{outcome="refused",status="400"}`:   "2",
		`devhook_relay_delivery_duration_seconds_count{outcome="refused"}`: "5",
	} {
		if got := metricValue(m, name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}
}
