package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// A real devhook relay process with small quotas, flooded: one channel
// gets 429 with Retry-After at its quota while another goes on, then
// every channel 503 with Retry-After at the relay's; what was answered
// 202 is still queued.
func TestRelay_QueueQuotas(t *testing.T) {
	p, base := relayProc(t, "--max-body", "40000", "--queue-channel-max-bytes", "100000", "--queue-max-bytes", "150000")
	if line := p.nextLine(t, "  queue "); !strings.Contains(line, "97.7 KiB and 10000 deliveries a channel, 146.5 KiB in all") {
		t.Fatalf("the relay says of its queue: %q", line)
	}
	open := func() wire.Credentials {
		cr, err := relayclient.Open(context.Background(), http.DefaultClient, base, "")
		if err != nil {
			t.Fatal(err)
		}
		return cr
	}
	a, b := open(), open()
	body := strings.Repeat("q", 20000)
	post := func(cr wire.Credentials) *http.Response {
		resp, err := http.Post(base+"/c/"+cr.Channel+"/hook", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	flood := func(cr wire.Credentials) (int, *http.Response) {
		for n := 0; n < 20; n++ {
			if resp := post(cr); resp.StatusCode != http.StatusAccepted {
				return n, resp
			}
		}
		t.Fatalf("channel %s took 20 deliveries of 20 kB", cr.Channel)
		return 0, nil
	}
	na, resp := flood(a)
	if na != 4 || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("channel a: %d queued, then %s (Retry-After %q); want 4 then 429 with Retry-After", na, resp.Status, resp.Header.Get("Retry-After"))
	}
	nb, resp := flood(b)
	if nb != 3 || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("channel b: %d queued, then %s (Retry-After %q); want 3 then 503 with Retry-After", nb, resp.Status, resp.Header.Get("Retry-After"))
	}
	if resp := post(a); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("channel a again: %s", resp.Status)
	}
	mresp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := mresp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	m := sb.String()
	for _, want := range []string{
		`devhook_relay_queue_depth 7`,
		`devhook_relay_deliveries_total{outcome="queued",status="202"} 7`,
		`devhook_relay_deliveries_total{outcome="refused",status="429"} 2`,
		`devhook_relay_deliveries_total{outcome="refused",status="503"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
