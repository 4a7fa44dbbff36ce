package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/signature"
)

// bodySize is the size of every delivery body, as in the figures.
const bodySize = 1500

// idWidth is the width of a delivery's sequence id, such as "t32-0000123".
const idWidth = 12

// payload builds 1.5 KB run.status bodies whose run_id is a unique
// sequence id, so that the receiver can tell duplicates and gaps.
type payload struct {
	prefix, suffix []byte
}

func newPayload() payload {
	placeholder := strings.Repeat("#", idWidth)
	b, err := json.Marshal(devhook.NewRunStatus(placeholder, "app-bench", "running", time.Now()))
	if err != nil {
		panic(err) // a fixed struct always encodes
	}
	pad := bodySize - len(b) - len(`,"padding":""`)
	b = append(b[:len(b)-1], `,"padding":"`+strings.Repeat("x", max(pad, 0))+`"}`...)
	i := bytes.Index(b, []byte(placeholder))
	return payload{prefix: b[:i], suffix: b[i+idWidth:]}
}

// body returns the body carrying id, which is padded or cut to idWidth.
func (p payload) body(id string) []byte {
	b := make([]byte, 0, len(p.prefix)+idWidth+len(p.suffix))
	b = append(b, p.prefix...)
	b = append(b, fmt.Sprintf("%-*.*s", idWidth, idWidth, id)...)
	return append(b, p.suffix...)
}

// seqID is the id of request i of phase.
func seqID(phase string, i int) string {
	return fmt.Sprintf("%s-%0*d", phase, idWidth-len(phase)-1, i)
}

// runIDOf finds the run_id in a body built by payload, without decoding it.
func runIDOf(body []byte) string {
	const key = `"run_id":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 || len(body) < i+len(key)+idWidth {
		return ""
	}
	return strings.TrimRight(string(body[i+len(key):i+len(key)+idWidth]), " ")
}

// counter is the receiver's tally: how often each id arrived, and how many
// requests failed the signature check (the tunnel changed bytes).
type counter struct {
	mu      sync.Mutex
	seen    map[string]int
	badSig  int
	arrived atomic.Int64
}

func newCounter() *counter { return &counter{seen: make(map[string]int)} }

func (c *counter) add(body []byte, v devhook.Verdict) {
	id := runIDOf(body)
	c.mu.Lock()
	c.seen[id]++
	if !v.OK() {
		c.badSig++
	}
	c.mu.Unlock()
	c.arrived.Add(1)
}

// tally returns how many distinct ids of phase arrived, and how many
// arrivals beyond the first there were.
func (c *counter) tally(phase string) (delivered, duplicates, badSig int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.seen {
		if strings.HasPrefix(id, phase+"-") {
			delivered++
			duplicates += n - 1
		}
	}
	return delivered, duplicates, c.badSig
}

// missing returns how many of the requests of phase numbered in answered
// have not reached the receiver.
func (c *counter) missing(phase string, answered []int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, i := range answered {
		if c.seen[seqID(phase, i)] == 0 {
			n++
		}
	}
	return n
}

// await waits until every request of phase numbered in answered has
// reached the receiver, or until limit, and returns how many have not:
// a delivery queued (202) reaches it only once its agent is back.
func (c *counter) await(ctx context.Context, phase string, answered []int, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		n := c.missing(phase, answered)
		if n == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits until no request has arrived at the receiver for quiet, or
// until limit, so that late duplicates are counted.
func (c *counter) settle(ctx context.Context, quiet, limit time.Duration) {
	deadline := time.Now().Add(limit)
	last := c.arrived.Load()
	t := time.NewTicker(quiet)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := c.arrived.Load()
		if now == last {
			return
		}
		last = now
	}
}

// receiverServer is the reference receiver on 127.0.0.1, counting.
type receiverServer struct {
	URL   string
	count *counter
	srv   *http.Server
	done  chan struct{}
}

func startReceiver(secret string) (*receiverServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start the receiver: %w", err)
	}
	r := &receiverServer{URL: "http://" + ln.Addr().String(), count: newCounter(), done: make(chan struct{})}
	r.srv = &http.Server{
		Handler: receiver.New(receiver.Config{Secret: secret, OnRequest: func(_ *http.Request, body []byte, v devhook.Verdict) {
			r.count.add(body, v)
		}}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		defer close(r.done)
		r.srv.Serve(ln)
	}()
	return r, nil
}

func (r *receiverServer) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

// newSenderClient is the senders' client: keep-alive connections, one per
// sender.
func newSenderClient(conc int) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        conc * 2,
		MaxIdleConnsPerHost: conc * 2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// loadResult is what the senders saw in one phase.
type loadResult struct {
	Sent      int
	OK        int // 2xx answers
	Queued    int // of which 202: no agent at that moment, the relay queued it
	Failed    int // errors and other statuses
	Refused   int // of which errors without an answer (the connection failed)
	FirstErr  string
	Elapsed   time.Duration
	Latencies []time.Duration // sorted
	// Answered is, with plan.keepOK, the requests answered 2xx (202
	// included), by number, in no order: the deliveries the relay took
	// responsibility for, which must all reach the receiver.
	Answered []int
}

func (r loadResult) rps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Elapsed.Seconds()
}

func (r loadResult) quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)-1))
	return r.Latencies[i]
}

// target is where senders post: URL, with Host as the request's Host
// header when it is not empty (a tunnel that tells its tunnels apart by
// name, such as frp's and localtunnel's, serves them all on one port).
type target struct {
	URL  string
	Host string
}

// drive sends up to n signed POSTs to t from conc senders, stopping at the
// deadline of limit, and measures each request's latency.
func drive(ctx context.Context, t target, secret, phase string, conc, n int, limit time.Duration) loadResult {
	return driveWith(ctx, plan{to: func(int) target { return t }}, secret, phase, conc, n, limit)
}

// plan says where each request of a phase goes, and what the senders
// remember.
type plan struct {
	to func(i int) target // where request i goes
	// refused, when not nil, is told of a request to t that got no
	// answer (its connection failed, or it timed out).
	refused func(t target, err error)
	keepOK  bool          // fill loadResult.Answered
	timeout time.Duration // the senders' client timeout; 0: 30s
	// grace is how long the requests under way at the phase's limit may
	// still take; 0 cuts them at the limit.
	grace time.Duration
}

// driveWith sends up to n signed POSTs, request i to p.to(i), from conc
// senders, stopping at the deadline of limit, and measures each request's
// latency.
func driveWith(ctx context.Context, p plan, secret, phase string, conc, n int, limit time.Duration) loadResult {
	client := newSenderClient(conc)
	if p.timeout > 0 {
		client.Timeout = p.timeout
	}
	defer client.CloseIdleConnections()
	pl := newPayload()
	reqCtx, cancelReqs := context.WithTimeout(ctx, limit+p.grace)
	defer cancelReqs()
	ctx, cancel := context.WithTimeout(reqCtx, limit)
	defer cancel()

	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	answered := make([][]int, conc)
	var ok, queued, failed, refused atomic.Int64
	var errOnce sync.Once
	var firstErr string
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, min(n/conc+1, 1<<16))
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					break
				}
				t := p.to(i)
				body := pl.body(seqID(phase, i))
				req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, t.URL, bytes.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				if t.Host != "" {
					req.Host = t.Host
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("User-Agent", "service-webhooks/bench")
				req.Header.Set(devhook.SignatureHeader, signature.Sign(secret, time.Now(), body))
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				d := time.Since(t0)
				switch {
				case err != nil && reqCtx.Err() != nil:
					// Cut by the phase's time limit.
					failed.Add(1)
				case err != nil:
					failed.Add(1)
					refused.Add(1)
					errOnce.Do(func() { firstErr = err.Error() })
					if p.refused != nil {
						p.refused(t, err)
					}
				case resp.StatusCode/100 != 2:
					failed.Add(1)
					errOnce.Do(func() { firstErr = resp.Status })
				default:
					ok.Add(1)
					if resp.StatusCode == http.StatusAccepted {
						queued.Add(1)
					}
					if p.keepOK {
						answered[w] = append(answered[w], i)
					}
				}
				mine = append(mine, d)
			}
			lat[w] = mine
		}()
	}
	wg.Wait()
	r := loadResult{Elapsed: time.Since(start), OK: int(ok.Load()), Queued: int(queued.Load()), Failed: int(failed.Load()),
		Refused: int(refused.Load()), FirstErr: firstErr}
	for w, l := range lat {
		r.Latencies = append(r.Latencies, l...)
		r.Answered = append(r.Answered, answered[w]...)
	}
	slices.Sort(r.Latencies)
	r.Sent = len(r.Latencies)
	return r
}
