// Package check is the receiver conformance suite behind `devhook check`:
// it sends a fixed, documented suite of deliveries to a running webhook
// handler, each a real signed run.status delivery or a deliberate
// corruption of one, compares every answer with what the reference
// receiver answers (signature.Verifier, the checks of docs/INTERFACE.md), and
// reads the pattern of answers into a diagnosis in plain words. Why a
// receiver refused one recorded delivery is package hint's.
//
// What cannot be seen from the answers is said, not guessed: whether the
// handler compares signatures in constant time.
package check

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// DefaultTimeout is how long one case waits for the handler's answer.
const DefaultTimeout = 10 * time.Second

// LargeBody is the size of the large case's body.
const LargeBody = 1 << 20

// Config says where and how to run the suite. Zero values mean defaults.
type Config struct {
	URL    string // the handler; required
	Secret string // the webhook secret the handler verifies with; required
	// Skew is how far ahead of its clock the handler accepts t; default
	// signature.DefaultSkew (60 s). The stricter reference uses 5 s.
	Skew time.Duration
	// AnyRefusal counts any 4xx as a match where the reference refuses
	// with 401; by default the status must be the reference's.
	AnyRefusal bool
	Timeout    time.Duration    // per case; default DefaultTimeout
	Client     *http.Client     // default: a client with Timeout
	Now        func() time.Time // the suite's clock; default time.Now
}

// Outcomes of one case.
const (
	Pass    = "pass"
	Fail    = "fail"
	Info    = "info" // a case that is not required: the answer is information
	Skipped = "skipped"
)

// Answer is what a receiver answered to one case.
type Answer struct {
	Status int    `json:"status"`          // 0: no answer
	Text   string `json:"text,omitempty"`  // the body's first line, cut to 200 bytes
	Error  string `json:"error,omitempty"` // why there was no answer
	// unreachable: no connection was made, or no answer came in time;
	// otherwise a missing answer is the handler's (it closed the
	// connection: it crashed on the request).
	unreachable bool
	// gone: no connection was made.
	gone bool
}

// Accepted reports a 2xx answer.
func (a Answer) Accepted() bool { return a.Status >= 200 && a.Status < 300 }

// Refused reports a 4xx answer.
func (a Answer) Refused() bool { return a.Status >= 400 && a.Status < 500 }

// Result is one row of the table.
type Result struct {
	Case      string `json:"case"`
	Sent      string `json:"sent"`
	Required  bool   `json:"required"`
	Reference Answer `json:"reference"`
	Handler   Answer `json:"handler"`
	Outcome   string `json:"result"`            // Pass, Fail, Info or Skipped
	Skip      string `json:"skipped,omitempty"` // why a skipped case was not sent
	// Header is the service-signature header as sent; Absent when none was.
	Header   string `json:"header,omitempty"`
	Absent   bool   `json:"header_absent,omitempty"`
	BodySize int    `json:"body_size"`
	// Duration is how long the handler took to answer (0 for a case not
	// sent).
	Duration devhook.Duration `json:"duration_ms"`
}

// Finding is one line of the diagnosis: a rule of the table (Rules) that
// holds for the answers and that no rule before it explains.
type Finding struct {
	// ID is the rule's: no-verification, t-seconds, parsed-json,
	// wrong-secret, ... (every id and its meaning: Rules, docs/CHECK.md).
	ID string `json:"id"`
	// Kind is "mistake" (it makes a required case fail), "info" or
	// "unobservable" (what the answers cannot tell).
	Kind string `json:"kind"`
	Text string `json:"text"`
	// Cases are the failing cases the finding explains.
	Cases []string `json:"cases,omitempty"`
}

// Finding kinds.
const (
	KindMistake      = "mistake"
	KindInfo         = "info"
	KindUnobservable = "unobservable"
)

// Report is the outcome of a run.
type Report struct {
	URL      string    `json:"url"`
	Started  time.Time `json:"started"`
	SkewMS   int64     `json:"skew_ms"`
	WindowMS int64     `json:"window_ms"`
	Results  []Result  `json:"cases"`
	// Failed counts the required cases whose answer differs from the
	// reference's.
	Failed    int       `json:"failed"`
	Findings  []Finding `json:"diagnosis"`
	Conformed bool      `json:"pass"`
	// Elapsed is how long the suite took.
	Elapsed devhook.Duration `json:"elapsed_ms"`
	// Interrupted is set when Run's context ended before the last case:
	// Results has the cases answered before, and there is no diagnosis
	// (it reads the answers to every case).
	Interrupted *Interruption `json:"interrupted,omitempty"`
}

// Interruption says where the suite stopped when its context ended.
type Interruption struct {
	Reason string `json:"reason"` // the context's cause: "interrupted by SIGINT"
	// Unsent are the cases without an answer, the one under way first.
	Unsent []string `json:"unsent"`
}

// UnreachableError is returned when the handler gives no answer to the
// first request (Run's first case, scenario.Play's first delivery): the
// handler is not there, and nothing else can be learnt. It is about the
// developer's handler; relayclient.UnreachableError is another idea (the relay,
// reached through a proxy, with what to check).
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the handler at %s: %v (is it running, and is that its address?)", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// request is one case's request.
type request struct {
	header string
	absent bool
	body   []byte
}

// caseDef is one case of the suite.
type caseDef struct {
	name     string
	sent     string
	required bool
	// build returns the request, or ok false when the case does not apply
	// (then sent says why).
	build func(s *suite, nowMS int64) (req request, ok bool, why string)
}

// suite is a run in progress.
type suite struct {
	cfg  Config
	base []byte // the run.status body most cases send
	text []byte // a failed run's body, its error text in TextError
	last map[string]request
}

func (s *suite) sign(tms int64, body []byte) string {
	return signature.SignMillis(s.cfg.Secret, tms, body)
}

func (s *suite) signed(body []byte) func(*suite, int64) (request, bool, string) {
	return func(s *suite, now int64) (request, bool, string) {
		return request{header: s.sign(now, body), body: body}, true, ""
	}
}

// Cases lists the suite's case names in order, for documentation and tests.
func Cases() []string {
	var names []string
	for _, c := range cases(Config{}) {
		names = append(names, c.name)
	}
	return names
}

// cases is the fixed suite. The order matters only for replay, which
// sends valid's request again.
func cases(cfg Config) []caseDef {
	skew := cfg.Skew
	window := signature.Window.Milliseconds()
	at := func(offset int64) func(*suite, int64) (request, bool, string) {
		return func(s *suite, now int64) (request, bool, string) {
			return request{header: s.sign(now+offset, s.base), body: s.base}, true, ""
		}
	}
	hdr := func(f func(s *suite, now int64) string) func(*suite, int64) (request, bool, string) {
		return func(s *suite, now int64) (request, bool, string) {
			return request{header: f(s, now), body: s.base}, true, ""
		}
	}
	v1 := func(s *suite, now int64) string {
		return strings.TrimPrefix(s.sign(now, s.base), "t="+strconv.FormatInt(now, 10)+",v1=")
	}
	ts := func(ms int64) string { return strconv.FormatInt(ms, 10) }
	return []caseDef{
		{"valid", "signed now", true, at(0)},
		{"valid-old", "signed 4m59s ago", true, at(-window + 1000)},
		{"valid-ahead", "signed " + (skew - time.Second).String() + " ahead", true, at(skew.Milliseconds() - 1000)},
		{"valid-spaced", "the same JSON indented, signed", true, func(s *suite, now int64) (request, bool, string) {
			return s.signed(indent(s.base))(s, now)
		}},
		{"valid-sorted", "the same JSON, keys sorted, signed", true, func(s *suite, now int64) (request, bool, string) {
			return s.signed(sortKeys(s.base))(s, now)
		}},
		{"layout-python", "the text body as json.dumps writes it, signed", true, relaid(layoutPython())},
		{"layout-python-utf8", "the text body as json.dumps(ensure_ascii=False)", true, relaid(layoutPythonUTF8())},
		{"layout-js", "the text body as JSON.stringify writes it, signed", true, relaid(layoutJS())},
		{"layout-go-map", "the text body as a Go map encodes it, signed", true, relaid(layoutGoMap())},
		{"non-utf8", "a body that is not UTF-8, signed", true, func(s *suite, now int64) (request, bool, string) {
			return s.signed(bytes.Replace(s.base, []byte(`"error":null`), []byte("\"error\":\"solver stopped: caf\xe9 \xff\""), 1))(s, now)
		}},
		{"large", "a 1 MiB body, signed", true, func(s *suite, now int64) (request, bool, string) {
			return s.signed(pad(s.base, LargeBody))(s, now)
		}},
		{"ahead-small", "signed 4s ahead", false, at(4000)},
		{"expired", "signed 5m1s ago", true, at(-window - 1000)},
		{"ahead", "signed " + (skew + time.Second).String() + " ahead", true, at(skew.Milliseconds() + 1000)},
		{"t-seconds", "t in seconds, signed", true, func(s *suite, now int64) (request, bool, string) {
			return request{header: s.sign(now/1000, s.base), body: s.base}, true, ""
		}},
		{"missing", "no service-signature header", true, func(s *suite, _ int64) (request, bool, string) {
			return request{absent: true, body: s.base}, true, ""
		}},
		{"empty", "an empty service-signature header", true, hdr(func(*suite, int64) string { return "" })},
		{"one-part", "t=<now> only", true, hdr(func(_ *suite, now int64) string { return "t=" + ts(now) })},
		{"no-equals", "t<now>,v1<hex> (no =)", true, hdr(func(s *suite, now int64) string { return "t" + ts(now) + ",v1" + v1(s, now) })},
		{"t-fraction", "t=<now>.5 (not an integer), signed", true, func(s *suite, now int64) (request, bool, string) {
			t := ts(now) + ".5"
			return request{header: "t=" + t + ",v1=" + hmacHex([]byte(s.cfg.Secret), t, s.base), body: s.base}, true, ""
		}},
		{"extra-part", "a valid header plus ,v0=<hex>", true, hdr(func(s *suite, now int64) string { return s.sign(now, s.base) + ",v0=" + v1(s, now) })},
		{"v1-not-hex", "v1 of 64 characters, not hex", true, hdr(func(_ *suite, now int64) string { return "t=" + ts(now) + ",v1=" + strings.Repeat("zq", 32) })},
		{"v1-empty", "t=<now>,v1= (empty)", true, hdr(func(_ *suite, now int64) string { return "t=" + ts(now) + ",v1=" })},
		{"v1-short", "the first 32 characters of v1", true, hdr(func(s *suite, now int64) string { return "t=" + ts(now) + ",v1=" + v1(s, now)[:32] })},
		{"wrong-signature", "signed with another secret", true, hdr(func(s *suite, now int64) string {
			return signature.SignMillis(s.cfg.Secret+"-not", now, s.base)
		})},
		{"other-body", "the signature of another run's body", true, hdr(func(s *suite, now int64) string { return s.sign(now, otherBody(s.base)) })},
		{"reserialized", "the body indented, the original signature", true, func(s *suite, now int64) (request, bool, string) {
			return request{header: s.sign(now, s.base), body: indent(s.base)}, true, ""
		}},
		{"reordered", "the body's keys sorted, the original signature", true, func(s *suite, now int64) (request, bool, string) {
			return request{header: s.sign(now, s.base), body: sortKeys(s.base)}, true, ""
		}},
		{"key-hex", "keyed with the secret hex-decoded", true, decodedKey("hex", hex.DecodeString)},
		{"key-base64", "keyed with the secret base64-decoded", true, decodedKey("base64", decodeBase64)},
		{"key-base64-tail", "keyed with the secret after its prefix, base64-decoded", true, tailKey},
		{"replay", "valid's request sent again", false, func(s *suite, _ int64) (request, bool, string) {
			r, ok := s.last["valid"]
			return r, ok, "valid was not sent"
		}},
	}
}

// relaid builds a case signed correctly over the suite's text body laid
// out as l's encoder writes it.
func relaid(l layout) func(*suite, int64) (request, bool, string) {
	return func(s *suite, now int64) (request, bool, string) {
		body, err := relayout(s.text, l)
		if err != nil {
			return request{}, false, err.Error()
		}
		return s.signed(body)(s, now)
	}
}

// TextError is the error of the run in the suite's text body: characters
// that the three re-encoding layouts write differently (<, >, & escaped by
// Go; non-ASCII escaped by Python; both kept by JavaScript).
const TextError = "solver stopped: gap < 1% & bound > 0 — café ✓"

// decodedKey builds a case signed with the secret decoded, as a handler
// that decodes it would expect: the whole secret, or the part after a
// prefix such as whsec_.
func decodedKey(what string, decode func(string) ([]byte, error)) func(*suite, int64) (request, bool, string) {
	return func(s *suite, now int64) (request, bool, string) {
		secret := s.cfg.Secret
		candidates := []string{secret}
		if i := strings.LastIndexByte(secret, '_'); i >= 0 {
			candidates = append(candidates, secret[i+1:])
		}
		for _, c := range candidates {
			key, err := decode(c)
			if err != nil || len(key) == 0 || string(key) == secret {
				continue
			}
			return s.keyed(key, now), true, ""
		}
		return request{}, false, "secret is not " + what
	}
}

// tailKey builds a case signed with the part of the secret after its
// prefix (whsec_) base64-decoded, as a handler that strips the prefix
// expects, where the whole secret decodes too (key-base64 sends that).
func tailKey(s *suite, now int64) (request, bool, string) {
	secret := s.cfg.Secret
	i := strings.LastIndexByte(secret, '_')
	if i < 0 {
		return request{}, false, "secret has no prefix"
	}
	key, err := decodeBase64(secret[i+1:])
	if err != nil || len(key) == 0 {
		return request{}, false, "secret is not base64 after its prefix"
	}
	if whole, err := decodeBase64(secret); err != nil || string(whole) == string(key) {
		return request{}, false, "key-base64 sends it"
	}
	return s.keyed(key, now), true, ""
}

// keyed is the base body signed now with key as the HMAC key.
func (s *suite) keyed(key []byte, now int64) request {
	t := strconv.FormatInt(now, 10)
	return request{header: "t=" + t + ",v1=" + hmacHex(key, t, s.base), body: s.base}
}

// decodeBase64 decodes s as a handler's base64 decoder would: standard or
// URL-safe, padded or not; and, as Node's Buffer.from(s, "base64") does,
// both alphabets at once, a last lone character ignored.
func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	lenient := strings.NewReplacer("-", "+", "_", "/").Replace(strings.TrimRight(s, "="))
	if len(lenient)%4 == 1 {
		lenient = lenient[:len(lenient)-1]
	}
	if b, err := base64.RawStdEncoding.DecodeString(lenient); err == nil {
		return b, nil
	}
	return nil, errors.New("not base64")
}

// Run sends the suite to cfg.URL and returns the report. It fails with an
// *UnreachableError when the first case gets no answer. When ctx ends
// first, the report has the cases answered so far and Interrupted, and the
// error wraps ctx's cause.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.URL == "" {
		return nil, errors.New("check: a handler URL is required")
	}
	if cfg.Secret == "" {
		return nil, errors.New("check: the handler's secret is required: the suite signs with it")
	}
	if cfg.Skew <= 0 {
		cfg.Skew = signature.DefaultSkew
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	started, began := cfg.Now(), time.Now()
	base, err := json.Marshal(devhook.NewRunStatus("run-check-0001", "app-devhook-check", "running", started.Add(-3*time.Second)))
	if err != nil {
		return nil, err
	}
	failed := devhook.NewRunStatus("run-check-0003", "app-devhook-check", "failed", started.Add(-3*time.Second))
	failed.Data.Error = new(string)
	*failed.Data.Error = TextError
	text, err := json.Marshal(failed)
	if err != nil {
		return nil, err
	}
	s := &suite{cfg: cfg, base: base, text: text, last: map[string]request{}}
	ref := signature.Verifier{Skew: cfg.Skew, Now: cfg.Now}
	rep := &Report{URL: cfg.URL, Started: started, SkewMS: cfg.Skew.Milliseconds(), WindowMS: signature.Window.Milliseconds()}
	all := cases(cfg)
	for i, c := range all {
		if ctx.Err() != nil {
			return rep.interrupt(ctx, began, all[i:])
		}
		res := Result{Case: c.name, Sent: c.sent, Required: c.required}
		nowMS := cfg.Now().UnixMilli()
		req, ok, why := c.build(s, nowMS)
		if !ok {
			res.Outcome, res.Skip = Skipped, why
			rep.Results = append(rep.Results, res)
			continue
		}
		s.last[c.name] = req
		res.Header, res.Absent, res.BodySize = req.header, req.absent, len(req.body)
		v := ref.Verify(cfg.Secret, req.header, req.body)
		res.Reference = Answer{Status: v.Status, Text: v.Text}
		if v.OK() {
			res.Reference.Text = "accepted"
		}
		sent := time.Now()
		res.Handler = s.send(ctx, req)
		res.Duration = devhook.Duration(time.Since(sent))
		if res.Handler.Status == 0 && ctx.Err() != nil {
			return rep.interrupt(ctx, began, all[i:])
		}
		if i == 0 && res.Handler.Status == 0 && res.Handler.unreachable {
			return nil, &UnreachableError{URL: cfg.URL, Err: errors.New(res.Handler.Error)}
		}
		res.Outcome = outcome(res, cfg.AnyRefusal)
		if res.Outcome == Fail {
			rep.Failed++
		}
		rep.Results = append(rep.Results, res)
	}
	rep.Elapsed = devhook.Duration(time.Since(began))
	rep.Conformed = rep.Failed == 0
	rep.Findings = Diagnose(rep)
	return rep, nil
}

// interrupt ends a suite whose context ended with the cases rest
// unanswered.
func (rep *Report) interrupt(ctx context.Context, began time.Time, rest []caseDef) (*Report, error) {
	in := &Interruption{Reason: context.Cause(ctx).Error()}
	for _, c := range rest {
		in.Unsent = append(in.Unsent, c.name)
	}
	rep.Interrupted = in
	rep.Elapsed = devhook.Duration(time.Since(began))
	return rep, fmt.Errorf("check stopped at case %s, %d of %d: %w", rest[0].name, len(rep.Results)+1, len(rep.Results)+len(rest), context.Cause(ctx))
}

// outcome compares the handler's answer with the reference's: the same
// status (any 2xx for an acceptance; any 4xx for a refusal with
// anyRefusal), and for a refusal, a text that does not name another check
// than the reference's. A text that names none ("Unauthorized") matches.
func outcome(r Result, anyRefusal bool) string {
	match := r.Handler.Status == r.Reference.Status ||
		(r.Reference.Accepted() && r.Handler.Accepted()) ||
		(anyRefusal && r.Reference.Refused() && r.Handler.Refused())
	if match && r.Reference.Refused() && misleads(r) {
		match = false
	}
	switch {
	case !r.Required:
		return Info
	case match:
		return Pass
	default:
		return Fail
	}
}

// send posts one case with its own deadline.
func (s *suite) send(ctx context.Context, r request) Answer {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(r.body))
	if err != nil {
		return Answer{Error: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "service-webhooks/1 (devhook check)")
	if !r.absent {
		req.Header[http.CanonicalHeaderKey(devhook.SignatureHeader)] = []string{r.header}
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Answer{Error: "no answer within " + s.cfg.Timeout.String(), unreachable: true}
		}
		var op *net.OpError
		dial := errors.As(err, &op) && op.Op == "dial"
		msg := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			msg = ue.Err.Error() // not the method and URL again
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			msg = "the connection was closed without an answer"
		case errors.Is(err, syscall.ECONNRESET):
			msg = "the connection was reset without an answer"
		}
		return Answer{Error: msg, unreachable: dial, gone: dial}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // reuse the connection
	return Answer{Status: resp.StatusCode, Text: firstLine(b)}
}

// misleads reports a refusal whose text names another check than the
// reference's: "Invalid signature" for a t outside the window.
func misleads(r Result) bool {
	got := textCheck(r.Handler.Text)
	return got != "" && got != textCheck(r.Reference.Text)
}

// textCheck names the check a refusal's text says failed, or "".
func textCheck(text string) string {
	t := strings.ToLower(text)
	switch {
	case strings.Contains(t, "missing"):
		return "missing"
	case strings.Contains(t, "format"):
		return "format"
	case strings.Contains(t, "time") || strings.Contains(t, "expired") || strings.Contains(t, "tolerance"):
		return "time"
	case strings.Contains(t, "signature"):
		return "signature"
	}
	return ""
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.ToValidUTF8(s, "?")
}

// hmacHex signs t and body as the interface says, with key as bytes: the
// cases whose t text or key signature.SignMillis cannot take.
func hmacHex(key []byte, t string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(t))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// indent is body with the same keys in the same order, laid out over
// several lines.
func indent(body []byte) []byte {
	var b bytes.Buffer
	if err := json.Indent(&b, body, "", "  "); err != nil {
		return body
	}
	return b.Bytes()
}

// sortKeys is body decoded and encoded again with its keys sorted.
func sortKeys(body []byte) []byte {
	var v any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return body
	}
	b, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return b
}

// otherBody is a body of another run.
func otherBody(body []byte) []byte {
	return bytes.Replace(body, []byte("run-check-0001"), []byte("run-check-0002"), 1)
}

// pad grows body to size bytes with an extra field at the end.
func pad(body []byte, size int) []byte {
	const pre, post = `,"padding":"`, `"}`
	n := size - (len(body) - 1) - len(pre) - len(post)
	if n < 0 {
		return body
	}
	out := make([]byte, 0, size)
	out = append(out, body[:len(body)-1]...)
	out = append(out, pre...)
	out = append(out, bytes.Repeat([]byte("x"), n)...)
	return append(out, post...)
}
