//go:build unix

package agent_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/receiver"
)

// These benchmarks pin what one delivery costs through relay, agent and
// store in this process, with verification and recording on, next to
// the same POST straight to the receiver: allocs/op and cpu-µs/op (the
// process's CPU time, senders and receiver included, per delivery). The
// tunnel's own share is the difference between BenchmarkDelivery* and
// BenchmarkDirect*. `go run ./bench` measures the same with separate
// processes; these show a regression in a single `go test -bench`.

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs post b.N times from conc senders and reports CPU per op.
func measure(b *testing.B, conc int, post func(*http.Client)) {
	clients := make([]*http.Client, conc)
	for i := range clients {
		clients[i] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		post(clients[i]) // a warm connection each
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	work := make(chan struct{}, conc)
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				post(clients[i])
			}
		}()
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	for _, c := range clients {
		c.CloseIdleConnections()
	}
}

func benchDirect(b *testing.B, conc int) {
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	body := benchBody(b)
	measure(b, conc, func(c *http.Client) { benchPost(b, c, recv.URL+"/hook", body) })
}

func benchDelivery(b *testing.B, conc int) {
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	tn := newTunnel(b, recv.URL, func(c *agent.Config) { c.OnResult = func(agent.Result) {}; c.Logf = nil })
	tn.startAgent()
	body := benchBody(b)
	url := tn.url("/hook")
	measure(b, conc, func(c *http.Client) { benchPost(b, c, url, body) })
}

func BenchmarkDirectSerial(b *testing.B)     { benchDirect(b, 1) }
func BenchmarkDirectParallel(b *testing.B)   { benchDirect(b, 32) }
func BenchmarkDeliverySerial(b *testing.B)   { benchDelivery(b, 1) }
func BenchmarkDeliveryParallel(b *testing.B) { benchDelivery(b, 32) }

// mallocsPer returns the heap allocations per call of post, over n calls
// from one sender, after a warm-up.
func mallocsPer(n int, post func()) float64 {
	for range 50 {
		post()
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		post()
	}
	runtime.ReadMemStats(&m1)
	return float64(m1.Mallocs-m0.Mallocs) / float64(n)
}

// maxDeliveryAllocs is the pinned number of heap allocations of one
// delivery in relay, agent and store: 81-84 measured with a verify that
// does not allocate, a forward to one target without goroutine state on
// the heap and no run key built when nothing is owed (87-90 just before,
// on the same machine), 91-98 with the journal in mapped files and the
// forward's heads written and read by hand (the journal's batches make it
// vary), from 105-147 before the mapped journal, 131-162 before the
// hand-written heads (TestForwardAllocations) and 269 before the work on
// speed. Most of what is left is net/http's (the
// relay's server reading the sender's request and writing its answer) and
// bbolt's cursors.
const maxDeliveryAllocs = 100

// TestDeliveryAllocations pins the heap allocations one delivery costs in
// relay, agent and store together: the allocations of a delivery through
// the tunnel less those of the same POST straight to the receiver (the
// sender's and the receiver's own). Allocation counts do not depend on
// the machine's speed; background work (the journal's batches) is
// averaged over many deliveries.
func TestDeliveryAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are checked without -race")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	recv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret}))
	defer recv.Close()
	tn := newTunnel(t, recv.URL, func(c *agent.Config) { c.OnResult = func(agent.Result) {}; c.Logf = nil })
	tn.startAgent()
	b := t
	body := benchBody(b)
	client := &http.Client{Timeout: 10 * time.Second}
	direct := mallocsPer(500, func() { benchPost(b, client, recv.URL+"/hook", body) })
	tunnel := mallocsPer(500, func() { benchPost(b, client, tn.url("/hook"), body) })
	own := tunnel - direct
	t.Logf("allocations per delivery: %.0f through the tunnel, %.0f direct: %.0f in relay, agent and store", tunnel, direct, own)
	if own > maxDeliveryAllocs {
		t.Errorf("one delivery allocates %.0f times in relay, agent and store, over the %d pinned; find the new ones with go test -bench DeliverySerial -memprofile", own, maxDeliveryAllocs)
	}
}
