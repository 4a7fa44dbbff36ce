package agent_test

// A live delivery's answer that comes after the relay stopped waiting for
// it (late.go): the sender got 504 from the relay, and the record and
// the result say so beside the receiver's answer. Relay waits of 1 s
// against receivers of 3 s: the order is what matters, not the speed.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// lateRecv is a receiver that answers 200 "late answer" to requests
// whose path starts with /slow after d (or when the request ends), and at
// once to others.
func lateRecv(t *testing.T, d time.Duration) string {
	t.Helper()
	rec, srv := newRecorder(t)
	rec.answer = func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/slow") {
			select {
			case <-time.After(d): // the receiver under test: slower than the relay waits
			case <-r.Context().Done():
				return
			}
		}
		w.Write([]byte("late answer"))
	}
	return srv.URL
}

// The relay waits 1 s, listen up to a minute, the receiver answers after
// 3 s: the sender gets 504, and the agent records the receiver's 200 with
// "the sender got 504", reports 504 as what the sender got, and warned
// once at connect that it waits longer than the relay. An answer in time
// passes as before.
func TestLateAnswerRecordsWhatTheSenderGot(t *testing.T) {
	var log lines
	tn := newTunnelRelay(t, lateRecv(t, 3*time.Second), func(c *relay.Config) { c.ResponseTimeout = time.Second },
		func(c *agent.Config) { c.ForwardTimeout = time.Minute; c.Logf = log.logf })
	tn.startAgent()

	resp, body := tn.post("/fast", []byte(`{}`), nil)
	if resp.StatusCode != http.StatusOK || string(body) != "late answer" {
		t.Fatalf("an answer in time: sender got %s %q, want the receiver's 200", resp.Status, body)
	}
	resp, body = tn.post("/slow", []byte(`{}`), nil)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("an answer after the relay's 1s: sender got %s %q, want 504", resp.Status, body)
	}
	tn.waitResults(2)
	rs := tn.resultsCopy()
	if r := rs[0]; r.Status != 200 || r.Attempt == nil || r.Attempt.Status != 200 || r.Attempt.Error != "" {
		t.Errorf("the answer in time: result %d, attempt %+v; want 200 and no note", r.Status, r.Attempt)
	}
	r := rs[1]
	if r.Status != http.StatusGatewayTimeout || r.Attempt == nil || r.Attempt.Status != 200 || !strings.Contains(r.Attempt.Error, "the sender got 504") {
		t.Fatalf("the late answer: result %d, attempt %+v; want the sender's 504 and the receiver's 200", r.Status, r.Attempt)
	}
	d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
	if err != nil || len(d.Attempts) != 1 {
		t.Fatalf("recorded %v %+v", err, d)
	}
	at := d.Attempts[0]
	if at.Status != 200 || string(at.Body) != "late answer" || !strings.Contains(at.Error, "the sender got 504: the relay lets a sender wait 1s") {
		t.Errorf("recorded attempt: %d %q %q; want the receiver's 200 and what the sender got", at.Status, at.Body, at.Error)
	}
	warned := 0
	for _, l := range log.all() {
		if strings.Contains(l, "the relay lets a sender wait 1s for the answer") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("warned %d times that the relay waits less than listen; want once:\n%s", warned, strings.Join(log.all(), "\n"))
	}
}

// A forward that fails after the relay stopped waiting (here listen's own
// 2 s timeout against the relay's 1 s): the sender got the relay's 504,
// not the 502 the agent would have answered.
func TestLateFailureRecordsWhatTheSenderGot(t *testing.T) {
	tn := newTunnelRelay(t, lateRecv(t, time.Minute), func(c *relay.Config) { c.ResponseTimeout = time.Second },
		func(c *agent.Config) { c.ForwardTimeout = 2 * time.Second })
	tn.startAgent()
	resp, body := tn.post("/slow", []byte(`{}`), nil)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("sender got %s %q, want 504", resp.Status, body)
	}
	tn.waitResults(1)
	r := tn.resultsCopy()[0]
	if r.Status != http.StatusGatewayTimeout || r.Attempt == nil || r.Attempt.Status != 0 ||
		!strings.HasPrefix(r.Attempt.Error, "timeout: ") || !strings.Contains(r.Attempt.Error, "; the sender got 504") {
		t.Fatalf("result %d, attempt %+v; want no answer, and the sender's 504", r.Status, r.Attempt)
	}
	d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
	if err != nil || len(d.Attempts) != 1 || d.Attempts[0].Error != r.Attempt.Error {
		t.Fatalf("recorded %v %+v", err, d)
	}
}

// A relay that does not say how long it waits (one from before the hello
// said it) gets the receiver's answer however late, as before; one that
// says 1 s gets the agent's own 504 for an answer after it, with the
// receiver's answer recorded. The fake relay here never times out: what
// it reads is what the agent sent.
func TestLateAnswerByWhatTheRelaySays(t *testing.T) {
	for _, tt := range []struct {
		name     string
		announce string // "" = an older relay
		want     int
	}{
		{"older relay", "", http.StatusOK},
		{"relay waits 1s", "1000", http.StatusGatewayTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan wire.Header, 1)
			p := newPeer(t, func(n int64, ws *websocket.Conn, stop <-chan struct{}) {
				var h http.Header
				if tt.announce != "" {
					h = http.Header{wire.HelloResponseTimeout: {tt.announce}}
				}
				ws.WriteMessage(websocket.BinaryMessage, helloFrame(t, h))
				if n > 1 {
					<-stop
					return
				}
				frame, err := wire.AppendFrame(nil, &wire.Header{Type: wire.TypeDeliver, ID: "d1", Method: "POST", Path: "/slow",
					ReceivedAt: time.Now()}, []byte(`{}`))
				if err != nil {
					t.Error(err)
					return
				}
				ws.WriteMessage(websocket.BinaryMessage, frame)
				for {
					_, msg, err := ws.ReadMessage()
					if err != nil {
						return
					}
					if h, _, err := wire.DecodeFrame(msg); err == nil && h.Type == wire.TypeResponse {
						got <- h
						<-stop
						return
					}
				}
			})
			results := make(chan agent.Result, 1)
			runAgent(t, p.hs.URL, func(c *agent.Config) {
				c.Forward = []string{lateRecv(t, 2*time.Second)}
				c.ForwardTimeout = time.Minute
				c.OnResult = func(r agent.Result) { results <- r }
			})
			var h wire.Header
			select {
			case h = <-got:
			case <-time.After(30 * time.Second):
				t.Fatal("no answer from the agent")
			}
			if h.Status != tt.want {
				t.Fatalf("the agent answered %d, want %d", h.Status, tt.want)
			}
			r := <-results
			late := strings.Contains(r.Attempt.Error, "the sender got 504")
			if r.Status != tt.want || r.Attempt.Status != 200 || late != (tt.want == http.StatusGatewayTimeout) {
				t.Fatalf("result %d, attempt %+v", r.Status, r.Attempt)
			}
			if late && h.Header.Get(devhook.AnswerHeader) != "agent" {
				t.Errorf("the agent's 504 has %s %q, want agent", devhook.AnswerHeader, h.Header.Get(devhook.AnswerHeader))
			}
		})
	}
}

// The first --forward target answers at once, a copy's target after 3 s:
// the answer goes back once the copies are done, after the relay's 1 s,
// so the sender gets 504, and the record and the result say so beside
// the first target's 200 (it was judged in time as soon as the first
// target answered, and recorded as passed on).
func TestLateAnswerWaitsForTheCopies(t *testing.T) {
	copyTarget := lateRecv(t, 3*time.Second)
	tn := newTunnelRelay(t, lateRecv(t, time.Minute), func(c *relay.Config) { c.ResponseTimeout = time.Second },
		func(c *agent.Config) { c.ForwardTimeout = time.Minute })
	tn.cfg.Forward = append(tn.cfg.Forward, copyTarget+"/slow")
	tn.startAgent()
	resp, body := tn.post("/fast", []byte(`{}`), nil)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("sender got %s %q, want the relay's 504", resp.Status, body)
	}
	tn.waitResults(1)
	r := tn.resultsCopy()[0]
	if r.Status != http.StatusGatewayTimeout || r.Attempt == nil || r.Attempt.Status != 200 || !strings.Contains(r.Attempt.Error, "the sender got 504") {
		t.Fatalf("result %d, attempt %+v; want the sender's 504 and the first target's 200", r.Status, r.Attempt)
	}
	if len(r.Copies) != 1 || r.Copies[0].Status != 200 {
		t.Fatalf("copies %+v; want the copy's 200", r.Copies)
	}
	d, err := tn.db.Delivery(resp.Header.Get("Devhook-Delivery"))
	if err != nil || len(d.Attempts) != 2 {
		t.Fatalf("recorded %v %+v", err, d)
	}
	if at := d.Attempts[0]; at.Status != 200 || !strings.Contains(at.Error, "the sender got 504") {
		t.Errorf("recorded attempt: %d %q; want the first target's 200 and what the sender got", at.Status, at.Error)
	}
}
