package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
)

// Routes through a real relay and agent: each delivery reaches the
// receiver its first matching route names, the rest the --forward target;
// a drop is recorded and answered 202; every attempt records its route.
func TestRoutesTakeDeliveriesToTheirReceivers(t *testing.T) {
	recA, a := newRecorder(t)
	recB, b := newRecorder(t)
	recC, c := newRecorder(t)
	recB.answer = func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201); io.WriteString(w, "B") }
	routes := []string{
		"path:/b/** -> " + b.URL + "/base?k=v",
		"json:data.items.1.kind=c & header:x-env=test -> " + c.URL,
		"header:X-Drop=yes -> drop",
	}
	tn := newTunnel(t, a.URL, func(cfg *agent.Config) { cfg.Routes = mustRoutes(t, routes...) })
	tn.startAgent()

	type sent struct {
		path   string
		body   string
		header http.Header
		status int
		route  int
	}
	cases := []sent{
		{"/b/one?q=1", `{}`, nil, 201, 1},
		{"/b", `{}`, nil, 201, 1},
		{"/x", `{"data":{"items":[{"kind":"a"},{"kind":"c"}]}}`, http.Header{"X-Env": {"test"}}, 200, 2},
		{"/x", `{"data":{"items":[{"kind":"a"},{"kind":"c"}]}}`, nil, 200, 0}, // the header does not hold
		{"/b/drop", `{}`, http.Header{"X-Drop": {"yes"}}, 201, 1},             // route 1 comes first
		{"/x", `{}`, http.Header{"X-Drop": {"yes"}}, 202, 3},
		{"/other", `{}`, nil, 200, 0},
	}
	ids := make([]string, len(cases))
	for i, s := range cases {
		h := signed([]byte(s.body))
		for k, v := range s.header {
			h[k] = v
		}
		resp, body := tn.post(s.path, []byte(s.body), h)
		ids[i] = resp.Header.Get("Devhook-Delivery")
		if resp.StatusCode != s.status {
			t.Fatalf("%s %s: sender got %s %q, want %d", s.path, s.body, resp.Status, body, s.status)
		}
		if s.route == 3 {
			var ans struct {
				Dropped bool   `json:"dropped"`
				ID      string `json:"id"`
				Route   int    `json:"route"`
				Text    string `json:"route_text"`
				Reason  string `json:"reason"`
			}
			if err := json.Unmarshal(body, &ans); err != nil || !ans.Dropped || ans.Route != 3 || ans.ID != ids[i] || ans.Text != routes[2] ||
				!strings.Contains(ans.Reason, "devhook dropped this delivery by route 3") || resp.Header.Get(devhook.AnswerHeader) != "agent" {
				t.Fatalf("the drop's answer: %q %v, %+v", body, err, resp.Header)
			}
		}
	}
	tn.waitResults(len(cases))
	if got := recB.requests(); len(got) != 3 || got[0].RequestURI != "/base/b/one?k=v&q=1" || got[1].RequestURI != "/base/b?k=v" {
		t.Errorf("receiver B got %d requests %+v", len(got), got)
	}
	if got := recC.requests(); len(got) != 1 || got[0].RequestURI != "/x" {
		t.Errorf("receiver C got %+v", got)
	}
	if got := recA.requests(); len(got) != 2 || got[0].RequestURI != "/x" || got[1].RequestURI != "/other" {
		t.Errorf("receiver A (--forward) got %+v", got)
	}
	waitStored(t, tn.db, len(cases))
	for i, s := range cases {
		d, err := tn.db.Delivery(ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Attempts) != 1 {
			t.Fatalf("delivery %d: %d attempts", i, len(d.Attempts))
		}
		at := d.Attempts[0]
		rt := at.Route
		if rt == nil || rt.Index != s.route || (s.route > 0 && rt.Text != routes[s.route-1]) || (s.route == 0 && rt.Text != devhook.RouteDefault) {
			t.Errorf("delivery %d (%s): route %+v, want %d", i, s.path, rt, s.route)
			continue
		}
		if s.route == 3 {
			if at.Kind != devhook.AttemptDrop || at.Target != devhook.RouteDrop || at.Status != 0 || at.Error != "" || rt.Target != devhook.RouteDrop {
				t.Errorf("the drop's attempt: %+v", at)
			}
		} else if at.Kind != devhook.AttemptForward || at.Status != s.status {
			t.Errorf("delivery %d: attempt %+v", i, at)
		}
		if r := d.ArrivalRoute(); r == nil || r.Index != s.route {
			t.Errorf("delivery %d: ArrivalRoute %+v", i, r)
		}
	}
	for _, r := range tn.resultsCopy() {
		if r.Delivery.Route == nil {
			t.Errorf("result of %s without its route", r.Delivery.ID)
		}
	}

	// A replay goes where the routes send the delivery now; --to where it
	// says; a replay of a dropped one needs a target.
	ag, err := agent.New(tn.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at, err := ag.Replay(ctx, ids[0], devhook.ReplayOptions{})
	if err != nil || at.Status != 201 || at.Route == nil || at.Route.Index != 1 || !strings.HasPrefix(at.Target, b.URL+"/base/b/one") {
		t.Fatalf("replay of a delivery of route 1: %+v %v", at, err)
	}
	if target, rt := ag.ReplayTarget(mustDelivery(t, tn, ids[2])); target != c.URL+"/x" || rt.Index != 2 {
		t.Errorf("ReplayTarget of route 2's delivery: %q %+v", target, rt)
	}
	if target, rt := ag.ReplayTarget(mustDelivery(t, tn, ids[5])); target != "" || !rt.Drop() {
		t.Errorf("ReplayTarget of a dropped delivery: %q %+v", target, rt)
	}
	_, err = ag.Replay(ctx, ids[5], devhook.ReplayOptions{})
	if devhook.ErrorCode(err) != devhook.EINVALID || !strings.Contains(err.Error(), "route 3") || !strings.Contains(err.Error(), "needs a target") {
		t.Fatalf("replay of a dropped delivery: %v", err)
	}
	// Offline (no targets): where it went last, with that route.
	off, err := agent.New(agent.Config{Store: tn.db})
	if err != nil {
		t.Fatal(err)
	}
	if at, err := off.Replay(ctx, ids[2], devhook.ReplayOptions{}); err != nil || !strings.HasPrefix(at.Target, c.URL) {
		t.Fatalf("offline replay: %+v %v", at, err)
	}
	if _, err = off.Replay(ctx, ids[5], devhook.ReplayOptions{}); devhook.ErrorCode(err) != devhook.EINVALID || !strings.Contains(err.Error(), "dropped by route 3") {
		t.Fatalf("offline replay of a dropped delivery: %v", err)
	}
	at, err = ag.Replay(ctx, ids[5], devhook.ReplayOptions{To: a.URL})
	if err != nil || at.Status != 200 || at.Route != nil || at.Target != a.URL+"/x" {
		t.Fatalf("replay of a dropped delivery --to: %+v %v", at, err)
	}
	// An edited body is routed as edited.
	at, err = ag.Replay(ctx, ids[3], devhook.ReplayOptions{HasBody: true, Body: []byte(`{"data":{"items":[0,{"kind":"c"}]}}`),
		Header: http.Header{"X-Env": {"test"}}})
	if err != nil || at.Route == nil || at.Route.Index != 2 || !strings.HasPrefix(at.Target, c.URL) {
		t.Fatalf("replay of an edited delivery: %+v %v", at, err)
	}
}

func mustDelivery(t *testing.T, tn *tunnel, id string) *devhook.Delivery {
	t.Helper()
	d, err := tn.db.Delivery(id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A route to a receiver that is down behaves as --forward does: a live
// sender gets 502, a queued delivery is owed and retried to that route's
// receiver, the one chosen at arrival, after a restart with other routes
// too; a dropped queued delivery is not owed.
func TestRouteToADownReceiver(t *testing.T) {
	recA, a := newRecorder(t)
	addr := downAddr(t)
	routes := []string{"path:/b/** -> http://" + addr, "path:/gone/** -> drop"}
	tn := newTunnel(t, a.URL, func(cfg *agent.Config) {
		fastRetries(cfg)
		cfg.Routes = mustRoutes(t, routes...)
	})
	tn.startAgent()
	resp, body := tn.post("/b/live", []byte("x"), nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "connection refused") {
		t.Fatalf("live delivery to a route whose receiver is down: %s %q, want 502", resp.Status, body)
	}
	tn.stopAgent()

	// Queued: owed to the route's receiver.
	var queued []string
	// Two to route 1 on one path: in order (no run id: the path is
	// their run).
	for i, p := range []string{"/b/q", "/gone/1", "/b/q", "/a/1"} {
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		resp, _ := tn.post(p, body, signed(body))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("queued %s: %s", p, resp.Status)
		}
		queued = append(queued, resp.Header.Get("Devhook-Delivery"))
	}
	tn.startAgent()
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	eventually(t, "two owed", func() bool { return len(retryStates(t, tn.db)) == 2 })
	states := retryStates(t, tn.db)
	for _, id := range []string{queued[0], queued[2]} {
		st := states[id]
		if st.State != devhook.RetryOwed || st.Route == nil || st.Route.Index != 1 || st.Route.Target != "http://"+addr {
			t.Fatalf("delivery %s: retry state %+v, want owed with route 1", id, st)
		}
	}
	recA.waitFor(t, 1) // /a/1, not held behind the route's owed deliveries
	if d := mustDelivery(t, tn, queued[1]); len(d.Attempts) != 1 || d.Attempts[0].Kind != devhook.AttemptDrop {
		t.Fatalf("the dropped queued delivery: %+v", d.Attempts)
	}
	tn.stopAgent()

	// Restarted without routes: the owed ones still go to route 1's
	// receiver, as chosen at arrival.
	tn.cfg.Routes = nil
	var mu sync.Mutex
	var got []string
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.RequestURI+" "+string(b))
		mu.Unlock()
	}))
	tn.startAgent()
	eventually(t, "nothing owed", func() bool { return len(retryStates(t, tn.db)) == 0 })
	mu.Lock()
	if want := []string{`/b/q {"n":0}`, `/b/q {"n":2}`}; !slices.Equal(got, want) {
		t.Errorf("route 1's receiver got %q, want %q", got, want)
	}
	mu.Unlock()
	if n := len(recA.requests()); n != 1 {
		t.Errorf("the --forward receiver got %d requests, want 1: owed deliveries went to it", n)
	}
	// queued[2], owed behind queued[0] (one run), goes for the first time.
	for id, want := range map[string]string{queued[0]: devhook.AttemptRetry, queued[2]: devhook.AttemptRedelivery} {
		last := mustDelivery(t, tn, id).LastAttempt()
		if last.Kind != want || last.Status != 200 || last.Route == nil || last.Route.Index != 1 {
			t.Errorf("delivery %s: last attempt %+v, want a %s answered 200 by route 1", id, last, want)
		}
	}
}

// Each receiver gets a run's deliveries in order, and one that is down
// holds up no other: a run's delivery routed to a receiver that is up is
// not owed behind one owed to a receiver that is down.
func TestRouteDownReceiverHoldsUpNoOther(t *testing.T) {
	recA, a := newRecorder(t)
	addr := downAddr(t)
	tn := newTunnel(t, a.URL, func(cfg *agent.Config) {
		fastRetries(cfg)
		cfg.RetryMinBackoff = time.Hour // owed for the look
		cfg.Routes = mustRoutes(t, "json:data.status_v2=queued -> http://"+addr)
	})
	for _, st := range []string{"queued", "running", "succeeded"} {
		body := []byte(fmt.Sprintf(`{"event_type":"run.status","data":{"run_id":"r1","status_v2":%q}}`, st))
		if resp, _ := tn.post("/hook", body, signed(body)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("queued: %s", resp.Status)
		}
	}
	tn.startAgent()
	got := recA.waitFor(t, 2)
	if !strings.Contains(string(got[0].Body), "running") || !strings.Contains(string(got[1].Body), "succeeded") {
		t.Errorf("the --forward receiver got %s then %s", got[0].Body, got[1].Body)
	}
	eventually(t, "the queued one owed", func() bool { return len(retryStates(t, tn.db)) == 1 })
}

// A delivery owed to a route's receiver that refuses connections goes as
// soon as that receiver listens again: its port is probed, not only the
// --forward target's, whatever the wait before its next retry.
func TestRouteOwedGoesWhenItsReceiverListens(t *testing.T) {
	_, a := newRecorder(t)
	addr := downAddr(t)
	tn := newTunnel(t, a.URL, func(cfg *agent.Config) {
		cfg.RetryMinBackoff = time.Hour // only the probe can wake it in time
		cfg.RetryMaxBackoff = time.Hour
		cfg.Routes = mustRoutes(t, "path:/b/** -> http://"+addr)
	})
	body := []byte(`{"n":1}`)
	if resp, _ := tn.post("/b/x", body, signed(body)); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("queued: %s", resp.Status)
	}
	tn.startAgent()
	eventually(t, "owed", func() bool { return len(retryStates(t, tn.db)) == 1 })
	rec := &recorder{notify: make(chan struct{}, 16)}
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.got = append(rec.got, seen{Method: r.Method, RequestURI: r.RequestURI})
		rec.mu.Unlock()
		rec.notify <- struct{}{}
	}))
	if got := rec.waitFor(t, 1); got[0].RequestURI != "/b/x" {
		t.Fatalf("route 1's receiver got %+v", got)
	}
	eventually(t, "nothing owed", func() bool { return len(retryStates(t, tn.db)) == 0 })
}

// A dropped delivery that comes again (its ack was lost) is answered from
// the record: no second drop, no retry.
func TestDroppedRedeliveryAnsweredFromTheRecord(t *testing.T) {
	rec, recv := newRecorder(t)
	tn := newTunnel(t, recv.URL, func(cfg *agent.Config) { cfg.Routes = mustRoutes(t, "path:/noise/** -> drop") })
	resp, _ := tn.post("/noise/1", []byte("x"), nil)
	id := resp.Header.Get("Devhook-Delivery")
	queued, err := tn.relayDB.Queued(tn.creds.Channel, "", 10)
	if err != nil || len(queued) != 1 {
		t.Fatalf("queue: %v %d", err, len(queued))
	}
	// As if an earlier agent had dropped it and died before its ack.
	if _, err := tn.db.PutDelivery(queued[0]); err != nil {
		t.Fatal(err)
	}
	rt := agent.NewRouter(tn.cfg.Routes).Match("/noise/1", nil, nil)
	if _, err := tn.db.AddAttempt(id, devhook.Attempt{Kind: devhook.AttemptDrop, Target: devhook.RouteDrop, Route: rt}); err != nil {
		t.Fatal(err)
	}
	tn.startAgent()
	waitQueueEmpty(t, tn.relayDB, tn.creds.Channel)
	tn.waitResults(1)
	if r := tn.resultsCopy()[0]; !r.Duplicate || r.Status != http.StatusAccepted || r.Owed {
		t.Fatalf("result %+v, want a duplicate answered 202, not owed", r)
	}
	if d := mustDelivery(t, tn, id); len(d.Attempts) != 1 || len(retryStates(t, tn.db)) != 0 || len(rec.requests()) != 0 {
		t.Fatalf("attempts %+v, retry states %v, receiver %d", d.Attempts, retryStates(t, tn.db), len(rec.requests()))
	}
}
