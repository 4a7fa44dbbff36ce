package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
)

func TestOpenChannel(t *testing.T) {
	_, hs, db := relaytest.New(t, relay.Config{OpenToken: "open-token-0123456789"})
	if _, err := relayclient.Open(context.Background(), hs.Client(), hs.URL, ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("open without token: %v", err)
	}
	if _, err := relayclient.Open(context.Background(), hs.Client(), hs.URL, "nope"); err == nil {
		t.Fatal("open with a wrong token succeeded")
	}
	cr, err := relayclient.Open(context.Background(), hs.Client(), hs.URL, "open-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Channel) != 32 || len(cr.Token) < 40 || cr.PublicURL != hs.URL+"/c/"+cr.Channel {
		t.Fatalf("credentials %+v", cr)
	}
	ch, err := db.Channel(cr.Channel)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ch.TokenHash), cr.Token) || len(ch.TokenHash) != 32 {
		t.Fatal("the relay stores the token, not its hash")
	}
	resp, err := http.Get(hs.URL + "/v1/channels")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/channels: %s", resp.Status)
	}
}

// A malformed frame from an agent ends its connection; the delivery it was
// given stays for the next agent.
func TestMalformedFrameDropsAgent(t *testing.T) {
	_, hs, db := relaytest.New(t, relay.Config{ResponseTimeout: 5 * time.Second})
	cr := relaytest.Open(t, hs)
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http")+"/v1/channels/"+cr.Channel+"/connect",
		http.Header{"Authorization": {"Bearer " + cr.Token}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if _, _, err := ws.ReadMessage(); err != nil { // hello
		t.Fatal(err)
	}
	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post(cr.PublicURL+"/x", "text/plain", strings.NewReader("keep me"))
		if err != nil {
			done <- result{err: err}
			return
		}
		resp.Body.Close()
		done <- result{status: resp.StatusCode}
	}()
	if _, _, err := ws.ReadMessage(); err != nil { // the deliver frame
		t.Fatal(err)
	}
	ws.WriteMessage(websocket.BinaryMessage, []byte{0, 0, 0, 99, 'x'})
	r := <-done
	if r.err != nil || r.status != http.StatusAccepted {
		t.Fatalf("sender got %d %v, want 202 (queued after the agent was dropped)", r.status, r.err)
	}
	if _, _, err := ws.ReadMessage(); err == nil {
		t.Fatal("connection still open after a malformed frame")
	}
	if n, _ := db.QueueLen(cr.Channel); n != 1 {
		t.Fatalf("queue holds %d, want 1", n)
	}
}

// Many agents at once, each answering its own deliveries; after Close no
// goroutine of the relay is left.
func TestManyAgentsNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	db, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Pings run beside the deliveries, but not so often that a loaded
	// machine (-race, 2 cores) misses a pong and drops an agent.
	srv, err := relay.NewServer(relay.Config{Store: db, PingInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := relaytest.Serve(t, srv)

	const agents, each = 20, 5
	var wg, senders sync.WaitGroup
	errs := make(chan error, agents*each)
	for i := range agents {
		cr, err := srv.OpenChannel(nil)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { // the agent: echo the body with its channel number
			defer wg.Done()
			for {
				d, err := conn.Receive()
				if err != nil {
					return
				}
				conn.Respond(d.ID, 200, http.Header{"X-Agent": {fmt.Sprint(i)}}, d.Body)
				conn.Ack(d.ID)
			}
		}()
		for j := range each {
			senders.Add(1)
			go func() {
				defer senders.Done()
				body := fmt.Sprintf("agent %d delivery %d", i, j)
				resp, err := http.Post(hs.URL+"/c/"+cr.Channel+"/", "text/plain", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(got) != body || resp.Header.Get("X-Agent") != fmt.Sprint(i) {
					errs <- fmt.Errorf("channel %d got %q from agent %s", i, got, resp.Header.Get("X-Agent"))
				}
			}()
		}
	}
	senders.Wait()
	hs.CloseClientConnections()
	srv.Close()
	hs.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left (was %d):\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Check says whether saved credentials still work without connecting: a
// connection would take the channel over from its agent.
func TestCheckDoesNotTakeTheChannel(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	_, hs, _ := relaytest.New(t, relay.Config{Logf: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&logs, f+"\n", a...)
	}})
	cr := relaytest.Open(t, hs)
	ctx := context.Background()
	conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	if err := relayclient.Check(ctx, hs.Client(), hs.URL, cr); err != nil {
		t.Fatalf("check of good credentials: %v", err)
	}
	bad := cr
	bad.Token = "wrong"
	if err := relayclient.Check(ctx, hs.Client(), hs.URL, bad); !errors.Is(err, relayclient.ErrRejected) {
		t.Fatalf("check with a wrong token: %v, want ErrRejected", err)
	}
	gone := cr
	gone.Channel = strings.Repeat("0", 32)
	if err := relayclient.Check(ctx, hs.Client(), hs.URL, gone); !errors.Is(err, relayclient.ErrRejected) {
		t.Fatalf("check of an unknown channel: %v, want ErrRejected", err)
	}

	// The connected agent still holds the channel: a delivery reaches it.
	go func() {
		d, err := conn.Receive()
		if err == nil {
			conn.Respond(d.ID, http.StatusTeapot, nil, nil)
		}
	}()
	resp, err := hs.Client().Post(cr.PublicURL+"/x", "text/plain", strings.NewReader("hi"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot {
		t.Fatalf("delivery after checks: %s, want the agent's 418", resp.Status)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "closing the previous one") {
		t.Fatalf("a check took the channel over:\n%s", logs.String())
	}
}

// An open token shorter than MinOpenToken is refused when the Server is
// made: it could be guessed.
func TestShortOpenTokenRefused(t *testing.T) {
	db, err := boltrelay.Open(filepath.Join(t.TempDir(), "relay.db"), boltrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tok := range []string{"x", "fifteen-bytes!!"} {
		if _, err := relay.NewServer(relay.Config{Store: db, OpenToken: tok}); err == nil || !strings.Contains(err.Error(), "at least 16") {
			t.Errorf("open token %q: %v, want refused", tok, err)
		}
	}
	srv, err := relay.NewServer(relay.Config{Store: db, OpenToken: "sixteen-bytes!!!"})
	if err != nil {
		t.Fatalf("a token of 16 bytes: %v", err)
	}
	srv.Close()
}

// An agent that answers a delivery twice: the second answer goes
// nowhere, and every later delivery gets its own answer (the relay
// reuses what a delivery waits on).
func TestRepeatedAnswerReachesNoOtherDelivery(t *testing.T) {
	_, hs, _ := relaytest.New(t, relay.Config{ResponseTimeout: time.Minute})
	cr := relaytest.Open(t, hs)
	conn, err := relayclient.Dial(context.Background(), relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			d, err := conn.Receive()
			if err != nil {
				return
			}
			conn.Respond(d.ID, 200, nil, d.Body)
			conn.Respond(d.ID, 500, nil, []byte("again: "+string(d.Body)))
		}
	}()
	defer func() { conn.Close(); wg.Wait() }()
	client := &http.Client{Timeout: time.Minute}
	for i := range 200 {
		body := fmt.Sprintf("delivery %d", i)
		resp, err := client.Post(cr.PublicURL+"/x", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != body {
			t.Fatalf("delivery %d: answered %d %q, want 200 %q", i, resp.StatusCode, got, body)
		}
	}
}
