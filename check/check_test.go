package check_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/receiver"
)

// The secret is hexadecimal so that a handler can make the mistake of
// decoding it.
const secret = "4f2a9c0e7b1d3a5c6e8f0a1b2c3d4e5f"

// now is the suite's clock and the handlers': time is injected, never slept.
var now = time.UnixMilli(1_800_000_000_000)

func clock() time.Time { return now }

// handler is a webhook handler as a developer writes one, from the
// interface, without devhook's signature package. Each field is one
// mistake; the zero value (with a secret) is correct.
type handler struct {
	secret string
	skew   time.Duration // default 60 s

	seconds        bool // compares t with a clock in seconds
	timeInHMAC     bool // the window check is part of the signature check
	reserialize    bool // verifies the body decoded into a struct and encoded again
	strictStruct   bool // with reserialize: unknown fields are a 400
	reencodeMap    bool // verifies the body decoded into a map and encoded again
	noWindow       bool // no replay protection
	plainCompare   bool // == instead of hmac.Equal
	prefixCompare  bool // accepts v1 when it is a prefix of the expected one
	acceptMissing  bool // verifies only when the header is there
	crashOnMissing bool // indexes the header's values without looking
	hexKey         bool // keys the HMAC with the secret hex-decoded
	base64Key      bool // keys the HMAC with the secret base64-decoded
	stripPrefix    bool // with base64Key: the part after whsec_
}

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	refuse := func(text string) { http.Error(w, "Unauthorized: "+text, http.StatusUnauthorized) }
	body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	header := r.Header.Get("service-signature")
	if h.crashOnMissing {
		header = r.Header["Service-Signature"][0] // panics without the header
	}
	if header == "" {
		if h.acceptMissing {
			io.WriteString(w, `{"ok":true}`)
			return
		}
		refuse("Missing Signature")
		return
	}
	parts := strings.Split(header, ",")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "t=") || !strings.HasPrefix(parts[1], "v1=") {
		refuse("Invalid Signature Format")
		return
	}
	tRaw, v1 := parts[0][2:], parts[1][3:]
	t, err := strconv.ParseInt(tRaw, 10, 64)
	if err != nil || t < 0 {
		refuse("Invalid Signature Format")
		return
	}
	skew := h.skew
	if skew == 0 {
		skew = time.Minute
	}
	var inWindow bool
	if h.seconds {
		n := clock().Unix()
		inWindow = t > n-300 && t < n+int64(skew/time.Second)
	} else {
		n := clock().UnixMilli()
		inWindow = t > n-300000 && t < n+skew.Milliseconds()
	}
	if h.noWindow {
		inWindow = true
	}
	if !inWindow && !h.timeInHMAC {
		refuse("Invalid Time Value")
		return
	}
	key := []byte(h.secret)
	if h.hexKey {
		key, _ = hex.DecodeString(h.secret)
	}
	if h.base64Key {
		key, _ = base64.StdEncoding.DecodeString(h.secret)
		if h.stripPrefix {
			key, _ = base64.StdEncoding.DecodeString(strings.TrimPrefix(h.secret, "whsec_"))
		}
	}
	signed := body
	if h.reserialize {
		var ev devhook.RunStatus
		d := json.NewDecoder(bytes.NewReader(body))
		if h.strictStruct {
			d.DisallowUnknownFields()
		}
		if err := d.Decode(&ev); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		signed, _ = json.Marshal(ev)
	}
	if h.reencodeMap {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		signed, _ = json.Marshal(m)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(tRaw + "."))
	m.Write(signed)
	expected := hex.EncodeToString(m.Sum(nil))
	ok := hmac.Equal([]byte(v1), []byte(expected))
	if h.plainCompare {
		ok = v1 == expected
	}
	if h.prefixCompare {
		ok = strings.HasPrefix(expected, v1)
	}
	if h.timeInHMAC {
		ok = ok && inWindow
	}
	if !ok {
		refuse("Invalid signature")
		return
	}
	io.WriteString(w, `{"ok":true}`)
}

func run(t *testing.T, h http.Handler, cfg check.Config) *check.Report {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	// A handler that panics is one of the mistakes: not noise in the log.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	cfg.URL = srv.URL + "/hooks/service"
	cfg.Now = clock
	return runURL(t, cfg)
}

// runURL runs the suite against cfg.URL, with the test's secret unless
// cfg has one.
func runURL(t *testing.T, cfg check.Config) *check.Report {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = secret
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	rep, err := check.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("check.Run: %v", err)
	}
	return rep
}

func findings(rep *check.Report) map[string]check.Finding {
	m := map[string]check.Finding{}
	for _, f := range rep.Findings {
		m[f.ID] = f
	}
	return m
}

func dump(rep *check.Report) string {
	var b strings.Builder
	rep.WriteText(&b)
	return b.String()
}

// The reference receiver answers every case as the reference does: the
// suite and the reference are in step.
func TestReferenceReceiverPassesEveryCase(t *testing.T) {
	for _, skew := range []time.Duration{0, 5 * time.Second} {
		t.Run("skew "+skew.String(), func(t *testing.T) {
			rep := run(t, receiver.New(receiver.Config{Secret: secret, Skew: skew, Now: clock}), check.Config{Skew: skew})
			if !rep.Conformed || rep.Failed != 0 {
				t.Fatalf("the reference receiver does not pass:\n%s", dump(rep))
			}
			for _, r := range rep.Results {
				if r.Outcome == check.Skipped && r.Case != "key-base64-tail" {
					t.Errorf("case %s skipped with a hex secret: %s", r.Case, r.Skip)
				}
				if r.Outcome != check.Skipped && (r.Handler.Status != r.Reference.Status) {
					t.Errorf("case %s: reference receiver %d, reference %d", r.Case, r.Handler.Status, r.Reference.Status)
				}
			}
			f := findings(rep)
			for _, id := range []string{"conforms", "replay", "constant-time"} {
				if _, ok := f[id]; !ok {
					t.Errorf("no %s finding:\n%s", id, dump(rep))
				}
			}
			for _, x := range rep.Findings {
				if x.Kind == check.KindMistake {
					t.Errorf("a mistake found in the reference receiver: %+v", x)
				}
			}
		})
	}
}

// Each handler makes one mistake; the diagnosis names it.
func TestDiagnosisNamesTheMistake(t *testing.T) {
	tests := []struct {
		name      string
		h         handler
		skew      time.Duration
		conforms  bool
		want      []string // finding ids
		wantText  []string // words the diagnosis says
		wantFails []string // cases that must fail
	}{
		{name: "t read as seconds", h: handler{seconds: true},
			want:      []string{"t-seconds"},
			wantText:  []string{"clock in seconds", "milliseconds"},
			wantFails: []string{"valid", "t-seconds"}},
		{name: "t read as seconds, window inside the HMAC check", h: handler{seconds: true, timeInHMAC: true},
			want:     []string{"t-seconds"},
			wantText: []string{"clock in seconds", "time check sits inside the signature check"}},
		{name: "window check inside the HMAC check", h: handler{timeInHMAC: true},
			want:      []string{"time-in-signature-check"},
			wantText:  []string{"inside the signature check", "Invalid Time Value"},
			wantFails: []string{"expired", "ahead", "t-seconds"}}, // same status, but a time problem reads as a bad secret
		{name: "verifies re-serialized JSON", h: handler{reserialize: true},
			want:      []string{"parsed-json"},
			wantText:  []string{"not the raw body bytes", "reserialized, reordered"},
			wantFails: []string{"reserialized", "reordered", "valid-spaced", "non-utf8", "large"}},
		{name: "no replay window", h: handler{noWindow: true},
			want:      []string{"no-window"},
			wantText:  []string{"no replay protection"},
			wantFails: []string{"expired", "ahead", "t-seconds"}},
		{name: "plain == compare", h: handler{plainCompare: true}, conforms: true,
			want:     []string{"conforms", "constant-time"},
			wantText: []string{"cannot be seen from the answers", "hmac.Equal"}},
		{name: "accepts a missing header", h: handler{acceptMissing: true},
			want:      []string{"missing-accepted"},
			wantText:  []string{"without a service-signature header", "only when the header is there"},
			wantFails: []string{"missing", "empty"}},
		{name: "HMAC keyed with the hex-decoded secret", h: handler{hexKey: true},
			want:      []string{"decoded-secret"},
			wantText:  []string{"hex-decoded", "as they are"},
			wantFails: []string{"valid", "key-hex"}},
		{name: "wrong secret", h: handler{secret: "whsec_another_one"},
			want:      []string{"wrong-secret"},
			wantText:  []string{"another secret", `"Unauthorized: Invalid signature"`},
			wantFails: []string{"valid", "valid-old", "large"}},
		{name: "the stricter 5 s skew checked at 60 s", h: handler{skew: 5 * time.Second},
			want:      []string{"narrow-window"},
			wantText:  []string{"--skew 5s"},
			wantFails: []string{"valid-ahead"}},
		{name: "the stricter 5 s skew checked at 5 s", h: handler{skew: 5 * time.Second}, skew: 5 * time.Second, conforms: true,
			want: []string{"conforms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.h.secret == "" {
				tt.h.secret = secret
			}
			rep := run(t, tt.h, check.Config{Skew: tt.skew})
			text := dump(rep)
			t.Log("\n" + text)
			var said strings.Builder
			for _, f := range rep.Findings {
				said.WriteString(f.Text + "\n")
			}
			if rep.Conformed != tt.conforms {
				t.Errorf("conformed = %v, want %v", rep.Conformed, tt.conforms)
			}
			f := findings(rep)
			for _, id := range tt.want {
				if _, ok := f[id]; !ok {
					t.Errorf("the diagnosis does not name %s:\n%s", id, text)
				}
			}
			for _, w := range tt.wantText {
				if !strings.Contains(said.String(), w) {
					t.Errorf("the diagnosis does not say %q:\n%s", w, text)
				}
			}
			failed := map[string]bool{}
			for _, r := range rep.Results {
				failed[r.Case] = r.Outcome == check.Fail
			}
			for _, c := range tt.wantFails {
				if !failed[c] {
					t.Errorf("case %s does not fail:\n%s", c, text)
				}
			}
			for _, x := range rep.Findings {
				if x.Kind == check.KindMistake && !slices.Contains(tt.want, x.ID) {
					t.Errorf("the diagnosis names a mistake the handler does not make, %s: %s", x.ID, x.Text)
				}
			}
			if _, ok := f["constant-time"]; !ok {
				t.Errorf("the diagnosis does not say what it cannot see:\n%s", text)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String() + "/hook"
	ln.Close() // nothing listens there now

	// It reads the request, so that the server sees the client go away.
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hang.Close()
	defer close(release)

	tests := []struct {
		name, url string
		timeout   time.Duration
		want      string
	}{
		{"nothing listens", addr, time.Second, "connection refused"},
		{"never answers", hang.URL, 100 * time.Millisecond, "no answer within 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := check.Run(context.Background(), check.Config{URL: tt.url, Secret: secret, Timeout: tt.timeout, Now: clock})
			var ue *check.UnreachableError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want an UnreachableError", err)
			}
			if !strings.Contains(err.Error(), tt.url) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not name the address %s and %q", err, tt.url, tt.want)
			}
		})
	}
}

func TestRunNeedsURLAndSecret(t *testing.T) {
	for _, cfg := range []check.Config{{Secret: "s"}, {URL: "http://127.0.0.1:1/"}} {
		if _, err := check.Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) did not fail", cfg)
		}
	}
}

// A secret that is neither hex nor base64 skips the decoded-key cases and
// says why; the rest runs.
func TestDecodedKeyCasesSkipWhenTheSecretDoesNotDecode(t *testing.T) {
	const s = "whsec_not*hex!"
	rep := run(t, receiver.New(receiver.Config{Secret: s, Now: clock}), check.Config{Secret: s})
	skipped := 0
	for _, r := range rep.Results {
		if r.Outcome == check.Skipped {
			skipped++
			if !strings.Contains(r.Skip, "secret is not") && r.Skip != "key-base64 sends it" || !strings.Contains(dump(rep), "not sent: "+r.Skip) {
				t.Errorf("skipped %s without saying why: %q", r.Case, r.Skip)
			}
		}
	}
	if skipped != 3 || !rep.Conformed {
		t.Fatalf("skipped %d, conformed %v:\n%s", skipped, rep.Conformed, dump(rep))
	}
}

// Every case is documented and sent as described: sizes and headers.
func TestCasesAreWhatTheySay(t *testing.T) {
	rep := run(t, receiver.New(receiver.Config{Secret: secret, Now: clock}), check.Config{})
	got := map[string]check.Result{}
	for _, r := range rep.Results {
		got[r.Case] = r
	}
	if len(got) != len(check.Cases()) || len(got) < 25 {
		t.Fatalf("%d results for %d cases", len(got), len(check.Cases()))
	}
	nowMS := strconv.FormatInt(now.UnixMilli(), 10)
	checks := []struct {
		c  string
		ok func(r check.Result) bool
	}{
		{"valid", func(r check.Result) bool { return strings.HasPrefix(r.Header, "t="+nowMS+",v1=") }},
		{"missing", func(r check.Result) bool { return r.Absent }},
		{"empty", func(r check.Result) bool { return !r.Absent && r.Header == "" }},
		{"large", func(r check.Result) bool { return r.BodySize == check.LargeBody }},
		{"t-seconds", func(r check.Result) bool { return strings.HasPrefix(r.Header, "t="+nowMS[:len(nowMS)-3]+",") }},
		{"expired", func(r check.Result) bool {
			return r.Reference.Text == "Unauthorized: Invalid Time Value" && r.Header[:15] == "t="+strconv.FormatInt(now.UnixMilli()-301000, 10)[:13]
		}},
		{"replay", func(r check.Result) bool { return r.Header == got["valid"].Header && !r.Required }},
		{"v1-not-hex", func(r check.Result) bool { return r.Reference.Text == "Unauthorized: Invalid signature" }},
		{"extra-part", func(r check.Result) bool { return r.Reference.Text == "Unauthorized: Invalid Signature Format" }},
	}
	for _, c := range checks {
		if r, ok := got[c.c]; !ok || !c.ok(r) {
			t.Errorf("case %s: %+v", c.c, got[c.c])
		}
	}
}

// docs/CHECK.md documents every case of the suite by name.
func TestDocsNameEveryCase(t *testing.T) {
	b, err := os.ReadFile("../docs/CHECK.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range check.Cases() {
		if !strings.Contains(string(b), "`"+c+"`") {
			t.Errorf("docs/CHECK.md does not name case %s", c)
		}
	}
}
