package check

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/devhook/devhook/signature"
)

// Case groups the rules read.
var (
	// The cases the reference accepts: correctly signed, inside the window.
	validCases = []string{"valid", "valid-old", "valid-ahead", "valid-spaced", "valid-sorted",
		"layout-python", "layout-python-utf8", "layout-js", "layout-go-map", "non-utf8", "large"}
	// The same JSON, correctly signed, in the layouts of several encoders.
	layoutCases = []string{"valid", "valid-spaced", "valid-sorted", "layout-python", "layout-python-utf8", "layout-js", "layout-go-map"}
	// Headers the reference refuses as malformed.
	malformedCases = []string{"one-part", "no-equals", "t-fraction", "extra-part"}
	// Well-formed headers, inside the window, whose signature is wrong.
	wrongCases = []string{"wrong-signature", "other-body", "v1-not-hex", "v1-empty", "v1-short",
		"reserialized", "reordered", "key-hex", "key-base64", "key-base64-tail"}
)

// encoders names the encoder whose layout each layout case is in.
func encoders() map[string]string {
	return map[string]string{
		"layout-python":      "Python's json.dumps",
		"layout-python-utf8": "Python's json.dumps with ensure_ascii=False",
		"layout-js":          "JavaScript's JSON.stringify",
		"layout-go-map":      "Go's json.Marshal of a map",
	}
}

// A Rule is one named reading of the answers: it looks at some cases and,
// when their answers form its pattern, concludes one mistake (or one
// observation). Rules are tried in the order of Rules, their precedence: a
// rule that explains others comes before them, and when it holds they are
// not said, and the failing cases they would explain are its own.
type Rule struct {
	ID   string // stable: in --json, --junit and docs/CHECK.md
	Kind string // KindMistake, KindInfo or KindUnobservable
	// Looks says which cases the rule reads.
	Looks string
	// Means says what the rule concludes when it holds.
	Means string
	// Explains are the ids of the rules this one explains: later in the
	// table, not said when this one holds.
	Explains []string

	// match reads the answers; it returns the finding's text and the
	// cases the finding explains, or ok false.
	match func(e *evidence) (text string, cases []string, ok bool)
}

// Match reads rep with this rule alone, as if no other rule held: for
// testing a rule on its own.
func (r Rule) Match(rep *Report) (Finding, bool) {
	e := newEvidence(rep)
	text, cases, ok := r.match(e)
	if !ok {
		return Finding{}, false
	}
	return Finding{ID: r.ID, Kind: r.Kind, Text: text, Cases: e.failing(cases)}, true
}

// Diagnose reads the report's answers with every rule, in order of
// precedence, and returns the findings of the rules that hold and that no
// rule before them explains. Run calls it; it is exported to read a report
// built otherwise (a saved --json document, a test).
func Diagnose(rep *Report) []Finding {
	e := newEvidence(rep)
	suppressed := map[string]bool{}
	var fs []Finding
	for _, r := range rules() {
		text, cases, ok := r.match(e)
		if !ok {
			continue
		}
		failing := e.failing(cases)
		for _, c := range failing {
			e.explained[c] = true
		}
		// What a suppressed rule explains, the rule that explained it
		// explains too.
		for _, id := range r.Explains {
			suppressed[id] = true
		}
		if suppressed[r.ID] {
			continue
		}
		fs = append(fs, Finding{ID: r.ID, Kind: r.Kind, Text: text, Cases: failing})
	}
	return fs
}

// evidence is a report read by case name, and the failing cases that the
// rules said so far explain.
type evidence struct {
	a         answers
	results   []Result
	skew      time.Duration
	failed    int
	explained map[string]bool
}

func newEvidence(rep *Report) *evidence {
	e := &evidence{a: answers{}, results: rep.Results, failed: rep.Failed, explained: map[string]bool{},
		skew: time.Duration(rep.SkewMS) * time.Millisecond}
	if e.skew <= 0 {
		e.skew = signature.DefaultSkew
	}
	for _, r := range rep.Results {
		e.a[r.Case] = r
	}
	return e
}

// failing returns the cases of names that failed, in the suite's order.
func (e *evidence) failing(names []string) []string {
	var out []string
	for _, r := range e.results {
		if r.Outcome == Fail && slices.Contains(names, r.Case) && !slices.Contains(out, r.Case) {
			out = append(out, r.Case)
		}
	}
	return out
}

// unexplained returns the failing cases no rule said so far explains, for
// which keep holds.
func (e *evidence) unexplained(keep func(Result) bool) []Result {
	var out []Result
	for _, r := range e.results {
		if r.Outcome == Fail && !e.explained[r.Case] && keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// answers reads a report by case name.
type answers map[string]Result

func (a answers) sent(c string) bool { r, ok := a[c]; return ok && r.Outcome != Skipped }
func (a answers) acc(c string) bool  { return a.sent(c) && a[c].Handler.Accepted() }
func (a answers) ref(c string) bool  { return a.sent(c) && a[c].Handler.Refused() }

// broke reports a 5xx or no answer at all.
func (a answers) broke(c string) bool {
	return a.sent(c) && (a[c].Handler.Status >= 500 || a[c].Handler.Status == 0)
}

func (a answers) text(c string) string {
	if !a.sent(c) {
		return ""
	}
	return a[c].Handler.Text
}

// accepted lists the cases of names the handler accepted.
func (a answers) accepted(names ...string) []string {
	var out []string
	for _, n := range names {
		if a.acc(n) {
			out = append(out, n)
		}
	}
	return out
}

// refused lists the cases of names sent and not accepted.
func (a answers) refused(names ...string) []string {
	var out []string
	for _, n := range names {
		if a.sent(n) && !a.acc(n) {
			out = append(out, n)
		}
	}
	return out
}

// answer says in a few words what the handler answered to c.
func (a answers) answer(c string) string {
	h := a[c].Handler
	if h.Status == 0 {
		if h.Error != "" {
			return h.Error
		}
		return "no answer"
	}
	if h.Text == "" {
		return fmt.Sprint(h.Status)
	}
	return fmt.Sprintf("%d %q", h.Status, h.Text)
}

// withAnswers lists cases with their answers, the cases answered alike
// together: "valid, valid-spaced: 401 "…"; non-utf8: 400 "…"".
func (a answers) withAnswers(cases []string) string {
	var order []string
	same := map[string][]string{}
	for _, c := range cases {
		w := a.answer(c)
		if _, ok := same[w]; !ok {
			order = append(order, w)
		}
		same[w] = append(same[w], c)
	}
	out := make([]string, len(order))
	for i, w := range order {
		out[i] = join(same[w]) + ": " + w
	}
	return strings.Join(out, "; ")
}

// mentions reports whether a handler's text says word (any case).
func mentions(text, word string) bool {
	return strings.Contains(strings.ToLower(text), word)
}

// signatureText reports whether text reads as a refusal of the signature
// itself, not of its time or form.
func signatureText(text string) bool {
	return mentions(text, "signature") && !mentions(text, "time") && !mentions(text, "format") && !mentions(text, "missing")
}

func join(cases []string) string { return strings.Join(cases, ", ") }

func quote(s string) string {
	if s == "" {
		return "with an empty body"
	}
	return fmt.Sprintf("%q", s)
}

// Rules returns the diagnosis's table in order of precedence.
func Rules() []Rule { return rules() }

func rules() []Rule {
	return []Rule{
		{ID: "no-verification", Kind: KindMistake,
			Looks: "one-part, no-equals, t-fraction, extra-part; wrong-signature, other-body; missing, empty",
			Means: "it accepts a delivery with a malformed signature and with a wrong one (and, most often, without one): it verifies nothing. Everything else it accepts follows from that, so nothing is said about secrets, layouts or clocks.",
			Explains: []string{"no-signature-check", "server-error", "header-name", "t-seconds", "decoded-secret", "parsed-json",
				"time-in-signature-check", "header-format", "clock", "wrong-secret", "no-window", "future",
				"narrow-window", "missing-accepted", "prefix-compare", "lenient-format", "body-bytes", "body-size"},
			match: noVerification},
		{ID: "no-signature-check", Kind: KindMistake,
			Looks:    "wrong-signature, other-body (and the other cases signed wrongly)",
			Means:    "it checks the header, but accepts a signature that does not match: it does not compare v1 with the HMAC it computes.",
			Explains: []string{"decoded-secret", "parsed-json", "prefix-compare", "wrong-secret", "clock"},
			match:    noSignatureCheck},
		{ID: "server-error", Kind: KindMistake,
			Looks:    "valid",
			Means:    "it answers 5xx, or closes the connection, to a correctly signed delivery: it has no secret, or it fails while verifying.",
			Explains: []string{"clock", "wrong-secret"},
			match:    serverError},
		{ID: "t-seconds", Kind: KindMistake,
			Looks:    "t-seconds, valid and the other correctly signed cases, expired",
			Means:    "it accepts t in seconds and no t in milliseconds: it compares t with a clock in seconds.",
			Explains: []string{"time-in-signature-check", "header-format", "clock", "wrong-secret", "narrow-window"},
			match:    tSeconds},
		{ID: "header-name", Kind: KindMistake,
			Looks:    "valid, missing",
			Means:    "it answers a signed delivery as one without the header: it reads another header, or something in front of it drops service-signature.",
			Explains: []string{"header-format", "clock", "wrong-secret"},
			match:    headerName},
		{ID: "decoded-secret", Kind: KindMistake,
			Looks:    "key-hex, key-base64, key-base64-tail, valid",
			Means:    "it accepts a signature keyed with the secret hex- or base64-decoded: it decodes the secret before using it as the HMAC key.",
			Explains: []string{"clock", "wrong-secret"},
			match:    decodedSecret},
		{ID: "parsed-json", Kind: KindMistake,
			Looks:    "reserialized, reordered; valid, valid-spaced, valid-sorted, layout-python, layout-python-utf8, layout-js, layout-go-map; non-utf8, large",
			Means:    "it accepts the body re-serialized under the original signature, or a correctly signed body only in one encoder's layout: it verifies JSON it parsed and encoded again, not the raw bytes. The layout it accepts names the encoder (Python's json.dumps, JavaScript's JSON.stringify, Go's json.Marshal of a map). A failure on a body it cannot parse (non-utf8) is part of it.",
			Explains: []string{"header-format", "clock", "wrong-secret", "body-bytes", "body-size"},
			match:    parsedJSON},
		{ID: "time-in-signature-check", Kind: KindMistake,
			Looks: "expired, ahead, valid",
			Means: "it refuses a t outside the window as a wrong signature: the window is checked inside the signature check, so a clock problem reads as a bad secret.",
			match: timeInSignatureCheck},
		{ID: "header-format", Kind: KindMistake,
			Looks: "valid and the other correctly signed cases",
			Means: "it refuses every correctly signed delivery as malformed: it expects another form than t=<milliseconds>,v1=<hex>.",
			match: headerFormat},
		{ID: "clock", Kind: KindMistake,
			Looks: "valid and the other correctly signed cases, t-seconds",
			Means: "it refuses every correctly signed delivery as out of its window, t in seconds too: its clock is off, or it reads t in another unit.",
			match: clockRule},
		{ID: "wrong-secret", Kind: KindMistake,
			Looks: "valid and the other correctly signed cases",
			Means: "it refuses every correctly signed delivery as a wrong signature, and no rule before explains it: it verifies with another secret.",
			match: wrongSecret},
		{ID: "no-window", Kind: KindMistake,
			Looks:    "expired, ahead, t-seconds",
			Means:    "it accepts a t 5m1s old: no replay protection.",
			Explains: []string{"future"},
			match:    noWindow},
		{ID: "future", Kind: KindMistake,
			Looks: "ahead",
			Means: "it accepts a t further ahead than the skew: it does not bound t in the future.",
			match: future},
		{ID: "narrow-window", Kind: KindMistake,
			Looks: "valid-old, valid-ahead, ahead-small, valid",
			Means: "it accepts t now but refuses a t 4m59s old, or one just inside the skew ahead: its window is narrower than the interface's.",
			match: narrowWindow},
		{ID: "missing-accepted", Kind: KindMistake,
			Looks: "missing, empty",
			Means: "it accepts a delivery without the header (and verifies the others): anyone who knows the URL can post to it.",
			match: missingAccepted},
		{ID: "prefix-compare", Kind: KindMistake,
			Looks: "v1-empty, v1-short, wrong-signature",
			Means: "it accepts an empty or shortened v1 but not a wrong one: it compares only as much as was sent.",
			match: prefixCompare},
		{ID: "lenient-format", Kind: KindMistake,
			Looks: "one-part, no-equals, t-fraction, extra-part",
			Means: "it accepts headers the reference refuses as malformed: its parser is lenient.",
			match: lenientFormat},
		{ID: "crash", Kind: KindMistake,
			Looks: "every case the reference refuses",
			Means: "it answers 5xx, or closes the connection without an answer, where it should refuse with 401: it fails on input it does not expect (a missing header, a malformed one).",
			match: crash},
		{ID: "body-bytes", Kind: KindMistake,
			Looks: "non-utf8, valid",
			Means: "it refuses a correctly signed body that is not UTF-8: it decodes the body as text before verifying.",
			match: bodyBytes},
		{ID: "body-size", Kind: KindMistake,
			Looks: "large, valid",
			Means: "it refuses a correctly signed 1 MiB body: it limits bodies below what the reference reads.",
			match: bodySize},
		{ID: "unanswered", Kind: KindMistake,
			Looks: "every case no rule before explains",
			Means: "it gave no answer (a timeout, a closed connection) to a case no rule before explains.",
			match: unanswered},
		{ID: "misleading-text", Kind: KindMistake,
			Looks: "every refusal no rule before explains",
			Means: "it refuses, but its text names another check than the one that failed.",
			match: misleadingText},
		{ID: "status", Kind: KindMistake,
			Looks: "every refusal no rule before explains",
			Means: "it refuses with another 4xx status than the reference's 401.",
			match: statusRule},
		{ID: "other", Kind: KindMistake,
			Looks: "every failing case no rule before explains",
			Means: "it differs from the reference in a way no rule explains: read those rows.",
			match: other},
		{ID: "conforms", Kind: KindInfo,
			Looks: "every required case",
			Means: "it answers every required case as the reference receiver does.",
			match: conforms},
		{ID: "replay", Kind: KindInfo,
			Looks: "replay, valid",
			Means: "what it does with the same delivery sent twice inside the window (the reference accepts it).",
			match: replay},
		{ID: "texts", Kind: KindInfo,
			Looks: "every refusal that passes",
			Means: "it refuses with other texts than the reference's; the service does not read them, a person does.",
			match: texts},
		{ID: "constant-time", Kind: KindUnobservable,
			Looks: "nothing: the answers cannot show it",
			Means: "whether it compares the signature in constant time cannot be seen from the answers.",
			match: constantTime},
	}
}

func noVerification(e *evidence) (string, []string, bool) {
	a := e.a
	missing, bad, wrong := a.accepted("missing", "empty"), a.accepted(malformedCases...), a.accepted("wrong-signature", "other-body")
	// A header without a v1 to compare, or with a wrong one: nothing is
	// verified, whether or not the header must be there.
	if len(bad) == 0 || len(wrong) == 0 {
		return "", nil, false
	}
	var cases []string
	for _, r := range e.results {
		if r.Reference.Refused() && r.Handler.Accepted() {
			cases = append(cases, r.Case)
		}
	}
	msg := fmt.Sprintf("accepts a delivery without a signature (%s), with a malformed one (%s) and with a wrong one (%s) → it does not verify service-signature at all: anyone who knows its URL can post to it",
		join(missing), join(bad), join(wrong))
	if len(missing) == 0 {
		msg = fmt.Sprintf("refuses a delivery without a signature, but accepts one with a malformed signature (%s) and with a wrong one (%s) → it looks only whether the header is there and does not verify it: anyone who knows its URL can post to it",
			join(bad), join(wrong))
	}
	msg += ", and nothing it accepted says anything about its secret, its clock or the body's layout. Verify before acting on a delivery: refuse a missing or malformed header, a t outside the window, and a v1 other than the HMAC-SHA256 of t, \".\" and the raw body keyed with the secret; answer 401."
	// What it does with a body is worth reading again once it verifies
	// (the raw bytes, before parsing).
	if f := a.refused(validCases...); len(f) > 0 {
		msg += " Nor does it accept every correctly signed body (" + a.withAnswers(f) + "): once it verifies the raw bytes before reading them, see whether it still refuses these."
		cases = append(cases, f...)
	}
	return msg, cases, true
}

func noSignatureCheck(e *evidence) (string, []string, bool) {
	w := e.a.accepted("wrong-signature", "other-body")
	if len(w) == 0 {
		return "", nil, false
	}
	return "accepts a signature that does not match (" + join(w) + ") → it does not compare v1 with the HMAC it computes over t, \".\" and the raw body; compare them (in constant time) and answer 401 " + signature.TextSignature + " when they differ.",
		wrongCases, true
}

func serverError(e *evidence) (string, []string, bool) {
	a := e.a
	if !a.broke("valid") {
		return "", nil, false
	}
	// It fails wherever it would compute the HMAC: every case that gets
	// that far, signed rightly or wrongly.
	var cases []string
	for _, r := range e.results {
		if a.broke(r.Case) && (r.Reference.Accepted() || r.Reference.Text == signature.TextSignature) {
			cases = append(cases, r.Case)
		}
	}
	how := "answers " + a.answer("valid")
	if a["valid"].Handler.Status == 0 {
		how = "gives no answer (" + a.answer("valid") + ")"
	}
	end, gone := e.ended([]string{"valid"})
	return how + " to a correctly signed delivery → it fails while verifying: it has no secret configured, or its code fails there (see its log). The reference answers 500 only when it has no secret." + end,
		append(cases, gone...), true
}

func tSeconds(e *evidence) (string, []string, bool) {
	a := e.a
	if a.acc("valid") || !a.acc("t-seconds") || a.acc("expired") {
		return "", nil, false
	}
	msg := "accepts nothing with a millisecond t, but accepts t in seconds → the handler compares t with a clock in seconds; the interface's t is Unix milliseconds (divide by 1000, or compare with the clock in milliseconds)."
	if signatureText(a.text("valid")) {
		msg += " Its answer to a millisecond t is " + quote(a.text("valid")) + ", not Invalid Time Value: the time check sits inside the signature check."
	}
	// A millisecond t is out of its window: every signed case is refused
	// as a time problem, whatever else is wrong with it.
	cases := append([]string{"t-seconds", "expired", "ahead"}, validCases...)
	for _, r := range e.results {
		if r.Handler.Refused() && textCheck(r.Handler.Text) == "time" {
			cases = append(cases, r.Case)
		}
	}
	return msg, cases, true
}

func headerName(e *evidence) (string, []string, bool) {
	a := e.a
	if !a.ref("valid") || !a.ref("missing") || a.answer("valid") != a.answer("missing") {
		return "", nil, false
	}
	switch textCheck(a.text("missing")) {
	case "signature", "time", "format":
		return "", nil, false
	case "":
		// A bare refusal: only when a malformed or a wrong signature is
		// refused otherwise does "as if missing" mean something.
		if !slices.ContainsFunc(append(slices.Clone(malformedCases), "wrong-signature"), func(c string) bool {
			return a.sent(c) && a.answer(c) != a.answer("missing")
		}) {
			return "", nil, false
		}
	}
	var cases []string
	for _, r := range e.results {
		if a.answer(r.Case) == a.answer("missing") {
			cases = append(cases, r.Case)
		}
	}
	return fmt.Sprintf("answers a signed delivery as it answers one without the header (%s) → it reads another header than service-signature, or something in front of it drops the header.",
		quote(a.text("valid"))), cases, true
}

func decodedSecret(e *evidence) (string, []string, bool) {
	a := e.a
	if len(a.accepted("wrong-signature", "other-body")) > 0 {
		return "", nil, false
	}
	var decoded []string
	for c, what := range map[string]string{"key-hex": "hex-decoded", "key-base64": "base64-decoded", "key-base64-tail": "base64-decoded after its prefix"} {
		if a.acc(c) {
			decoded = append(decoded, what)
		}
	}
	slices.Sort(decoded)
	if len(decoded) == 0 {
		return "", nil, false
	}
	msg := "accepts a signature keyed with the secret " + strings.Join(decoded, " or ")
	if !a.acc("valid") {
		msg += ", and refuses one keyed with the secret as it is"
	}
	return msg + " → it decodes the secret before using it as the HMAC key; the interface's key is the secret's bytes as they are, not decoded.",
		append([]string{"key-hex", "key-base64", "key-base64-tail"}, validCases...), true
}

func parsedJSON(e *evidence) (string, []string, bool) {
	a := e.a
	if len(a.accepted("wrong-signature", "other-body")) > 0 {
		return "", nil, false // it accepts any signature: no-signature-check
	}
	reser := a.accepted("reserialized", "reordered")
	good := a.accepted(layoutCases...)
	var bad []string
	for _, c := range a.refused(layoutCases...) {
		if textCheck(a.text(c)) != "time" {
			bad = append(bad, c)
		}
	}
	byLayout := len(good) > 0 && len(bad) > 0
	if len(reser) == 0 && !byLayout {
		return "", nil, false
	}
	var said []string
	if byLayout {
		said = append(said, "accepts a correctly signed body in some layouts ("+join(good)+") but not the same JSON correctly signed in others ("+a.withAnswers(bad)+")")
	}
	if len(reser) > 0 {
		said = append(said, "accepts the body re-serialized under the original signature ("+join(reser)+")")
	}
	msg := strings.Join(said, ", and ") + " → it verifies JSON it parsed and encoded again, not the raw body bytes"
	var names []string
	for _, c := range []string{"layout-python", "layout-python-utf8", "layout-js", "layout-go-map"} {
		if a.acc(c) {
			names = append(names, c)
		}
	}
	if len(names) == 1 {
		msg += "; it encodes as " + encoders()[names[0]] + " does (" + names[0] + " is that layout)"
	}
	msg += ". Compute the HMAC over the bytes as they arrived, before parsing."
	if f := a.refused("non-utf8", "large"); len(f) > 0 {
		msg += " That is also why it does not accept " + a.withAnswers(f) + "."
	}
	return msg, append([]string{"reserialized", "reordered"}, validCases...), true
}

func timeInSignatureCheck(e *evidence) (string, []string, bool) {
	a := e.a
	if len(a.accepted(validCases...)) == 0 {
		return "", nil, false // its secret is not known to work: the text tells nothing
	}
	for _, c := range []string{"expired", "ahead"} {
		if a.ref(c) && textCheck(a.text(c)) == "signature" {
			return fmt.Sprintf("refuses a t outside the window (%s) with %s, as if the signature were wrong → the time window is checked inside the signature check, so a clock or unit problem reads as a bad secret. Check t first and answer 401 %s.",
				c, quote(a.text(c)), signature.TextTime), []string{"expired", "ahead", "t-seconds"}, true
		}
	}
	return "", nil, false
}

// refusesEverySigned reports that the handler accepts no correctly signed
// case and refuses valid with a 4xx, whose text it returns.
func refusesEverySigned(a answers) (string, bool) {
	if len(a.accepted(validCases...)) > 0 || !a.ref("valid") {
		return "", false
	}
	return a.text("valid"), true
}

func headerFormat(e *evidence) (string, []string, bool) {
	text, ok := refusesEverySigned(e.a)
	if !ok || textCheck(text) != "format" {
		return "", nil, false
	}
	return fmt.Sprintf("refuses every correctly signed delivery as malformed (%s) → it expects another form of the header than the interface's t=<Unix milliseconds>,v1=<lowercase hex>, or reads another header of that name.",
		quote(text)), validCases, true
}

func clockRule(e *evidence) (string, []string, bool) {
	text, ok := refusesEverySigned(e.a)
	if !ok || textCheck(text) != "time" || e.a.acc("t-seconds") {
		return "", nil, false
	}
	return fmt.Sprintf("refuses every correctly signed delivery as out of its time window (%s), t in seconds too → its clock is far from this machine's, or it reads t in another unit than Unix milliseconds.",
		quote(text)), validCases, true
}

func wrongSecret(e *evidence) (string, []string, bool) {
	text, ok := refusesEverySigned(e.a)
	if !ok || len(e.a.accepted("key-hex", "key-base64", "key-base64-tail", "t-seconds")) > 0 {
		return "", nil, false // decoded-secret, t-seconds
	}
	if c := textCheck(text); c != "signature" && c != "" {
		return "", nil, false
	}
	return fmt.Sprintf("refuses every correctly signed delivery (%s) → the handler verifies with another secret than the one given here: check which webhook's secret it reads (and that it is not trimmed, decoded or URL-escaped). Less likely, it verifies JSON it parsed and encoded again in a layout none of the layout cases has.",
		e.a.answer("valid")), validCases, true
}

func noWindow(e *evidence) (string, []string, bool) {
	a := e.a
	switch {
	case a.acc("expired") && a.acc("ahead"):
		return fmt.Sprintf("accepts a t 5m1s old and one %s ahead → no replay protection: anyone who captured a delivery can send it again, forever. Refuse t older than 5 minutes or more than %s ahead.", e.skew+time.Second, e.skew),
			[]string{"expired", "ahead", "t-seconds"}, true
	case a.acc("expired"):
		return "accepts a t 5m1s old → no replay protection: a captured delivery can be sent again long after. Refuse t older than 5 minutes (300000 ms).",
			[]string{"expired", "t-seconds"}, true
	}
	return "", nil, false
}

func future(e *evidence) (string, []string, bool) {
	if !e.a.acc("ahead") {
		return "", nil, false
	}
	return fmt.Sprintf("accepts a t %s ahead → it does not bound t in the future; refuse t %s or more ahead of its clock.", e.skew+time.Second, e.skew),
		[]string{"ahead"}, true
}

func narrowWindow(e *evidence) (string, []string, bool) {
	a := e.a
	if !a.acc("valid") {
		return "", nil, false
	}
	var said, cases []string
	if a.ref("valid-old") {
		said = append(said, "accepts t now but refuses a t 4m59s old → its window is shorter than the interface's 5 minutes.")
		cases = append(cases, "valid-old")
	}
	if a.ref("valid-ahead") {
		msg := fmt.Sprintf("refuses a t %s ahead → it allows less than %s ahead.", e.skew-time.Second, e.skew)
		if a.acc("ahead-small") && e.skew > 5*time.Second {
			msg += " It accepts 4 s ahead: if it uses the stricter reference's 5 s, run devhook check with --skew 5s."
		}
		said = append(said, msg)
		cases = append(cases, "valid-ahead")
	}
	if len(said) == 0 {
		return "", nil, false
	}
	return strings.Join(said, " It "), cases, true
}

func missingAccepted(e *evidence) (string, []string, bool) {
	a := e.a
	m := a.accepted("missing", "empty")
	if len(m) == 0 {
		return "", nil, false
	}
	msg := "accepts a delivery without a service-signature header (" + join(m) + ") → anyone who knows the URL can post to it. Answer 401 " + signature.TextMissing + "."
	if a.ref("wrong-signature") {
		msg += " It checks the signature only when the header is there."
	}
	return msg, []string{"missing", "empty"}, true
}

func prefixCompare(e *evidence) (string, []string, bool) {
	a := e.a
	p := a.accepted("v1-empty", "v1-short")
	if len(p) == 0 || len(a.accepted("wrong-signature", "other-body")) > 0 {
		return "", nil, false
	}
	return "accepts an empty or shortened v1 (" + join(p) + ") but not a wrong one → it compares only as much as was sent; compare the whole signature, in constant time.",
		[]string{"v1-empty", "v1-short"}, true
}

func lenientFormat(e *evidence) (string, []string, bool) {
	f := e.a.accepted(malformedCases...)
	if len(f) == 0 {
		return "", nil, false
	}
	return "accepts headers the reference refuses (" + join(f) + ") → its parser is lenient: require exactly two parts, t=<digits> then v1=<lowercase hex>, and answer 401 " + signature.TextFormat + " otherwise.",
		f, true
}

// ended returns the failing cases, after the first of cases, to which no
// connection could be made, and a sentence that says so: the failure on
// that case ended the handler's process.
func (e *evidence) ended(cases []string) (string, []string) {
	var gone []string
	after := false
	for _, r := range e.results {
		switch {
		case slices.Contains(cases, r.Case):
			after = true
		case after && r.Handler.gone && r.Outcome == Fail:
			gone = append(gone, r.Case)
		}
	}
	if len(gone) == 0 {
		return "", nil
	}
	return fmt.Sprintf(" After that nothing took a connection (%d cases: %s): the failure ended its process, so those cases tell nothing yet.", len(gone), join(gone)), gone
}

func crash(e *evidence) (string, []string, bool) {
	var cases []string
	for _, r := range e.unexplained(func(r Result) bool { return r.Reference.Refused() && e.a.broke(r.Case) && !r.Handler.gone }) {
		cases = append(cases, r.Case)
	}
	if len(cases) == 0 {
		return "", nil, false
	}
	end, gone := e.ended(cases)
	return "fails where it should refuse (" + e.a.withAnswers(cases) + ") → it does not expect that input (its log shows where it fails). Refuse it with 401, as the reference does." + end,
		append(cases, gone...), true
}

func bodyBytes(e *evidence) (string, []string, bool) {
	a := e.a
	if !a.acc("valid") || !a.sent("non-utf8") || a.acc("non-utf8") || e.explained["non-utf8"] {
		return "", nil, false
	}
	if textCheck(a.text("non-utf8")) == "signature" {
		return "refuses a correctly signed body that is not UTF-8 (" + a.answer("non-utf8") + ") → it verifies the body decoded as text (invalid bytes replaced), not the raw bytes.",
			[]string{"non-utf8"}, true
	}
	end, gone := e.ended([]string{"non-utf8"})
	return "does not accept a correctly signed body that is not UTF-8 (" + a.answer("non-utf8") + ") → it reads the body as text or JSON and fails on these bytes; verify the raw bytes first, and answer a validly signed body it cannot read with 2xx (and log it) or 400, not a failure." + end,
		append([]string{"non-utf8"}, gone...), true
}

func bodySize(e *evidence) (string, []string, bool) {
	a := e.a
	r, sent := a["large"], a.sent("large")
	if !a.acc("valid") || !sent || a.acc("large") || r.Handler.Status == 0 || e.explained["large"] {
		return "", nil, false
	}
	return fmt.Sprintf("refuses a correctly signed 1 MiB body (%s) → it limits bodies below 1 MiB; the interface sets no size, and the reference reads up to 10 MiB.", a.answer("large")),
		[]string{"large"}, true
}

func unanswered(e *evidence) (string, []string, bool) {
	var cases, gone []string
	for _, r := range e.unexplained(func(r Result) bool { return r.Handler.Status == 0 }) {
		if r.Handler.gone {
			gone = append(gone, r.Case)
		} else {
			cases = append(cases, r.Case)
		}
	}
	var said []string
	if len(cases) > 0 {
		said = append(said, "gave no answer to "+e.a.withAnswers(cases))
	}
	if len(gone) > 0 {
		said = append(said, fmt.Sprintf("took no connection for %d cases (%s): its process ended, or stopped listening", len(gone), join(gone)))
	}
	if len(said) == 0 {
		return "", nil, false
	}
	return strings.Join(said, "; then it ") + ".", append(cases, gone...), true
}

func misleadingText(e *evidence) (string, []string, bool) {
	var said, cases []string
	for _, r := range e.unexplained(func(r Result) bool { return r.Reference.Refused() && r.Handler.Refused() && misleads(r) }) {
		said = append(said, fmt.Sprintf("%s: %q where the reference says %q", r.Case, r.Handler.Text, r.Reference.Text))
		cases = append(cases, r.Case)
	}
	if len(cases) == 0 {
		return "", nil, false
	}
	return "refuses, but names another check than the one that failed (" + strings.Join(said, "; ") + ") → a person reading the answer looks in the wrong place.",
		cases, true
}

func statusRule(e *evidence) (string, []string, bool) {
	var said, cases []string
	for _, r := range e.unexplained(func(r Result) bool {
		return r.Reference.Refused() && r.Handler.Refused() && r.Handler.Status != r.Reference.Status
	}) {
		said = append(said, fmt.Sprintf("%s %d", r.Case, r.Handler.Status))
		cases = append(cases, r.Case)
	}
	if len(cases) == 0 {
		return "", nil, false
	}
	return "refuses with another status than the reference's 401 (" + strings.Join(said, ", ") + "); the interface's receivers answer 401. Pass --any-refusal to count any 4xx as a refusal.",
		cases, true
}

func other(e *evidence) (string, []string, bool) {
	var cases []string
	for _, r := range e.unexplained(func(Result) bool { return true }) {
		cases = append(cases, r.Case)
	}
	if len(cases) == 0 {
		return "", nil, false
	}
	return "differs from the reference receiver in " + join(cases) + " in a way no rule here explains: see those rows.", cases, true
}

func conforms(e *evidence) (string, []string, bool) {
	if e.failed != 0 || len(e.results) == 0 {
		return "", nil, false
	}
	return "answers every required case as the reference receiver does.", nil, true
}

func replay(e *evidence) (string, []string, bool) {
	a := e.a
	switch {
	case !a.sent("replay") || !a.acc("valid") || a["replay"].Handler.Status == 0:
		return "", nil, false
	case a.acc("replay"):
		return "accepts the same delivery sent twice inside the window, as the reference does: make what it does with a delivery idempotent (run_id and status_v2 say which step it is).", nil, true
	}
	return fmt.Sprintf("refuses the same delivery sent twice (%s): it remembers deliveries it has seen. The reference accepts a replay inside the window; the service signs each retry afresh, so this is allowed.",
		a.answer("replay")), nil, true
}

func texts(e *evidence) (string, []string, bool) {
	var cases []string
	for _, r := range e.results {
		if r.Outcome == Pass && r.Reference.Status == 401 && r.Handler.Text != r.Reference.Text {
			cases = append(cases, r.Case)
		}
	}
	if len(cases) == 0 {
		return "", nil, false
	}
	c := e.a[cases[0]]
	return fmt.Sprintf("refuses with other texts than the reference in %d cases (e.g. %s: %s, the reference says %s); the service does not read them, but they tell a person which check failed.",
		len(cases), c.Case, quote(c.Handler.Text), quote(c.Reference.Text)), nil, true
}

func constantTime(*evidence) (string, []string, bool) {
	return "whether the signature is compared in constant time cannot be seen from the answers: a plain == gives the same ones, and its timing difference (nanoseconds) drowns in HTTP's. Make sure the handler uses hmac.Equal (Go), crypto.timingSafeEqual (Node) or hmac.compare_digest (Python).", nil, true
}
