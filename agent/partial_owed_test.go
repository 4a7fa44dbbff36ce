package agent_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
)

// An owed delivery whose body file is damaged (bytes written in the
// middle of it, as a disk or a hand would) is never sent with a wrong or
// empty body, and is not owed for ever either: the agent says once that
// it cannot read it, and gives up on it once --retry-for has passed, as
// for a receiver that never takes it. Before, each retry read it, found
// it partial, and rescheduled it a second later without a word, past
// --retry-for, for as long as listen ran.
func TestOwedDeliveryWithADamagedBodyIsGivenUp(t *testing.T) {
	var got atomic.Int32
	var mu sync.Mutex
	refuse := true
	addr := downAddr(t)
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			w.WriteHeader(http.StatusServiceUnavailable) // owed
			return
		}
		got.Add(1)
	}))
	var logMu sync.Mutex
	var lines []string
	tn := newTunnel(t, "http://"+addr, func(c *agent.Config) {
		c.RetryMinBackoff, c.RetryMaxBackoff = time.Hour, time.Hour // no retry before the restart
		c.Logf = func(f string, a ...any) {
			t.Logf(f, a...)
			logMu.Lock()
			lines = append(lines, fmt.Sprintf(f, a...))
			logMu.Unlock()
		}
	})
	body := []byte(`{"type":"run.status","data":{"run_id":"r1","pad":"` + strings.Repeat("x", 4000) + `"}}`)
	resp, _ := tn.post("/q", body, signed(body))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery with no agent: %s, want 202", resp.Status)
	}
	id := resp.Header.Get("Devhook-Delivery")
	tn.startAgent()
	eventually(t, "the delivery owed", func() bool { return len(retryStates(t, tn.db)) == 1 })
	tn.stopAgent()

	// Its body in its body file, once the batch is in bbolt: damaged in
	// the middle.
	file := filepath.Join(tn.dir, "deliveries.db.bodies", "00000001")
	eventually(t, "the body in its body file", func() bool {
		b, err := os.ReadFile(file)
		return err == nil && bytes.Contains(b, body)
	})
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, body) + len(body)/2
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("DAMAGED"), int64(at)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := tn.db.Delivery(id); err == nil {
		t.Fatal("the damaged body reads")
	}

	mu.Lock()
	refuse = false
	mu.Unlock()
	said := func() int {
		logMu.Lock()
		defer logMu.Unlock()
		n := 0
		for _, l := range lines {
			if strings.Contains(l, "is not sent") {
				n++
			}
		}
		return n
	}
	// Within --retry-for: read again and again with the retries' backoff,
	// said once, not sent.
	tn.cfg.RetryMinBackoff, tn.cfg.RetryMaxBackoff = 5*time.Millisecond, 40*time.Millisecond
	tn.startAgent()
	eventually(t, "its damage said", func() bool { return said() > 0 })
	tn.stopAgent()
	// Past --retry-for: given up.
	tn.cfg.RetryFor = time.Millisecond // passed since its first attempt
	tn.startAgent()
	eventually(t, "the delivery given up", func() bool {
		st, ok := retryStates(t, tn.db)[id]
		return ok && st.State == devhook.RetryFailed
	})
	st := retryStates(t, tn.db)[id]
	if !strings.Contains(st.Reason, "body cannot be read") || !strings.Contains(st.Reason, "nothing was sent") {
		t.Errorf("reason %q: want it to say that its body cannot be read and nothing was sent", st.Reason)
	}
	eventually(t, "its end said", func() bool {
		for _, r := range tn.resultsCopy() {
			if r.GaveUp && r.Delivery.ID == id {
				return true
			}
		}
		return false
	})
	tn.stopAgent()
	if n := said(); n != 1 {
		t.Errorf("its damage said %d times, want once", n)
	}
	if n := got.Load(); n != 0 {
		t.Errorf("the receiver got %d requests after the damage, want none", n)
	}
}

// An owed delivery whose first attempt cannot be read (its value damaged
// while the agent was stopped), its request whole, is retried and reaches
// the receiver as it arrived: the unreadable attempt is its history, not
// what is sent. Before, it was never sent, and given up after
// --retry-for as for one whose body cannot be read.
func TestOwedDeliveryWithAnUnreadableAttemptIsRetried(t *testing.T) {
	var mu sync.Mutex
	refuse := true
	var got [][]byte
	addr := downAddr(t)
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			w.WriteHeader(http.StatusServiceUnavailable) // owed
			return
		}
		got = append(got, b)
	}))
	tn := newTunnel(t, "http://"+addr, func(c *agent.Config) {
		c.RetryMinBackoff, c.RetryMaxBackoff = time.Hour, time.Hour // no retry before the restart
	})
	body := []byte(`{"type":"run.status","data":{"run_id":"r1"}}`)
	resp, _ := tn.post("/q", body, signed(body))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery with no agent: %s, want 202", resp.Status)
	}
	id := resp.Header.Get("Devhook-Delivery")
	tn.startAgent()
	eventually(t, "the delivery owed", func() bool { return len(retryStates(t, tn.db)) == 1 })
	tn.damageStore(t, func(path string) { damageValue(t, path, "attempts", attemptKey(id, 1)) })
	if d, err := tn.db.Delivery(id); err == nil || d == nil || d.Attempts[0].ReadError == "" || d.BodyError != "" {
		t.Fatalf("delivery %+v, %v: want its first attempt unreadable, its body whole", d, err)
	}

	mu.Lock()
	refuse = false
	mu.Unlock()
	fastRetries(&tn.cfg)
	tn.startAgent()
	eventually(t, "the delivery retried, no longer owed", func() bool { return len(retryStates(t, tn.db)) == 0 })
	tn.stopAgent()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !bytes.Equal(got[0], body) {
		t.Errorf("the receiver took %q, want the delivery once, as it arrived", got)
	}
	d, _ := tn.db.Delivery(id)
	if last := d.LastAttempt(); d == nil || last.Kind != devhook.AttemptRetry || last.Status != http.StatusOK {
		t.Errorf("delivery %+v: want the retry that delivered it recorded", d)
	}
}

// After a restart, an owed delivery whose body cannot be read keeps its
// place in its run: the later delivery of its run, owed behind it, still
// waits for it (here until it is given up), as before the restart.
// Before, its run could not be told, so it waited for no other and held
// up none: the later one went first at once.
func TestOwedPartialDeliveryKeepsItsRunAfterRestart(t *testing.T) {
	var mu sync.Mutex
	refuse := true
	var got []string
	addr := downAddr(t)
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			w.WriteHeader(http.StatusServiceUnavailable) // owed
			return
		}
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
	}))
	received := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	var logMu sync.Mutex
	said := 0
	var saying string
	tn := newTunnel(t, "http://"+addr, func(c *agent.Config) {
		c.RetryMinBackoff, c.RetryMaxBackoff = time.Hour, time.Hour // no retry before the restart
		c.Logf = func(f string, a ...any) {
			t.Logf(f, a...)
			if line := fmt.Sprintf(f, a...); strings.Contains(line, "is not sent") {
				logMu.Lock()
				said++
				saying = line
				logMu.Unlock()
			}
		}
	})
	var ids []string
	for _, st := range []string{"queued", "running"} {
		body := []byte(`{"type":"run.status","data":{"run_id":"r1","status_v2":"` + st + `"}}`)
		resp, _ := tn.post("/q", body, signed(body))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery with no agent: %s, want 202", resp.Status)
		}
		ids = append(ids, resp.Header.Get("Devhook-Delivery"))
	}
	tn.startAgent()
	eventually(t, "both deliveries owed", func() bool { return len(retryStates(t, tn.db)) == 2 })
	tn.damageStore(t, func(path string) { damageValue(t, path, "bodies", []byte(ids[0])) })
	if d, err := tn.db.Delivery(ids[0]); err == nil || d == nil || d.BodyError == "" {
		t.Fatalf("delivery %+v, %v: want its body unreadable", d, err)
	}

	mu.Lock()
	refuse = false
	mu.Unlock()
	// Both resumed at once: the first is read and not sent; the second,
	// had it lost its run, would be sent in the same round, before the
	// agent stops (it waits for the retries under way).
	fastRetries(&tn.cfg)
	tn.startAgent()
	eventually(t, "the first's damage said", func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		return said > 0
	})
	tn.stopAgent()
	if r := received(); len(r) != 0 {
		t.Fatalf("the receiver took %v before the first of the run was given up, want nothing", r)
	}
	// What it holds up is said with it: nothing else says why the rest of
	// the run does not come (their lines were printed before the restart).
	logMu.Lock()
	if !strings.Contains(saying, "the later delivery of its run waits behind it") {
		t.Errorf("the damage said %q: want it to say that the later delivery of its run waits behind it", saying)
	}
	logMu.Unlock()
	// Past --retry-for: the first given up, the second follows.
	tn.cfg.RetryFor = time.Millisecond
	tn.startAgent()
	eventually(t, "the second delivered", func() bool { return len(received()) == 1 })
	tn.stopAgent()
	if r := received(); len(r) != 1 || !strings.Contains(r[0], `"running"`) {
		t.Errorf("the receiver took %q, want the second delivery alone", r)
	}
	if st := retryStates(t, tn.db)[ids[0]]; st.State != devhook.RetryFailed {
		t.Errorf("the first's state %+v, want it given up", st)
	}
}
