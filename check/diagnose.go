package check

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
