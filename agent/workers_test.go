package agent_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/relay"
)

// workers counts the goroutines running the agent's delivery workers.
func workers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "agent.(*Agent).serve.func") && !strings.Contains(g, "context.AfterFunc") {
			count++
		}
	}
	return count
}

// Deliveries run on at most Concurrency workers at once; a worker stays
// for the next delivery rather than a goroutine being started (and its
// stack grown) for each; and the workers are gone once Run returns.
func TestServe_WorkersBoundedReusedAndStopped(t *testing.T) {
	const conc = 3
	var mu sync.Mutex
	inFlight, most := 0, 0
	release := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	defer recv.Close()
	tn := newTunnel(t, recv.URL, func(c *agent.Config) { c.Concurrency = conc })
	tn.startAgent()

	const first = 8
	var wg sync.WaitGroup
	statuses := make(chan int, first)
	for range first {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := tn.post("/hook", []byte(`{}`), nil)
			statuses <- resp.StatusCode
		}()
	}
	eventually(t, "the receiver holding Concurrency deliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inFlight == conc
	})
	if n := workers(); n != conc {
		t.Errorf("%d workers with %d deliveries waiting for the receiver, want %d", n, first, conc)
	}
	close(release)
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != http.StatusOK {
			t.Errorf("a sender got %d", st)
		}
	}
	if most > conc {
		t.Errorf("the receiver had %d deliveries at once; Concurrency is %d", most, conc)
	}

	// The workers wait for the next delivery, and take it: their number
	// does not grow.
	idle := workers()
	if idle < 1 || idle > conc {
		t.Fatalf("%d workers after the deliveries were answered, want 1 to %d", idle, conc)
	}
	for range 5 {
		if resp, _ := tn.post("/hook", []byte(`{}`), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("sender got %s", resp.Status)
		}
	}
	if n := workers(); n > conc {
		t.Errorf("%d workers after more deliveries, want at most %d", n, conc)
	}

	// Run waited for every worker to be done; a goroutine that called
	// Done is gone a moment later (it still shows in a stack dump while
	// it returns), so its end is waited for, with eventually's deadline.
	tn.stopAgent()
	eventually(t, "no workers left after Run returned", func() bool { return workers() == 0 })
}

// An idle agent keeps nothing of the deliveries it handled: a large body,
// or a large answer, is freed once it is recorded and answered, by the
// worker that waits for the next delivery, by the kept-alive connection to
// the receiver, and by the relay (in this process too).
func TestServe_IdleAgentKeepsNoBody(t *testing.T) {
	const size = 8 << 20 // under the relay's 10 MiB default
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/big-answer" {
			w.Write(make([]byte, size))
		}
	}))
	defer recv.Close()
	tn := newTunnel(t, recv.URL, func(c *agent.Config) { c.OnResult = func(agent.Result) {} })
	tn.startAgent()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	if resp, _ := tn.post("/small", []byte(`{}`), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("sender got %s", resp.Status)
	}
	base := heap()
	if resp, _ := tn.post("/big", make([]byte, size), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("sender got %s", resp.Status)
	}
	if n := workers(); n < 1 {
		t.Fatalf("%d workers after a delivery, want an idle one", n)
	}
	// The journal applies the record to bbolt within journalDelay and
	// drops its copy; then nothing in this process should hold the body.
	eventually(t, "the body freed", func() bool { return heap() < base+size/2 })

	resp, body := tn.post("/big-answer", []byte(`{}`), nil)
	if resp.StatusCode != http.StatusOK || len(body) != size {
		t.Fatalf("sender got %s with %d bytes, want %d", resp.Status, len(body), size)
	}
	eventually(t, "the answer freed", func() bool { return heap() < base+size/2 })
}

// Stopping the agent while every worker waits for a slow receiver that
// does not answer, with more deliveries behind them than Concurrency and
// nobody reading: the forwards under way are cut after ShutdownGrace, Run
// returns, no worker is left, and every sender gets 202 from the relay,
// which keeps what the agent did not answer.
func TestServe_StopWhileEveryWorkerWaitsForASlowReceiver(t *testing.T) {
	const conc, senders = 32, 40
	var mu sync.Mutex
	inFlight := 0
	release := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		mu.Unlock()
		<-release
	}))
	defer recv.Close()
	defer close(release) // before recv.Close, which waits for its handlers
	tn := newTunnel(t, recv.URL, func(c *agent.Config) { c.Concurrency = conc })
	tn.startAgent()

	statuses := make(chan int, senders)
	for i := range senders {
		go func() {
			// Each on a path of its own: no run's line keeps one back.
			resp, _ := tn.post("/slow/"+strings.Repeat("x", i+1), []byte(`{}`), nil)
			statuses <- resp.StatusCode
		}()
	}
	eventually(t, "every worker waiting for the receiver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inFlight == conc
	})
	tn.stopAgent()
	eventually(t, "no workers left after Run returned", func() bool { return workers() == 0 })
	for range senders {
		if st := <-statuses; st != http.StatusAccepted {
			t.Errorf("a sender got %d, want 202", st)
		}
	}
}

// A worker hands the turn to read on before a write that may wait: a large
// body that the receiver does not read, on a kept-alive connection (no
// dial to hand it on before), holds its worker only, and the next
// deliveries are read and forwarded meanwhile.
func TestServe_StalledLargeBodyDoesNotHoldTheReading(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var conns sync.WaitGroup
	t.Cleanup(func() { close(stop); ln.Close(); conns.Wait() })
	stalled := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { // a receiver as few lines of HTTP as it takes
				defer conns.Done()
				defer c.Close()
				go func() { <-stop; c.Close() }()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.URL.Path == "/stall" {
						stalled <- struct{}{}
						<-stop // reads nothing more
						return
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
				}
			}()
		}
	}()
	tn := newTunnelRelay(t, "http://"+ln.Addr().String(), func(c *relay.Config) {
		c.MaxBody, c.MaxChannelInflight, c.MaxInflight = 64<<20, 64<<20, 64<<20
	}, func(c *agent.Config) { c.Concurrency = 4; c.ForwardTimeout = time.Minute })
	tn.startAgent()

	// One kept-alive connection to the receiver, which the large body
	// takes next.
	if resp, _ := tn.post("/warm", []byte(`{}`), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("first delivery: %s", resp.Status)
	}
	big := bytes.Repeat([]byte("x"), 32<<20) // beyond the sockets' buffers
	go func() {
		req, _ := http.NewRequest(http.MethodPost, tn.url("/stall"), bytes.NewReader(big))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the large body never reached the receiver")
	}
	for i := range 3 {
		if resp, _ := tn.post("/after", []byte(`{}`), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery %d after the stalled one: %s", i, resp.Status)
		}
	}
}

// A forward through net/http's client (Config.Client set: the agent's own
// connections are not used) hands the turn to read on before it: a
// receiver that holds one delivery's answer holds that delivery only.
func TestServe_ClientForwardDoesNotHoldTheReading(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-release
		}
	}))
	defer recv.Close()
	defer close(release)
	tn := newTunnel(t, recv.URL, func(c *agent.Config) { c.Client = recv.Client(); c.ForwardTimeout = 2 * time.Minute })
	tn.startAgent()
	go func() {
		req, _ := http.NewRequest(http.MethodPost, tn.url("/hold"), strings.NewReader(`{}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the held delivery never reached the receiver")
	}
	for i := range 3 {
		if resp, _ := tn.post("/after", []byte(`{}`), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery %d after the held one: %s", i, resp.Status)
		}
	}
}
