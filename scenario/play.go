package scenario

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/hint"
	"github.com/devhook/devhook/signature"
)

// DefaultTimeout is how long a played delivery waits for its answer.
const DefaultTimeout = 10 * time.Second

// Config says where and how to play a scenario. Zero values mean defaults.
type Config struct {
	URL string // the handler; each delivery's path and query are appended to it; required
	// Secret signs each delivery afresh (service-signature, t in Unix
	// milliseconds, at the moment it is sent); empty sends them unsigned.
	// A delivery whose signature failed when recorded (Entry.Signature)
	// is sent as it failed, unless Resign.
	Secret string
	// Resign signs every delivery afresh with Secret, also those whose
	// signature failed when recorded.
	Resign bool
	// Speed divides the recorded spacing: 2 plays twice as fast; default 1.
	Speed float64
	// NoWait sends each delivery as soon as the previous one is answered.
	NoWait bool
	// Expect is what each answer is compared with; default ExpectRecorded().
	Expect  Expect
	Timeout time.Duration // per delivery; default DefaultTimeout
	Client  *http.Client  // default: a client with Timeout that does not follow redirects
	// Skew is how far ahead of its clock devhook's verifier accepts t,
	// for the hint on a refused delivery; default signature.DefaultSkew.
	Skew time.Duration
	Now  func() time.Time // default time.Now
	// Sleep waits d or until ctx ends; default a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Progress, when set, gets the report as it goes: the heading before
	// the first delivery, then a line per delivery as soon as it is
	// answered (Report.WriteText writes the same lines, and
	// Report.WriteSummary what follows them).
	Progress io.Writer
	// Name is the scenario's in the heading: its file.
	Name string
}

// Expect is what a played delivery's answer must be.
type Expect struct {
	// Class is 1 to 5 for "the status is Nxx"; Status, when not 0, is one
	// status. Both zero: the class of the recorded status (ExpectRecorded()).
	Class  int
	Status int
}

// ExpectRecorded returns the default expectation, the zero Expect: the
// recorded status's class.
func ExpectRecorded() Expect { return Expect{} }

// ParseExpect reads an expectation as a user writes it: recorded, a class
// such as 2xx, or a status.
func ParseExpect(s string) (Expect, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "" || s == "recorded":
		return ExpectRecorded(), nil
	case len(s) == 3 && strings.HasSuffix(s, "xx") && s[0] >= '1' && s[0] <= '5':
		return Expect{Class: int(s[0] - '0')}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 999 {
		return Expect{}, fmt.Errorf("%q is not an expectation: give recorded, a class such as 2xx, or a status such as 204", s)
	}
	return Expect{Status: n}, nil
}

func (x Expect) String() string {
	switch {
	case x.Status != 0:
		return strconv.Itoa(x.Status)
	case x.Class != 0:
		return strconv.Itoa(x.Class) + "xx"
	}
	return "recorded"
}

// want is what x expects of e, in words, and the check of a status.
func (x Expect) want(e *Entry) (string, func(int) bool) {
	class := func(c int) func(int) bool { return func(s int) bool { return s/100 == c } }
	switch {
	case x.Status != 0:
		return strconv.Itoa(x.Status), func(s int) bool { return s == x.Status }
	case x.Class != 0:
		return x.String(), class(x.Class)
	case e.Recorded == nil:
		return "2xx (none recorded)", class(2)
	}
	c := e.Recorded.Status / 100
	return fmt.Sprintf("%dxx (recorded %d)", c, e.Recorded.Status), class(c)
}

// Result is one played delivery.
type Result struct {
	N     int    `json:"delivery"` // 1-based, in the file's order
	Label string `json:"label"`    // the event, when the body is one: run.status queued run-…
	Sent  string `json:"sent"`     // POST /hook +1.250s, signed
	// Signature is how the delivery was signed when it failed when
	// recorded and is reproduced: invalid, missing, malformed, expired.
	Signature string           `json:"signature,omitempty"`
	Target    string           `json:"target"`
	At        time.Time        `json:"sent_at"`
	Expected  string           `json:"expected"`
	Status    int              `json:"status"`          // 0: no answer
	Text      string           `json:"text,omitempty"`  // the answer body's first line
	Error     string           `json:"error,omitempty"` // why there was no answer
	Duration  devhook.Duration `json:"duration_ms"`
	Pass      bool             `json:"pass"`
	Reason    string           `json:"reason,omitempty"` // why it did not pass
	// Hint says what to do when the handler refused a delivery that
	// devhook's own verifier accepts, as devhook listen says it.
	Hint string `json:"hint,omitempty"`
}

// Interruption says where play stopped when its context ended before the
// last delivery was answered (Ctrl-C): the deliveries not played, the one
// under way first.
type Interruption struct {
	Reason string `json:"reason"` // the context's cause: "interrupted by SIGINT"
	// InFlight: the first of Unplayed was sent and its answer was being
	// awaited; else it was waiting for its time to be sent.
	InFlight bool       `json:"in_flight"`
	Unplayed []Unplayed `json:"unplayed"`
}

// Unplayed is a delivery that play did not finish.
type Unplayed struct {
	N     int    `json:"delivery"`
	Label string `json:"label"`
	Sent  string `json:"sent"` // as Result.Sent
}

// Report is the outcome of playing a scenario.
type Report struct {
	URL     string           `json:"url"`
	Expect  string           `json:"expect"`
	Signed  bool             `json:"signed"`
	Speed   float64          `json:"speed"` // 0: no waiting
	Started time.Time        `json:"started"`
	Elapsed devhook.Duration `json:"elapsed_ms"`
	Results []Result         `json:"deliveries"`
	Failed  int              `json:"failed"`
	Pass    bool             `json:"pass"`
	// Interrupted is set when play was stopped before the end; Results
	// then has the deliveries answered before.
	Interrupted *Interruption `json:"interrupted,omitempty"`
	// asRecorded counts the deliveries sent with the failed signature
	// they were recorded with, for the heading.
	asRecorded int
}

// Play sends s's deliveries to cfg.URL in order, each after its recorded
// offset divided by Speed (measured from the first), and compares each
// answer with cfg.Expect. When the first delivery gets no answer, the
// error is a *check.UnreachableError and there is no report. When ctx ends
// first, the report has the deliveries answered so far and Interrupted,
// and the error wraps ctx's cause.
func Play(ctx context.Context, s *Scenario, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		// As the service sends: no Accept-Encoding of Go's own, no proxy,
		// no redirects followed.
		tr := &http.Transport{DisableCompression: true}
		defer tr.CloseIdleConnections()
		cfg.Client = &http.Client{Timeout: cfg.Timeout, Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	base, _ := url.Parse(cfg.URL)
	verifier := signature.Verifier{Skew: cfg.Skew, Now: cfg.Now}
	rep := &Report{URL: cfg.URL, Expect: cfg.Expect.String(), Signed: cfg.Secret != "", Speed: cfg.Speed, Started: cfg.Now()}
	if cfg.NoWait {
		rep.Speed = 0
	}
	results := make([]Result, len(s.Deliveries))
	for i := range s.Deliveries {
		results[i] = prepare(cfg, base, i, &s.Deliveries[i])
		if results[i].Signature != "" {
			rep.asRecorded++
		}
	}
	var lines *lineWriter
	if cfg.Progress != nil {
		rep.writeHeading(cfg.Progress, cfg.Name, len(results))
		lines = newLineWriter(cfg.Progress, results)
	}
	for i := range s.Deliveries {
		e, res := &s.Deliveries[i], &results[i]
		if !cfg.NoWait {
			due := rep.Started.Add(time.Duration(float64(e.OffsetMS) * float64(time.Millisecond) / cfg.Speed))
			if d := due.Sub(cfg.Now()); d > 0 {
				_ = cfg.Sleep(ctx, d) // it ends early only when ctx does, checked next
			}
		}
		if ctx.Err() != nil {
			return rep.interrupt(ctx, cfg.Now(), results[i:], false, lines)
		}
		header, body := sendOne(ctx, cfg, e, res)
		if res.Status == 0 && ctx.Err() != nil {
			return rep.interrupt(ctx, cfg.Now(), results[i:], true, lines)
		}
		if i == 0 && res.Status == 0 {
			return nil, &check.UnreachableError{URL: cfg.URL, Err: errors.New(res.Error)}
		}
		judge(res, cfg, e, verifier, header, body)
		if !res.Pass {
			rep.Failed++
		}
		rep.Results = append(rep.Results, *res)
		lines.write(res)
	}
	rep.Elapsed = devhook.Duration(cfg.Now().Sub(rep.Started))
	rep.Pass = rep.Failed == 0
	return rep, nil
}

// withDefaults checks cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	base, err := url.Parse(cfg.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return cfg, fmt.Errorf("the handler's URL %q is not an http(s) URL", cfg.URL)
	}
	switch {
	case cfg.Speed < 0:
		return cfg, fmt.Errorf("speed %g: give a positive number, or no waiting", cfg.Speed)
	case cfg.Speed == 0:
		cfg.Speed = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	return cfg, nil
}

// prepare is e's result before it is sent: what it is, where it goes,
// how it is signed and what is expected of it.
func prepare(cfg Config, base *url.URL, i int, e *Entry) Result {
	res := Result{N: i + 1, Label: label(e), Target: devhook.TargetURL(base, e.Path, e.Query)}
	res.Sent = fmt.Sprintf("%s %s +%s", e.Method, e.Path, (time.Duration(e.OffsetMS) * time.Millisecond).String())
	if !cfg.Resign {
		res.Signature = e.Signature
	}
	switch {
	case res.Signature != "":
		res.Sent += ", " + sentAs(res.Signature)
	case cfg.Secret != "":
		res.Sent += ", signed"
	}
	res.Expected, _ = cfg.Expect.want(e)
	return res
}

// interrupt ends play whose context ended with rest not played (the first
// sent, its answer awaited, when inFlight).
func (rep *Report) interrupt(ctx context.Context, now time.Time, rest []Result, inFlight bool, lines *lineWriter) (*Report, error) {
	cause := context.Cause(ctx)
	in := &Interruption{Reason: cause.Error(), InFlight: inFlight}
	for _, r := range rest {
		in.Unplayed = append(in.Unplayed, Unplayed{N: r.N, Label: r.Label, Sent: r.Sent})
	}
	rep.Interrupted = in
	rep.Elapsed = devhook.Duration(now.Sub(rep.Started))
	lines.interrupted(&rest[0], in)
	n := len(rep.Results) + len(rest)
	return rep, fmt.Errorf("play stopped at delivery %d of %d: %w", rest[0].N, n, cause)
}

// sendOne sends e, signed at the moment it goes when there is a secret,
// and fills res with the answer. It returns the signature header and the
// answer's body.
func sendOne(ctx context.Context, cfg Config, e *Entry, res *Result) (sig string, answer []byte) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, e.Method, res.Target, bytes.NewReader(e.Body))
	if err != nil {
		res.Error = "could not build the request: " + err.Error()
		return "", nil
	}
	req.Header = make(http.Header, len(e.Header)+1)
	for k, v := range e.Header {
		if strings.EqualFold(k, "Host") && len(v) > 0 {
			req.Host = v[0]
			continue
		}
		req.Header[k] = v
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // none, rather than Go's own
	}
	res.At = cfg.Now()
	drop := func() {
		for k := range req.Header {
			if strings.EqualFold(k, devhook.SignatureHeader) {
				delete(req.Header, k)
			}
		}
	}
	set := func(v string) { req.Header[http.CanonicalHeaderKey(devhook.SignatureHeader)] = []string{v} }
	switch res.Signature {
	case SignatureMalformed:
		// The header as recorded, in e.Header.
	case SignatureMissing:
		drop()
	case SignatureInvalid:
		drop()
		set(signature.Sign(notTheSecret(cfg.Secret), res.At, e.Body))
	case SignatureExpired:
		// The time check comes before the signature's, so the t decides
		// whatever the key.
		drop()
		set(signature.Sign(cmp.Or(cfg.Secret, notTheSecret("")), res.At.Add(-expiredBy), e.Body))
	default:
		if cfg.Secret != "" {
			drop()
			sig = signature.Sign(cfg.Secret, res.At, e.Body)
			set(sig)
		}
	}
	start := time.Now()
	resp, err := cfg.Client.Do(req)
	res.Duration = devhook.Duration(time.Since(start))
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
			res.Error = "no answer within " + cfg.Timeout.String()
		default:
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			res.Error = err.Error()
		}
		return sig, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // reuse the connection
	res.Status, res.Text = resp.StatusCode, firstLine(b)
	return sig, b
}

// sentAs is how a delivery whose signature failed when recorded is sent,
// in the report's words.
func sentAs(kind string) string {
	switch kind {
	case SignatureInvalid:
		return "signed with another secret, as recorded"
	case SignatureMissing:
		return "unsigned, as recorded"
	case SignatureMalformed:
		return "its malformed signature, as recorded"
	case SignatureExpired:
		return "signed 10m ago, as recorded (expired)"
	}
	return kind
}

// expiredBy is how old the t of a delivery played as expired is: twice
// the receivers' 5-minute window.
const expiredBy = 2 * signature.Window

// notTheSecret is a key that is not secret, for a delivery played as
// signed with another secret.
func notTheSecret(secret string) string {
	return "devhook-scenario-another-secret-than-" + secret + "-x"
}

// judge compares res's answer with the expectation and adds the hint.
func judge(res *Result, cfg Config, e *Entry, verifier signature.Verifier, sig string, answer []byte) {
	_, ok := cfg.Expect.want(e)
	switch {
	case res.Status == 0:
		res.Reason = "no answer: " + res.Error
	case !ok(res.Status):
		res.Reason = fmt.Sprintf("expected %s, the handler answered %d", res.Expected, res.Status)
		if res.Text != "" {
			res.Reason += " " + strconv.Quote(res.Text)
		}
	default:
		res.Pass = true
	}
	if res.Status != 401 && res.Status != 403 || res.Signature != "" {
		return
	}
	if sig == "" {
		res.Hint = "the delivery was sent without a service-signature: give the handler's secret with --secret (or DEVHOOK_SECRET)"
		return
	}
	d := &devhook.Delivery{ID: strconv.Itoa(res.N), Verdict: verifier.Verify(cfg.Secret, sig, e.Body)}
	a := &devhook.Attempt{Status: res.Status, Target: res.Target, StartedAt: res.At, Body: answer,
		Request: &devhook.Request{Resigned: true}}
	res.Hint = hint.Text(d, a)
}

// label names e's event when its body is one: run.status queued run-….
func label(e *Entry) string {
	ev := devhook.ParseEvent(e.Body)
	if ev.Type == "" {
		return ""
	}
	return strings.TrimSpace(strings.Join([]string{ev.Type, ev.StatusV2, ev.RunID}, " "))
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

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
