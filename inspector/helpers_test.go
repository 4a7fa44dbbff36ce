package inspector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/signature"
	"github.com/devhook/devhook/storage"
)

const testSecret = "whsec-test"

// MustOpenDB opens a real store in a temporary folder.
func MustOpenDB(tb testing.TB) *storage.DB {
	tb.Helper()
	return mustOpenPath(tb, filepath.Join(tb.TempDir(), "devhook.db"))
}

// mustOpenPath opens the store at path, closed when the test ends.
func mustOpenPath(tb testing.TB, path string) *storage.DB {
	tb.Helper()
	db, err := storage.Open(path, storage.Config{MaxDeliveries: -1, MaxAge: -1})
	if err != nil {
		tb.Fatalf("opening the store: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("closing the store: %v", err)
		}
	})
	return db
}

// testID returns a time-ordered id in the shape of a UUIDv7, from a time
// and a sequence number that breaks ties.
func testID(at time.Time, seq int) string {
	ms := uint64(at.UnixMilli())
	return fmt.Sprintf("%08x-%04x-7%03x-8%03x-%012x", ms>>16, ms&0xffff, (seq>>12)&0xfff, seq&0xfff, seq)
}

// runStatusBody returns a run.status payload.
func runStatusBody(tb testing.TB, runID, statusV2 string, at time.Time) []byte {
	tb.Helper()
	b, err := json.Marshal(devhook.NewRunStatus(runID, "app-1", statusV2, at))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// newDelivery builds a signed delivery of body received at at.
func newDelivery(at time.Time, seq int, body []byte, sign bool) *devhook.Delivery {
	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"service-webhooks/1.0"}}
	if sign {
		h.Set(devhook.SignatureHeader, signature.Sign(testSecret, at, body))
	}
	return &devhook.Delivery{
		ID: testID(at, seq), Channel: "ch-test", ReceivedAt: at, Method: http.MethodPost, Path: "/hooks/service",
		Header: h, Body: body, RemoteAddr: "203.0.113.7:41234",
		Verdict: signature.Verify(testSecret, h.Get(devhook.SignatureHeader), body, at),
		Event:   devhook.ParseEvent(body),
	}
}

// put stores d and, when status is not 0, a forward attempt with that
// answer. It returns the stored summary.
func put(tb testing.TB, db *storage.DB, d *devhook.Delivery, status int) devhook.Summary {
	tb.Helper()
	if _, err := db.PutDelivery(d); err != nil {
		tb.Fatalf("storing delivery %s: %v", d.ID, err)
	}
	if status != 0 {
		a := devhook.Attempt{
			Kind: devhook.AttemptForward, Target: "http://127.0.0.1:3000" + d.Path, StartedAt: d.ReceivedAt,
			Duration: devhook.Duration(1500 * time.Microsecond), Status: status,
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte(http.StatusText(status)),
		}
		if _, err := db.AddAttempt(d.ID, a); err != nil {
			tb.Fatalf("storing an attempt of %s: %v", d.ID, err)
		}
	}
	got, err := db.Delivery(d.ID)
	if err != nil {
		tb.Fatalf("reading delivery %s back: %v", d.ID, err)
	}
	return got.Summarize()
}

// receiver is a local receiver that records what it was sent.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []receivedRequest
	seen chan receivedRequest
}

type receivedRequest struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

func newReceiver(tb testing.TB) *receiver {
	r := &receiver{seen: make(chan receivedRequest, 64)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		rr := receivedRequest{Method: req.Method, Path: req.URL.RequestURI(), Header: req.Header.Clone(), Body: body}
		r.mu.Lock()
		r.got = append(r.got, rr)
		r.mu.Unlock()
		select {
		case r.seen <- rr:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"received":%d}`, len(body))
	}))
	tb.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []receivedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedRequest(nil), r.got...)
}

// replayer is the real agent's Replay (agent.New over the fixture's store,
// forwarding to its receiver, knowing testSecret), with the calls it got
// kept so that tests can tell which requests reached it.
type replayer struct {
	agent *agent.Agent

	mu    sync.Mutex
	calls []replayCall
}

type replayCall struct {
	ID  string
	Opt devhook.ReplayOptions
}

func (r *replayer) Replay(ctx context.Context, id string, opt devhook.ReplayOptions) (devhook.Attempt, error) {
	r.mu.Lock()
	r.calls = append(r.calls, replayCall{id, opt})
	r.mu.Unlock()
	return r.agent.Replay(ctx, id, opt)
}

func (r *replayer) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *replayer) lastCall() replayCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[len(r.calls)-1]
}

// fixture is an inspector over a real store, served on 127.0.0.1:0.
type fixture struct {
	DB       *storage.DB
	Server   *inspector.Server
	HTTP     *httptest.Server
	Receiver *receiver
	Replayer *replayer
}

type fixtureOptions struct {
	noReplayer bool
	path       string // the store's file: "" a new one in a temporary folder
	config     func(*inspector.Config)
}

func newFixture(tb testing.TB, o fixtureOptions) *fixture {
	tb.Helper()
	f := &fixture{Receiver: newReceiver(tb)}
	if o.path == "" {
		f.DB = MustOpenDB(tb)
	} else {
		f.DB = mustOpenPath(tb, o.path)
	}
	cfg := inspector.Config{
		Store: f.DB,
		Settings: inspector.Settings{
			Forward:     []string{f.Receiver.URL},
			RelayURL:    "ws://127.0.0.1:9/relay",
			PublicURL:   "https://relay.example.test/c/ch-test",
			Channel:     "ch-test",
			SecretKnown: func() bool { return true },
			Verify:      "report",
		},
		Logf: tb.Logf,
	}
	var publish func(devhook.Change)
	if !o.noReplayer {
		ag, err := agent.New(agent.Config{
			Store: f.DB, Forward: []string{f.Receiver.URL}, Secret: testSecret, ForwardTimeout: 10 * time.Second,
			OnChange: func(c devhook.Change) {
				if publish != nil {
					publish(c)
				}
			},
		})
		if err != nil {
			tb.Fatalf("agent.New: %v", err)
		}
		f.Replayer = &replayer{agent: ag}
		cfg.Replayer = f.Replayer
	}
	if o.config != nil {
		o.config(&cfg)
	}
	s, err := inspector.New(cfg)
	if err != nil {
		tb.Fatalf("inspector.New: %v", err)
	}
	f.Server = s
	publish = s.Publish
	f.HTTP = httptest.NewServer(s)
	tb.Cleanup(func() {
		s.Close()
		f.HTTP.Close()
	})
	return f
}

// get fetches path from the inspector and decodes a JSON answer into v
// when v is not nil. It returns the status.
func (f *fixture) get(tb testing.TB, path string, v any) int {
	tb.Helper()
	res, err := f.HTTP.Client().Get(f.HTTP.URL + path)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatalf("GET %s: reading: %v", path, err)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			tb.Fatalf("GET %s: decoding %q: %v", path, body, err)
		}
	}
	return res.StatusCode
}
