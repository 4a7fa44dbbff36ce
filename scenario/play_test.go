package scenario_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/scenario"
	"github.com/devhook/devhook/signature"
)

const secret = "whsec_scenario"

// seen is what a handler received.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
	body [][]byte
	v    []devhook.Verdict
}

func (s *seen) record(r *http.Request, body []byte, v devhook.Verdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs, s.body, s.v = append(s.reqs, r.Clone(context.Background())), append(s.body, body), append(s.v, v)
}

// referenceServer is the reference receiver, recording what it gets.
func referenceServer(t *testing.T) (*httptest.Server, *seen) {
	t.Helper()
	got := &seen{}
	srv := httptest.NewServer(receiver.New(receiver.Config{Secret: secret, OnRequest: got.record}))
	t.Cleanup(srv.Close)
	return srv, got
}

// secondsHandler makes the commonest mistake: it compares t with a clock
// in seconds.
func secondsHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ts, v1, _ := strings.Cut(strings.TrimPrefix(r.Header.Get("service-signature"), "t="), ",v1=")
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		http.Error(w, "Unauthorized: Invalid Signature Format", 401)
		return
	}
	if now := time.Now().Unix(); t <= now-300 || t >= now+60 {
		http.Error(w, "Unauthorized: Invalid Time Value", 401)
		return
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	if !hmac.Equal([]byte(v1), []byte(hex.EncodeToString(m.Sum(nil)))) {
		http.Error(w, "Unauthorized: Invalid signature", 401)
		return
	}
	io.WriteString(w, "ok")
}

// clock is a virtual clock: Sleep moves it on at once and remembers how long.
type clock struct {
	now    time.Time
	sleeps []time.Duration
}

func (c *clock) Now() time.Time { return c.now }
func (c *clock) Sleep(_ context.Context, d time.Duration) error {
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

func runScenario(t *testing.T, paths ...string) *scenario.Scenario {
	t.Helper()
	s, _ := build(t, runDeliveries(t, "run-42"), paths...)
	// Through the file, as the command plays it.
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s, err = scenario.Parse("run.json", b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The reference receiver accepts every delivery, signed afresh; what it
// gets is what was recorded: method, path, query, every header value, the
// body byte for byte.
func TestPlay_ReferenceReceiverAcceptsEveryDelivery(t *testing.T) {
	srv, got := referenceServer(t)
	s := runScenario(t, "$.data.run_id")
	clk := &clock{now: time.Now()}
	rep, err := scenario.Play(context.Background(), s, scenario.Config{URL: srv.URL + "/base/", Secret: secret, Now: clk.Now, Sleep: clk.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Pass || rep.Failed != 0 || len(rep.Results) != 3 {
		t.Fatalf("report %+v", rep)
	}
	if len(got.reqs) != 3 {
		t.Fatalf("the receiver got %d requests", len(got.reqs))
	}
	for i, r := range got.reqs {
		e := s.Deliveries[i]
		if got.v[i].Result != devhook.VerdictOK || r.Method != "POST" || r.URL.Path != "/base/hook" || r.URL.RawQuery != e.Query || !bytes.Equal(got.body[i], e.Body) {
			t.Errorf("delivery %d: %s %s verdict %s body %q", i+1, r.Method, r.URL, got.v[i].Result, got.body[i])
		}
		if !reflect.DeepEqual(r.Header["X-Trace"], []string{"b", "a"}) || r.Header.Get("User-Agent") != "service-webhooks/1" || r.Header.Get("Accept-Encoding") != "" {
			t.Errorf("delivery %d: headers %v", i+1, r.Header)
		}
		if p, err := signature.Parse(r.Header.Get(devhook.SignatureHeader)); err != nil || p.T != rep.Results[i].At.UnixMilli() {
			t.Errorf("delivery %d: signature %q not made when sent (%v)", i+1, r.Header.Get(devhook.SignatureHeader), err)
		}
		res := rep.Results[i]
		if !res.Pass || res.Status != 200 || res.Expected != "2xx (recorded 200)" || res.Hint != "" ||
			!strings.HasPrefix(res.Label, "run.status ") || !strings.HasSuffix(res.Label, " redacted-run_id-1") {
			t.Errorf("result %d: %+v", i+1, res)
		}
	}
	var text strings.Builder
	if err := rep.WriteText(&text, "run.json"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DELIVERY", "1 run.status queued redacted-run_id-1", "POST /hook +1.25s, signed", "2xx (recorded 200)", "PASS: 3 of 3"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text does not say %q:\n%s", want, text.String())
		}
	}
}

// A handler that reads t as seconds refuses every delivery devhook's own
// verifier accepts: each fails, with the hint devhook listen gives.
func TestPlay_HandlerReadingSecondsFailsWithTheHint(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer srv.Close()
	rep, err := scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: srv.URL, Secret: secret, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pass || rep.Failed != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, res := range rep.Results {
		if res.Pass || res.Status != 401 || !strings.Contains(res.Reason, `expected 2xx (recorded 200), the handler answered 401 "Unauthorized: Invalid Time Value"`) {
			t.Errorf("result %+v", res)
		}
		if !strings.Contains(res.Hint, "run `devhook check "+srv.URL+"/hook?src=svc&run=run-42 --secret …`") || !strings.Contains(res.Hint, "reads t as seconds") {
			t.Errorf("hint %q", res.Hint)
		}
	}
	var text strings.Builder
	rep.WriteText(&text, "run.json")
	if !strings.Contains(text.String(), "deliveries 1, 2, 3: hint: your receiver refused a delivery whose signature is valid") || !strings.Contains(text.String(), "FAIL: 3 of 3") {
		t.Errorf("text:\n%s", text.String())
	}
}

// Unsigned, the reference refuses: the hint says to give the secret.
func TestPlay_UnsignedSaysToGiveTheSecret(t *testing.T) {
	srv, _ := referenceServer(t)
	rep, err := scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: srv.URL, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pass || rep.Signed || !strings.Contains(rep.Results[0].Hint, "without a service-signature: give the handler's secret with --secret") {
		t.Fatalf("report %+v", rep)
	}
}

// The recorded spacing, divided by the speed; no waiting at all.
func TestPlay_Spacing(t *testing.T) {
	srv, _ := referenceServer(t)
	tests := []struct {
		name   string
		cfg    scenario.Config
		sleeps []time.Duration
	}{
		{"recorded", scenario.Config{}, []time.Duration{1250 * time.Millisecond, 1250 * time.Millisecond}},
		{"speed 1", scenario.Config{Speed: 1}, []time.Duration{1250 * time.Millisecond, 1250 * time.Millisecond}},
		{"speed 2.5", scenario.Config{Speed: 2.5}, []time.Duration{500 * time.Millisecond, 500 * time.Millisecond}},
		{"no waiting", scenario.Config{NoWait: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &clock{now: time.Now()}
			cfg := tt.cfg
			cfg.URL, cfg.Secret, cfg.Now, cfg.Sleep = srv.URL, secret, clk.Now, clk.Sleep
			rep, err := scenario.Play(context.Background(), runScenario(t), cfg)
			if err != nil || !rep.Pass {
				t.Fatalf("%v %+v", err, rep)
			}
			if !reflect.DeepEqual(clk.sleeps, tt.sleeps) {
				t.Errorf("waited %v, want %v", clk.sleeps, tt.sleeps)
			}
		})
	}
	if _, err := scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: srv.URL, Speed: -1}); err == nil {
		t.Error("a negative speed is taken")
	}
}

// Each kind of expectation, against a handler that answers 200 to
// deliveries recorded with 401 (a fixed handler).
func TestPlay_Expect(t *testing.T) {
	srv, _ := referenceServer(t)
	s := runScenario(t)
	for i := range s.Deliveries {
		s.Deliveries[i].Recorded = &scenario.Answer{Status: 401}
	}
	s.Deliveries[2].Recorded = nil
	tests := []struct {
		expect   string
		pass     []bool
		expected []string
	}{
		{"recorded", []bool{false, false, true}, []string{"4xx (recorded 401)", "4xx (recorded 401)", "2xx (none recorded)"}},
		{"2xx", []bool{true, true, true}, []string{"2xx", "2xx", "2xx"}},
		{"200", []bool{true, true, true}, []string{"200", "200", "200"}},
		{"204", []bool{false, false, false}, []string{"204", "204", "204"}},
	}
	for _, tt := range tests {
		t.Run(tt.expect, func(t *testing.T) {
			x, err := scenario.ParseExpect(tt.expect)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := scenario.Play(context.Background(), s, scenario.Config{URL: srv.URL, Secret: secret, NoWait: true, Expect: x})
			if err != nil {
				t.Fatal(err)
			}
			for i, res := range rep.Results {
				if res.Pass != tt.pass[i] || res.Expected != tt.expected[i] {
					t.Errorf("delivery %d: pass %v expected %q, want %v %q", i+1, res.Pass, res.Expected, tt.pass[i], tt.expected[i])
				}
			}
		})
	}
	for _, bad := range []string{"2xy", "99", "ok", "6xx"} {
		if _, err := scenario.ParseExpect(bad); err == nil {
			t.Errorf("--expect %s is taken", bad)
		}
	}
}

// Nothing answers the first delivery: an UnreachableError, no report.
func TestPlay_Unreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	rep, err := scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: url, Secret: secret, NoWait: true})
	var ue *check.UnreachableError
	if !errors.As(err, &ue) || rep != nil || !strings.Contains(err.Error(), "cannot reach the handler at "+url) {
		t.Fatalf("err %v report %v", err, rep)
	}
	if _, err := scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: "localhost:8080"}); err == nil {
		t.Error("a URL without a scheme is taken")
	}
}

// A handler that stops answering after the first delivery: the others
// fail as no answer.
func TestPlay_NoAnswerLater(t *testing.T) {
	var n int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if !first {
			panic(http.ErrAbortHandler)
		}
	}))
	defer srv.Close()
	rep, err := scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: srv.URL, Secret: secret, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 2 || !rep.Results[0].Pass || rep.Results[1].Status != 0 || !strings.HasPrefix(rep.Results[1].Reason, "no answer: ") {
		t.Fatalf("report %+v", rep.Results)
	}
}

// A delivery whose signature failed when recorded keeps what it was, and
// play reproduces it: the reference receiver refuses each for the same
// reason as then. Resign signs them all afresh.
func TestPlay_FailedSignaturesAsRecorded(t *testing.T) {
	ds := append(runDeliveries(t, "run-a"), runDeliveries(t, "run-b")[:2]...)
	verdicts := []string{devhook.VerdictOK, devhook.VerdictInvalidSignature, devhook.VerdictMissingSignature,
		devhook.VerdictInvalidFormat, devhook.VerdictInvalidTime}
	kinds := []string{"", scenario.SignatureInvalid, scenario.SignatureMissing, scenario.SignatureMalformed, scenario.SignatureExpired}
	for i, d := range ds {
		d.ID = fmt.Sprintf("%s-%d", d.ID, i)
		d.ReceivedAt = epoch.Add(time.Duration(i) * time.Second)
		d.Verdict = devhook.Verdict{Result: verdicts[i]}
		if i > 0 {
			d.Attempts = []devhook.Attempt{{Seq: 1, Kind: devhook.AttemptForward, StartedAt: d.ReceivedAt, Status: 401}}
		}
		if kinds[i] == scenario.SignatureMalformed {
			d.Header.Set(devhook.SignatureHeader, "t=x,v1=00")
		}
	}
	s, _, err := scenario.Build(ds, scenario.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range s.Deliveries {
		hasSig := e.Header.Get(devhook.SignatureHeader) != ""
		if e.Signature != kinds[i] || hasSig != (kinds[i] == scenario.SignatureMalformed) {
			t.Errorf("delivery %d: signature %q, header kept %v; want %q", i+1, e.Signature, hasSig, kinds[i])
		}
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("{\n  \"devhook_scenario\": 2,")) || !bytes.Contains(b, []byte(`"signature": "expired"`)) {
		t.Fatalf("marshalled:\n%s", b)
	}
	back, err := scenario.Parse("sig.json", b)
	if err != nil {
		t.Fatal(err)
	}

	srv, got := referenceServer(t)
	clk := &clock{now: time.Now()}
	rep, err := scenario.Play(context.Background(), back, scenario.Config{URL: srv.URL, Secret: secret, NoWait: true, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Pass {
		t.Fatalf("report %+v", rep)
	}
	want := []string{devhook.VerdictOK, devhook.VerdictInvalidSignature, devhook.VerdictMissingSignature, devhook.VerdictInvalidFormat, devhook.VerdictInvalidTime}
	for i := range want {
		if got.v[i].Result != want[i] || rep.Results[i].Signature != kinds[i] || rep.Results[i].Hint != "" {
			t.Errorf("delivery %d: the receiver's verdict %s, result %+v; want %s", i+1, got.v[i].Result, rep.Results[i], want[i])
		}
	}
	var text strings.Builder
	rep.WriteText(&text, "sig.json")
	if !strings.Contains(text.String(), "4 with the failed signature they were recorded with (--resign signs them too)") {
		t.Errorf("text:\n%s", text.String())
	}

	rep, err = scenario.Play(context.Background(), back, scenario.Config{URL: srv.URL, Secret: secret, NoWait: true, Now: clk.Now, Resign: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 4 {
		t.Errorf("resigned: %d failed, want the 4 recorded as refused", rep.Failed)
	}
	for i := 5; i < 10; i++ {
		if got.v[i].Result != devhook.VerdictOK {
			t.Errorf("resigned delivery %d: verdict %s", i-4, got.v[i].Result)
		}
	}
}
