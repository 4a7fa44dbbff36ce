package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
	"github.com/devhook/devhook/signature"
)

func TestTunnelQueuesWhileAgentAway(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	tn.startAgent()
	tn.stopAgent()

	const n = 25
	var ids []string
	for i := range n {
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		resp, _ := tn.post("/q", body, signed(body))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %d with no agent: %s, want 202", i, resp.Status)
		}
		ids = append(ids, resp.Header.Get("Devhook-Delivery"))
	}
	tn.startAgent()
	got := rec.waitFor(t, n)
	tn.waitResults(n)
	waitStored(t, tn.db, n)

	seenBodies := map[string]int{}
	sentSig := map[string]string{}
	for _, g := range got {
		seenBodies[string(g.Body)]++
		sentSig[string(g.Body)] = g.Header.Get(devhook.SignatureHeader)
		// Queued deliveries are re-signed with a fresh t; still valid.
		v := signature.Verify(secret, g.Header.Get(devhook.SignatureHeader), g.Body, time.Now())
		if !v.OK() {
			t.Errorf("redelivered request fails verification: %s", v.Reason)
		}
	}
	for i := range n {
		if c := seenBodies[fmt.Sprintf(`{"n":%d}`, i)]; c != 1 {
			t.Errorf("delivery %d reached the receiver %d times", i, c)
		}
	}
	for _, id := range ids {
		d, err := tn.db.Delivery(id)
		if err != nil {
			t.Fatalf("delivery %s not stored: %v", id, err)
		}
		if !d.Queued || len(d.Attempts) != 1 || d.Attempts[0].Kind != devhook.AttemptRedelivery || d.Verdict.Result != devhook.VerdictOK {
			t.Errorf("delivery %s: queued=%v attempts=%d verdict=%s", id, d.Queued, len(d.Attempts), d.Verdict.Result)
			continue
		}
		// Recorded as re-signed, with the signature the receiver got.
		if a := d.Attempts[0]; a.Made != devhook.MadeResigned || !a.Resigned() || a.Request.Header.Get(devhook.SignatureHeader) != sentSig[string(d.Body)] ||
			a.Request.Header.Get("Content-Length") != strconv.Itoa(len(d.Body)) {
			t.Errorf("delivery %s: redelivery recorded as made %q with request %+v; the receiver got signature %q", id, a.Made, a.Request, sentSig[string(d.Body)])
		}
	}
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
}

func TestTunnelRelayRestartKeepsQueue(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	const n = 10
	for i := range n {
		resp, _ := tn.post("/r", []byte(fmt.Sprint(i)), nil)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("status %s, want 202", resp.Status)
		}
	}
	tn.restartRelay()
	tn.startAgent()
	got := rec.waitFor(t, n)
	waitStored(t, tn.db, n)
	if len(got) != n {
		t.Fatalf("receiver saw %d, want %d", len(got), n)
	}
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
}

func TestTunnelAgentReconnectsAfterRelayRestart(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	tn.startAgent()
	tn.restartRelay()
	select {
	case <-tn.connect:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not reconnect")
	}
	resp, _ := tn.post("/after", []byte("x"), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("after reconnect: %s", resp.Status)
	}
	rec.waitFor(t, 1)
}

func TestTunnelReceiverDown(t *testing.T) {
	_, recv := newRecorder(t)
	url := recv.URL
	recv.Close()
	tn := newTunnel(t, url, nil)
	tn.startAgent()
	resp, body := tn.post("/", []byte("x"), nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "connection refused") {
		t.Fatalf("got %s %q, want 502 naming the refused connection", resp.Status, body)
	}
	d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].Status != 0 || !strings.Contains(d.Attempts[0].Error, "connection refused") {
		t.Fatalf("attempt %+v", d.Attempts)
	}
}

func TestRelayRejects(t *testing.T) {
	_, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	// Unknown channel.
	resp, err := http.Post(tn.relaySrv.URL+"/c/0123456789abcdef0123456789abcdef/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown channel: %s", resp.Status)
	}
	// Wrong token.
	bad := tn.creds
	bad.Token = "wrong"
	_, err = relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: tn.relaySrv.URL, Credentials: bad})
	if !errors.Is(err, relayclient.ErrRejected) || !strings.Contains(err.Error(), "wrong agent token") {
		t.Fatalf("wrong token: %v", err)
	}
	// Over the body limit, told by Content-Length and by a chunked body.
	big := make([]byte, wire.DefaultMaxBody+1)
	resp, _ = tn.post("/", big, nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %s", resp.Status)
	}
	req, _ := http.NewRequest("POST", tn.url("/"), io.MultiReader(bytes.NewReader(big)))
	req.ContentLength = -1
	resp, _ = tn.do(req)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized chunked body: %s", resp.Status)
	}
	if n, _ := tn.relayDB.QueueLen(tn.creds.Channel); n != 0 {
		t.Fatalf("rejected deliveries were queued: %d", n)
	}
}

func TestRelayTimesOutSilentAgent(t *testing.T) {
	// An agent that connects and never answers.
	_, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	rdb := tn.relayDB
	srv, err := relay.NewServer(relay.Config{Store: rdb, ResponseTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	conn, err := relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: hs.URL, Credentials: tn.creds})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := http.Post(hs.URL+"/c/"+tn.creds.Channel+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("silent agent: %s, want 504", resp.Status)
	}
}

// A delivery the agent recorded and forwarded, whose ack the relay never
// got, comes again: it is acknowledged without a second forward.
func TestTunnelRedeliveryIsNotForwardedTwice(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	resp, _ := tn.post("/once", []byte("x"), nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %s", resp.Status)
	}
	id := resp.Header.Get("Devhook-Delivery")
	queued, err := tn.relayDB.Queued(tn.creds.Channel, "", 10)
	if err != nil || len(queued) != 1 {
		t.Fatalf("queue: %v %d", err, len(queued))
	}
	// As if an earlier agent had handled it and died before its ack.
	if _, err := tn.db.PutDelivery(queued[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.db.AddAttempt(id, devhook.Attempt{Kind: devhook.AttemptRedelivery, Status: 204, Target: recv.URL}); err != nil {
		t.Fatal(err)
	}
	tn.startAgent()
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	tn.waitResults(1)
	if n := len(rec.requests()); n != 0 {
		t.Fatalf("receiver saw the delivery %d more times", n)
	}
	d, err := tn.db.Delivery(id)
	if err != nil || len(d.Attempts) != 1 {
		t.Fatalf("delivery: %v, %d attempts", err, len(d.Attempts))
	}
	if !tn.results[0].Duplicate {
		t.Fatal("result not flagged as duplicate")
	}
}

// A redelivered id whose earlier forward got no answer is forwarded again.
func TestTunnelRedeliveryAfterFailedForward(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, nil)
	resp, _ := tn.post("/again", []byte("y"), nil)
	id := resp.Header.Get("Devhook-Delivery")
	queued, err := tn.relayDB.Queued(tn.creds.Channel, "", 10)
	if err != nil || len(queued) != 1 {
		t.Fatalf("queue: %v %d", err, len(queued))
	}
	tn.db.PutDelivery(queued[0])
	tn.db.AddAttempt(id, devhook.Attempt{Kind: devhook.AttemptRedelivery, Error: "canceled: devhook is stopping"})
	tn.startAgent()
	got := rec.waitFor(t, 1)
	if string(got[0].Body) != "y" {
		t.Fatalf("receiver got %q", got[0].Body)
	}
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	tn.waitResults(1)
	if d, _ := tn.db.Delivery(id); len(d.Attempts) != 2 || d.Attempts[1].Status != 200 {
		t.Fatalf("attempts %+v", d.Attempts)
	}
}
