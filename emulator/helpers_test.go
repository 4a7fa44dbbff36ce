package emulator_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook/emulator"
)

const testKey = "test-key-1"

// testConfig is a Config with short schedules and retries for tests.
func testConfig() emulator.Config {
	return emulator.Config{
		APIKeys:        []string{testKey, "test-key-2"},
		RetryDelays:    []time.Duration{10 * time.Millisecond, 20 * time.Millisecond},
		AttemptTimeout: 2 * time.Second,
		QueueTime:      20 * time.Millisecond,
		RunTime:        30 * time.Millisecond,
	}
}

// env is an emulator served by httptest.
type env struct {
	t   *testing.T
	e   *emulator.Emulator
	srv *httptest.Server
}

func newEnv(t *testing.T, cfg emulator.Config) *env {
	t.Helper()
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		srv.Close()
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &env{t: t, e: e, srv: srv}
}

// request sends method path with body (a string is sent as is, anything
// else as JSON) as the key's account; extra headers come in pairs.
func (v *env) request(key, method, path string, body any, hdr ...string) (int, http.Header, []byte) {
	v.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			v.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, v.srv.URL+path, rd)
	if err != nil {
		v.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		v.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		v.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// do is request with the test key, expecting status want, decoding the
// JSON answer into out when out is not nil.
func (v *env) do(method, path string, body any, want int, out any) []byte {
	v.t.Helper()
	status, _, b := v.request(testKey, method, path, body)
	if status != want {
		v.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			v.t.Fatalf("%s %s: answer %s: %v", method, path, b, err)
		}
	}
	return b
}

var noRedirect = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func webhookBody(id, endpoint string) map[string]any {
	return map[string]any{"id": id, "event_types": []string{"run.status"}, "endpoint_url": endpoint, "description": "test " + id}
}

func (v *env) createWebhook(id, endpoint string) {
	v.t.Helper()
	v.do("POST", "/v1/webhooks", webhookBody(id, endpoint), 201, nil)
}

func (v *env) secret(id string) string {
	v.t.Helper()
	var s struct{ ID, Secret string }
	v.do("GET", "/v1/webhooks/"+url.PathEscape(id)+"/secret", nil, 200, &s)
	if s.ID != id || s.Secret == "" {
		v.t.Fatalf("secret of %q: %+v", id, s)
	}
	return s.Secret
}

// convItem and convDetail decode conversations with every field.
type convItem struct {
	ID               string  `json:"id"`
	WebhookID        string  `json:"webhook_id"`
	CreatedAt        string  `json:"created_at"`
	HTTPStatus       int     `json:"http_status"`
	ResponseDuration *int64  `json:"response_duration"`
	Error            *string `json:"error"`
	Status           string  `json:"status"`
}

type convDetail struct {
	convItem
	EndpointURL  string          `json:"endpoint_url"`
	RequestBody  json.RawMessage `json:"request_body"`
	ResponseBody string          `json:"response_body"`
}

func (v *env) conversations(id string) []convItem {
	v.t.Helper()
	var l struct{ Items []convItem }
	v.do("GET", "/v1/webhooks/"+url.PathEscape(id)+"/conversations", nil, 200, &l)
	return l.Items
}

// waitConversations waits until the webhook has n conversations.
func (v *env) waitConversations(id string, n int) []convItem {
	v.t.Helper()
	var items []convItem
	eventually(v.t, func() bool {
		items = v.conversations(id)
		return len(items) >= n
	}, "%d conversations of %q", n, id)
	if len(items) != n {
		v.t.Fatalf("webhook %q has %d conversations, want %d", id, len(items), n)
	}
	return items
}

// eventually polls cond until it holds, failing after 30 s: generous, for
// a busy machine on which a Python interpreter takes seconds to start.
func eventually(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	eventuallyWithin(t, 30*time.Second, cond, what, args...)
}

// eventuallyWithin is eventually with a bound of its own: for a wait that
// includes a backoff, which may have grown on a busy machine.
func eventuallyWithin(t *testing.T, bound time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.After(bound)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for "+what, args...)
		case <-tick.C:
		}
	}
}

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
	at     time.Time
}

// receiver is a webhook endpoint. It answers each request with the next
// status of statuses (the last one repeating), and reports each request on
// got.
type receiver struct {
	srv *httptest.Server
	got chan delivery

	mu       sync.Mutex
	statuses []int
	n        int
	// hold, when set, is called before answering.
	hold func(n int, d delivery)
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	if len(statuses) == 0 {
		statuses = []int{200}
	}
	rc := &receiver{got: make(chan delivery, 100), statuses: statuses}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		d := delivery{header: r.Header.Clone(), body: b, at: time.Now()}
		rc.mu.Lock()
		status := rc.statuses[min(rc.n, len(rc.statuses)-1)]
		n, hold := rc.n, rc.hold
		rc.n++
		rc.mu.Unlock()
		rc.got <- d
		if hold != nil {
			hold(n, d)
		}
		w.WriteHeader(status)
		w.Write([]byte("answer " + strconv.Itoa(n)))
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// next waits for the receiver's next request.
func (rc *receiver) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-rc.got:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a delivery")
		return delivery{}
	}
}

// checkSignature verifies a service-signature header the way docs/INTERFACE.md
// describes, with crypto/hmac directly and not the signature package. It
// returns the reference receiver's status and text.
func checkSignature(secret, header string, body []byte, nowMS, skewMS int64) (int, string) {
	if header == "" {
		return 401, "Unauthorized: Missing Signature"
	}
	parts := strings.Split(header, ",")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "t=") || !strings.HasPrefix(parts[1], "v1=") {
		return 401, "Unauthorized: Invalid Signature Format"
	}
	ts, sig := strings.TrimPrefix(parts[0], "t="), strings.TrimPrefix(parts[1], "v1=")
	if ts == "" || strings.Trim(ts, "0123456789") != "" {
		return 401, "Unauthorized: Invalid Signature Format"
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 401, "Unauthorized: Invalid Signature Format"
	}
	if !(nowMS-300000 < t && t <= nowMS+skewMS) {
		return 401, "Unauthorized: Invalid Time Value"
	}
	if secret == "" {
		return 500, "Internal Server Error"
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	want := hex.EncodeToString(m.Sum(nil))
	if sig == "" || !hmac.Equal([]byte(sig), []byte(want)) {
		return 401, "Unauthorized: Invalid signature"
	}
	return 200, "OK"
}

// signatureT returns the t of a header.
func signatureT(t *testing.T, header string) int64 {
	t.Helper()
	ts, _, _ := strings.Cut(strings.TrimPrefix(header, "t="), ",")
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		t.Fatalf("header %q: %v", header, err)
	}
	return n
}

// keys returns the sorted keys of a JSON object.
func keys(t *testing.T, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s", raw)
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sameKeys(t *testing.T, what string, raw []byte, want ...string) {
	t.Helper()
	sort.Strings(want)
	got := keys(t, raw)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s has fields %v, want %v", what, got, want)
	}
}

// wantError checks an answer is status with a JSON {"error": "..."} body.
func wantError(t *testing.T, what string, status int, body []byte, want int) {
	t.Helper()
	if status != want {
		t.Errorf("%s: status %d, want %d; body %s", what, status, want, body)
		return
	}
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("%s: error body is not JSON: %s", what, body)
		return
	}
	if s, ok := e["error"].(string); !ok || s == "" || len(e) != 1 {
		t.Errorf(`%s: error body %s, want {"error": "<message>"}`, what, body)
	}
}

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func httptestServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func newJar(t *testing.T) *cookiejar.Jar {
	j, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
