package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/wire"
)

// The fault suite: a store whose every method fails in turn, under a real
// relay.Server with real agents on its WebSocket and deliveries coming
// in. The faults are injected (a wrapper of the store under test): a
// store's methods cannot be made to fail one at a time otherwise; the
// stores' own tests make them fail for real (a full tmpfs for relay.db,
// a NATS server stopped). Each method fails with the two kinds of errors
// a store returns: a full disk (relay.ErrStorageFull over ENOSPC) and an
// I/O error. For each:
//
//   - no loop calls the failing method faster than its backoff: the calls
//     over the failure are bounded by the backoff's schedule (retry.go),
//     with slack, plus one call per request that needs it;
//   - the failure is logged a few times, not once per try;
//   - nothing acknowledged is lost: every delivery answered 202, or by
//     the agent, reaches an agent, and the queues end empty;
//   - the relay recovers by itself once the method works again: no new
//     delivery, ack or reconnect is needed for the queue to move.

// faultWindow is how long a method fails.
const faultWindow = 1500 * time.Millisecond

// faultSweep is the sweep interval of the suite's Server: many sweeps in
// a failure.
const faultSweep = 20 * time.Millisecond

// faultWindowSize is the Server's window: removals that fail hold at most
// this many deliveries in flight.
const faultWindowSize = 4

// faultStore wraps a Store: the method named by failing fails with err
// (each call counted) until it is cleared. Queued reports the delivery
// unreadable as damaged, so that the relay parks it (Park is called).
type faultStore struct {
	Store
	mu         sync.Mutex
	failing    string
	err        error
	calls      int
	unreadable string
	parked     map[string]bool
}

// fault returns the error of method while it fails, counting the call.
func (f *faultStore) fault(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing != method {
		return nil
	}
	f.calls++
	return f.err
}

// fail makes method fail with err from now on.
func (f *faultStore) fail(method string, err error) {
	f.mu.Lock()
	f.failing, f.err, f.calls = method, err, 0
	f.mu.Unlock()
}

// recover ends the failure and returns the calls made during it.
func (f *faultStore) recover() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = ""
	return f.calls
}

func (f *faultStore) isParked(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parked[id]
}

func (f *faultStore) PutChannel(ch relay.Channel) error {
	if err := f.fault("PutChannel"); err != nil {
		return err
	}
	return f.Store.PutChannel(ch)
}

func (f *faultStore) Channel(id string) (relay.Channel, error) {
	if err := f.fault("Channel"); err != nil {
		return relay.Channel{}, err
	}
	return f.Store.Channel(id)
}

func (f *faultStore) Enqueue(channel string, d *devhook.Delivery) error {
	if err := f.fault("Enqueue"); err != nil {
		return err
	}
	return f.Store.Enqueue(channel, d)
}

func (f *faultStore) Queued(channel, after string, limit int) ([]*devhook.Delivery, error) {
	if err := f.fault("Queued"); err != nil {
		return nil, err
	}
	ds, err := f.Store.Queued(channel, after, limit)
	f.mu.Lock()
	bad := f.unreadable
	f.mu.Unlock()
	for i, d := range ds {
		if d.ID == bad {
			return ds[:i], fmt.Errorf("storetest: read queue of %s: %w", channel, &relay.UnreadableError{ID: bad, Err: errors.New("injected: a damaged entry")})
		}
	}
	return ds, err
}

func (f *faultStore) Dequeue(channel string, ids ...string) error {
	if err := f.fault("Dequeue"); err != nil {
		return err
	}
	return f.Store.Dequeue(channel, ids...)
}

func (f *faultStore) Park(channel, id, reason string) error {
	if err := f.fault("Park"); err != nil {
		return err
	}
	if err := f.Store.Park(channel, id, reason); err != nil {
		return err
	}
	f.mu.Lock()
	if f.parked == nil {
		f.parked = make(map[string]bool)
	}
	f.parked[id] = true
	f.mu.Unlock()
	return nil
}

func (f *faultStore) QueueLen(channel string) (int, error) {
	if err := f.fault("QueueLen"); err != nil {
		return 0, err
	}
	return f.Store.QueueLen(channel)
}

func (f *faultStore) Expire(now time.Time) ([]relay.Expired, error) {
	if err := f.fault("Expire"); err != nil {
		return nil, err
	}
	return f.Store.Expire(now)
}

func (f *faultStore) TouchChannel(id string, t time.Time) error {
	if err := f.fault("TouchChannel"); err != nil {
		return err
	}
	return f.Store.TouchChannel(id, t)
}

func (f *faultStore) RemoveIdleChannels(before time.Time, inUse func(string) bool) ([]relay.RemovedChannel, error) {
	if err := f.fault("RemoveIdleChannels"); err != nil {
		return nil, err
	}
	return f.Store.RemoveIdleChannels(before, inUse)
}

// Counts implements relay.Counter when the store does.
func (f *faultStore) Counts() (relay.Counts, error) {
	if err := f.fault("Counts"); err != nil {
		return relay.Counts{}, err
	}
	c, ok := f.Store.(relay.Counter)
	if !ok {
		return relay.Counts{}, nil
	}
	return c.Counts()
}

// faultKinds are the errors a store's method fails with.
var faultKinds = []struct {
	name string
	err  error
}{
	{"DiskFull", fmt.Errorf("injected: %w: write: %w", relay.ErrStorageFull, syscall.ENOSPC)},
	{"IOError", fmt.Errorf("injected: read: %w", syscall.EIO)},
}

// faultMethods are the methods of a store the Server calls. Each fails
// with one kind of error, the queue's own with both.
var faultMethods = []struct {
	name  string
	kinds []int // of faultKinds
}{
	{"Queued", []int{0, 1}},
	{"Dequeue", []int{0, 1}},
	{"Park", []int{0, 1}},
	{"Enqueue", []int{0}},
	{"PutChannel", []int{1}},
	{"Channel", []int{1}},
	{"QueueLen", []int{1}},
	{"TouchChannel", []int{0}},
	{"Expire", []int{1}},
	{"RemoveIdleChannels", []int{0}},
	{"Counts", []int{1}},
}

// testFaults runs the fault suite: a subtest for each method and kind.
func testFaults(t *testing.T, open Open) {
	for _, m := range faultMethods {
		for _, k := range m.kinds {
			t.Run(m.name+"/"+faultKinds[k].name, func(t *testing.T) {
				t.Parallel()
				testFault(t, open, m.name, faultKinds[k].err)
			})
		}
	}
}

// faultEvents counts what the test did during a failure: the calls of a
// method that requests and connections make, beyond its loops'.
type faultEvents struct {
	posts, dials, conns, opens, scrapes atomic.Int64
}

// testFault makes method fail with err for faultWindow under a Server with
// two channels: A, whose agent is connected (and reconnects halfway), with
// a queue to send; B, whose agent is away, with deliveries queued for it.
func testFault(t *testing.T, open Open, method string, ferr error) {
	fs := &faultStore{Store: open(t, Config{})}
	var log logLines
	var acked sync.Map // id → "202" or "answered": acknowledged deliveries
	a, b := setupFaults(t, fs, &acked)

	fs.fail(method, ferr)
	start := time.Now()
	srv, err := relay.NewServer(relay.Config{Store: fs, Router: relay.NewHub(), Logf: log.logf,
		SweepInterval: faultSweep, Window: faultWindowSize, ResponseTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	var got received
	var ev faultEvents
	keeper := keepAgent(t, hs.URL, a, &got, &ev)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); sendDuringFault(hs.URL, a, b, &acked, &ev, stop) }()
	if resp, err := http.Post(hs.URL+"/v1/channels", "application/json", nil); err == nil {
		ev.opens.Add(1)
		resp.Body.Close()
	}
	if resp, err := http.Get(hs.URL + "/metrics"); err == nil {
		ev.scrapes.Add(1)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/metrics while %s fails: %s, want 200 with what can be counted", method, resp.Status)
		}
		resp.Body.Close()
	}
	// Halfway, A's agent reconnects: a new connection, new loops.
	time.Sleep(faultWindow / 2) // the failure's length: what the bounds are computed over
	keeper.reconnect()
	time.Sleep(faultWindow - time.Since(start))
	calls := fs.recover()
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()

	if bound := faultBound(method, elapsed, &ev); calls > bound {
		t.Errorf("%s failed %d times in %s, want at most %d (its backoff's schedule, with slack, and the requests that need it: %d posts, %d dials, %d connections, %d opens, %d scrapes); log:\n%s",
			method, calls, elapsed.Round(time.Millisecond), bound, ev.posts.Load(), ev.dials.Load(), ev.conns.Load(), ev.opens.Load(), ev.scrapes.Load(), log.text())
	}
	lines := log.count("injected")
	if most := 3*int(ev.conns.Load()) + 6; lines > most {
		t.Errorf("%d log lines of %d failures of %s, want at most %d (a failure that repeats is logged once with a count); log:\n%s", lines, calls, method, most, log.text())
	}

	// Recovery by itself: A's queue moves without a new delivery or
	// reconnect (its agent reconnects only if its connection failed).
	// Then B's agent connects and gets B's.
	waitUntil(t, 60*time.Second, "the queue of channel A empty once "+method+" works again", func() bool {
		n, err := fs.Store.QueueLen(a.Channel)
		return err == nil && n == 0
	})
	mustConnect(t, hs.URL, b, &got)
	waitUntil(t, 60*time.Second, "the queue of channel B empty", func() bool {
		n, err := fs.Store.QueueLen(b.Channel)
		return err == nil && n == 0
	})
	var lost []string
	acked.Range(func(k, v any) bool {
		id := k.(string)
		if id == fs.unreadable {
			if !fs.isParked(id) {
				lost = append(lost, id+" (unreadable: not parked)")
			}
		} else if got.count(id) == 0 {
			lost = append(lost, id+" ("+v.(string)+")")
		}
		return true
	})
	if len(lost) > 0 {
		t.Fatalf("acknowledged deliveries that never reached an agent: %v; log:\n%s", lost, log.text())
	}
	keeper.stop()
}

// setupFaults opens channels A and B through a Server over fs before any
// fault, queues deliveries for A, and marks one of them unreadable.
func setupFaults(t *testing.T, fs *faultStore, acked *sync.Map) (a, b wire.Credentials) {
	t.Helper()
	srv, err := relay.NewServer(relay.Config{Store: fs, Router: relay.NewHub(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); srv.Close() }()
	if a, err = srv.OpenChannel(nil); err != nil {
		t.Fatal(err)
	}
	if b, err = srv.OpenChannel(nil); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 6 {
		code, id := postRun(t, hs.URL, a, fmt.Sprint("setup-", i))
		if code != http.StatusAccepted {
			t.Fatalf("setup delivery with no agent: %d", code)
		}
		acked.Store(id, "202")
		ids = append(ids, id)
	}
	fs.unreadable = ids[2]
	return a, b
}

// postRun posts a run.status delivery of run to channel cr and returns
// the status and the delivery's id.
func postRun(t *testing.T, url string, cr wire.Credentials, run string) (int, string) {
	body, err := json.Marshal(devhook.NewRunStatus(run, "app", "running", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	code, id, _ := postID(url+"/c/"+cr.Channel+"/hook", body)
	return code, id
}

// postID posts a delivery and returns the status, the delivery's id and
// the answer's body; status 0 when it could not be sent.
func postID(url string, body []byte) (int, string, string) {
	resp, err := http.Post(url, "application/json", strings.NewReader(string(body)))
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, resp.Header.Get("Devhook-Delivery"), b.String()
}

// sendDuringFault posts run.status deliveries to A and B in turn until
// stop, keeping those acknowledged: 202, or the agent's own answer.
func sendDuringFault(url string, a, b wire.Credentials, acked *sync.Map, ev *faultEvents, stop chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(faultSweep):
		}
		cr := a
		if i%2 == 1 {
			cr = b
		}
		body, _ := json.Marshal(devhook.NewRunStatus(fmt.Sprint("run-", i), "app", "running", time.Now()))
		ev.posts.Add(1)
		code, id, answer := postID(url+"/c/"+cr.Channel+"/hook", body)
		switch {
		case code == http.StatusAccepted:
			acked.Store(id, "202")
		case code == http.StatusOK && answer == "ok "+id:
			acked.Store(id, "answered")
		}
	}
}

// agentKeeper keeps an agent connected to a channel, dialling again (every
// 100 ms) when a dial fails, as an agent does.
type agentKeeper struct {
	url    string
	cr     wire.Credentials
	got    *received
	ev     *faultEvents
	redial chan struct{}
	quit   chan struct{}
	done   chan struct{}
}

func keepAgent(t *testing.T, url string, cr wire.Credentials, got *received, ev *faultEvents) *agentKeeper {
	k := &agentKeeper{url: url, cr: cr, got: got, ev: ev, redial: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	t.Cleanup(k.stop)
	return k
}

func (k *agentKeeper) run() {
	defer close(k.done)
	for {
		k.ev.dials.Add(1)
		a, err := connect(k.url, k.cr, k.got)
		if err != nil {
			select {
			case <-k.quit:
				return
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		k.ev.conns.Add(1)
		select {
		case <-k.quit:
			a.close()
			return
		case <-k.redial:
			a.close()
		case <-a.done: // the relay ended it
		}
	}
}

// reconnect has the agent close its connection and dial again.
func (k *agentKeeper) reconnect() {
	select {
	case k.redial <- struct{}{}:
	default:
	}
}

func (k *agentKeeper) stop() {
	select {
	case <-k.quit:
	default:
		close(k.quit)
	}
	<-k.done
}

// faultBound is the most calls of method a relay makes in elapsed while
// it fails: its retry loops' schedules with slack (twice, and two more),
// one loop per agent connection (each, as it ends, tries its removals
// once more), plus the calls the test's requests make.
func faultBound(method string, elapsed time.Duration, ev *faultEvents) int {
	loop := 2*relay.RetrySchedule(relay.RetryMin, relay.RetryMax, elapsed) + 2
	sweep := 2*relay.RetrySchedule(faultSweep, relay.SweepRetryMax, elapsed) + 2
	conns := int(ev.conns.Load())
	posts, dials := int(ev.posts.Load()), int(ev.dials.Load())
	switch method {
	case "Queued", "Park":
		return conns * loop
	case "Dequeue":
		return conns * (loop + faultWindowSize)
	case "Enqueue":
		return posts
	case "Channel":
		return posts + dials
	case "PutChannel":
		return int(ev.opens.Load())
	case "QueueLen":
		return dials
	case "TouchChannel":
		return dials + sweep
	case "Expire", "RemoveIdleChannels":
		return sweep
	case "Counts":
		return int(ev.scrapes.Load())
	}
	panic("storetest: no bound for " + method)
}
