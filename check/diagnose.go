package check

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/devhook/devhook/signature"
)

// The cases the reference accepts: correctly signed, inside the window.
var validCases = []string{"valid", "valid-old", "valid-ahead", "valid-spaced", "valid-sorted", "non-utf8", "large"}

// answers reads a report by case name.
type answers map[string]Result

func (a answers) sent(c string) bool { r, ok := a[c]; return ok && r.Outcome != Skipped }
func (a answers) acc(c string) bool  { return a.sent(c) && a[c].Handler.Accepted() }
func (a answers) ref(c string) bool  { return a.sent(c) && a[c].Handler.Refused() }
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

func (a answers) refused(names ...string) []string {
	var out []string
	for _, n := range names {
		if a.sent(n) && !a.acc(n) {
			out = append(out, n)
		}
	}
	return out
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

// diagnose reads the pattern of answers. Each rule names one mistake a
// handler makes; several can hold at once. The rules, in order:
//
//   - unanswered: some cases got no answer.
//   - server-error: a correctly signed delivery answered 5xx (no secret
//     configured, or the handler fails while verifying).
//   - t-seconds: nothing with a millisecond t is accepted, t in seconds
//     is: t is compared with a clock in seconds.
//   - time-in-signature-check: an expired t gets the same answer as a
//     wrong signature, and other refusals get other answers: the window
//     check sits inside the signature check.
//   - header-name: a signed delivery gets the answer of a missing header.
//   - decoded-secret: a signature keyed with the secret hex- or
//     base64-decoded is accepted.
//   - parsed-json: a re-serialized body passes under the original
//     signature, or a correctly signed body is refused only for its layout:
//     the HMAC is over re-encoded JSON, not the raw bytes.
//   - wrong-secret: every correctly signed delivery is refused and no rule
//     above explains it.
//   - clock: every correctly signed delivery is refused as out of the time
//     window, t in seconds too.
//   - no-window, future: an expired t, or one too far ahead, is accepted.
//   - narrow-window: t 4m59s old, or skew−1s ahead, is refused while now
//     is accepted.
//   - missing-accepted: no header, or an empty one, is accepted.
//   - no-signature-check, prefix-compare: a wrong signature, or an empty
//     or shortened v1, is accepted.
//   - lenient-format: a header the reference finds malformed is accepted.
//   - crash: 5xx where the reference refuses with 401.
//   - body-bytes, body-size: the non-UTF-8 or the 1 MiB body is refused.
//   - status: refused with another 4xx than the reference's 401.
//   - other: a failing case no rule explains.
//
// Information: replay (what the handler does with the same delivery twice),
// texts (refusal texts differ), and always constant-time, which the
// answers cannot show.
func diagnose(rep *Report, cfg Config) []Finding {
	a := answers{}
	for _, r := range rep.Results {
		a[r.Case] = r
	}
	var fs []Finding
	explained := map[string]bool{} // failing cases a finding explains
	add := func(id, kind, text string, cases ...string) {
		fs = append(fs, Finding{ID: id, Kind: kind, Text: text})
		for _, c := range cases {
			explained[c] = true
		}
	}
	skew := time.Duration(rep.SkewMS) * time.Millisecond

	var unanswered []string
	for _, r := range rep.Results {
		if r.Outcome != Skipped && r.Handler.Status == 0 {
			unanswered = append(unanswered, r.Case+" ("+r.Handler.Error+")")
			explained[r.Case] = true
		}
	}
	if len(unanswered) > 0 {
		add("unanswered", KindMistake, "gave no answer to "+strings.Join(unanswered, ", ")+".")
	}

	validAcc := a.accepted(validCases...)
	validServerError := slices.ContainsFunc(validCases, func(c string) bool { return a.sent(c) && a[c].Handler.Status >= 500 })
	if validServerError {
		add("server-error", KindMistake, fmt.Sprintf("answers %d to a correctly signed delivery (%s) → the handler has no secret configured, or it fails while verifying; the reference answers 500 Internal Server Error only when it has no secret.",
			a["valid"].Handler.Status, quote(a.text("valid"))), validCases...)
	}

	// t read as seconds.
	tSeconds := !a.acc("valid") && a.acc("t-seconds") && !a.acc("expired")
	if tSeconds {
		msg := "accepts nothing with a millisecond t, but accepts t in seconds → the handler compares t with a clock in seconds; the interface's t is Unix milliseconds (divide by 1000, or compare with the clock in milliseconds)."
		if signatureText(a.text("valid")) {
			msg += " Its answer to a millisecond t is " + quote(a.text("valid")) + ", not Invalid Time Value: the time check sits inside the signature check."
		}
		add("t-seconds", KindMistake, msg, append([]string{"t-seconds", "expired", "ahead"}, validCases...)...)
		// A millisecond t is out of its window: every signed case is
		// refused as a time problem, whatever else is wrong with it.
		for _, r := range rep.Results {
			if r.Handler.Refused() && textCheck(r.Handler.Text) == "time" {
				explained[r.Case] = true
			}
		}
	}

	// The window checked inside the HMAC check: a time refusal reads as a
	// bad signature. Only visible when the handler's texts name the check.
	timeCase := ""
	for _, c := range []string{"expired", "ahead"} {
		if a.ref(c) && textCheck(a.text(c)) == "signature" {
			timeCase = c
			break
		}
	}
	if timeCase != "" && !tSeconds {
		add("time-in-signature-check", KindMistake, fmt.Sprintf("refuses a t outside the window (%s) with %s, as if the signature were wrong → the time window is checked inside the signature check, so a clock or unit problem reads as a bad secret. Check t first and answer 401 %s.",
			timeCase, quote(a.text(timeCase)), signature.TextTime), "expired", "ahead", "t-seconds")
	}

	// Reads another header.
	if !a.acc("valid") && a.ref("valid") && a.ref("missing") && a.text("valid") == a.text("missing") && textCheck(a.text("missing")) != "signature" {
		add("header-name", KindMistake, fmt.Sprintf("answers a signed delivery as it answers one without the header (%s) → it reads another header than service-signature, or something in front of it drops the header.",
			quote(a.text("valid"))), validCases...)
	}

	// The secret decoded.
	var decoded []string
	for c, what := range map[string]string{"key-hex": "hex-decoded", "key-base64": "base64-decoded"} {
		if a.acc(c) {
			decoded = append(decoded, what)
			explained[c] = true
		}
	}
	slices.Sort(decoded)
	if len(decoded) > 0 {
		add("decoded-secret", KindMistake, "accepts a signature keyed with the secret "+strings.Join(decoded, " or ")+", and refuses one keyed with the secret as it is → it decodes the secret before using it as the HMAC key; the interface's key is the secret's bytes as they are, not decoded.",
			validCases...)
	}

	// Verifying parsed JSON.
	reser := a.accepted("reserialized", "reordered")
	layouts := a.accepted("valid", "valid-spaced", "valid-sorted")
	badLayouts := []string{}
	for _, c := range []string{"valid", "valid-spaced", "valid-sorted"} {
		if a.ref(c) && !mentions(a.text(c), "time") {
			badLayouts = append(badLayouts, c)
		}
	}
	if len(reser) > 0 || (len(layouts) > 0 && len(badLayouts) > 0 && len(decoded) == 0) {
		msg := "accepts the body re-serialized (" + strings.Join(reser, ", ") + ") under the original signature → it verifies JSON it parsed and encoded again, not the raw body bytes."
		if len(reser) == 0 {
			msg = "accepts a correctly signed body in one layout (" + strings.Join(layouts, ", ") + ") but refuses the same JSON correctly signed in another (" + strings.Join(badLayouts, ", ") + ") → it verifies JSON it parsed and encoded again, not the raw body bytes."
		}
		msg += " Compute the HMAC over the bytes as they arrived, before parsing."
		if r := a.refused("non-utf8", "large"); len(r) > 0 && len(layouts) > 0 {
			msg += " That is also why it refuses " + strings.Join(r, " and ") + "."
		}
		add("parsed-json", KindMistake, msg, "reserialized", "reordered", "valid", "valid-spaced", "valid-sorted", "non-utf8", "large")
	}

	// Refuses everything correctly signed, and nothing above says why.
	if len(validAcc) == 0 && !validServerError && !tSeconds && len(decoded) == 0 && !hasFinding(fs, "header-name") && !hasFinding(fs, "unanswered") {
		if mentions(a.text("valid"), "time") {
			add("clock", KindMistake, fmt.Sprintf("refuses every correctly signed delivery as out of its time window (%s), t in seconds too → its clock is far from this machine's, or it reads t in another unit than Unix milliseconds.",
				quote(a.text("valid"))), validCases...)
		} else {
			add("wrong-secret", KindMistake, fmt.Sprintf("refuses every correctly signed delivery (%d %s) → the handler verifies with another secret than the one given here: check which webhook's secret it reads (and that it is not trimmed, decoded or URL-escaped); or it verifies something else than the raw body.",
				a["valid"].Handler.Status, quote(a.text("valid"))), validCases...)
		}
	}

	// The window.
	switch {
	case a.acc("expired") && a.acc("ahead"):
		add("no-window", KindMistake, fmt.Sprintf("accepts a t 5m1s old and one %s ahead → no replay protection: anyone who captured a delivery can send it again, forever. Refuse t older than 5 minutes or more than %s ahead.", skew+time.Second, skew),
			"expired", "ahead", "t-seconds")
	case a.acc("expired"):
		add("no-window", KindMistake, "accepts a t 5m1s old → no replay protection: a captured delivery can be sent again long after. Refuse t older than 5 minutes (300000 ms).",
			"expired", "t-seconds")
	case a.acc("ahead"):
		add("future", KindMistake, fmt.Sprintf("accepts a t %s ahead → it does not bound t in the future; refuse t %s or more ahead of its clock.", skew+time.Second, skew), "ahead")
	}
	if a.acc("valid") && !tSeconds {
		if a.ref("valid-old") {
			add("narrow-window", KindMistake, "accepts t now but refuses a t 4m59s old → its window is shorter than the interface's 5 minutes.", "valid-old")
		}
		if a.ref("valid-ahead") {
			msg := fmt.Sprintf("refuses a t %s ahead → it allows less than %s ahead.", skew-time.Second, skew)
			if a.acc("ahead-small") && skew > 5*time.Second {
				msg += " It accepts 4 s ahead: if it uses the stricter reference's 5 s, run devhook check with --skew 5s."
			}
			add("narrow-window", KindMistake, msg, "valid-ahead")
		}
	}

	// The header.
	if m := a.accepted("missing", "empty"); len(m) > 0 {
		msg := "accepts a delivery without a service-signature header (" + strings.Join(m, ", ") + ") → anyone who knows the URL can post to it. Answer 401 " + signature.TextMissing + "."
		if a.ref("wrong-signature") {
			msg += " It checks the signature only when the header is there."
		}
		add("missing-accepted", KindMistake, msg, "missing", "empty")
	}
	if w := a.accepted("wrong-signature", "other-body"); len(w) > 0 {
		add("no-signature-check", KindMistake, "accepts a signature that does not match ("+strings.Join(w, ", ")+") → it does not compare the signature with one it computes.",
			"wrong-signature", "other-body", "v1-not-hex", "v1-empty", "v1-short", "reserialized", "reordered")
	} else if p := a.accepted("v1-empty", "v1-short"); len(p) > 0 {
		add("prefix-compare", KindMistake, "accepts an empty or shortened v1 ("+strings.Join(p, ", ")+") → it compares only as much as was sent; compare the whole signature, in constant time.",
			"v1-empty", "v1-short")
	}
	if f := a.accepted("one-part", "no-equals", "t-fraction", "extra-part", "v1-not-hex"); len(f) > 0 && !hasFinding(fs, "no-signature-check") {
		add("lenient-format", KindMistake, "accepts headers the reference refuses ("+strings.Join(f, ", ")+") → its parser is lenient: require exactly two parts, t=<digits> then v1=<lowercase hex>, and answer 401 "+signature.TextFormat+" otherwise.",
			f...)
	}

	// Failing instead of refusing.
	var crashed []string
	for _, r := range rep.Results {
		if r.Required && r.Reference.Status == 401 && r.Handler.Status >= 500 {
			crashed = append(crashed, r.Case)
			explained[r.Case] = true
		}
	}
	if len(crashed) > 0 {
		add("crash", KindMistake, "answers 5xx to "+strings.Join(crashed, ", ")+" → it fails on input it should refuse; answer 401.")
	}

	// Bodies.
	if a.acc("valid") && !hasFinding(fs, "parsed-json") {
		if a.ref("non-utf8") || (a.sent("non-utf8") && a["non-utf8"].Handler.Status >= 500) {
			add("body-bytes", KindMistake, "refuses a correctly signed body that is not UTF-8 → it decodes the body as text before verifying; verify the raw bytes.", "non-utf8")
		}
		if r := a["large"]; a.sent("large") && !a.acc("large") && r.Handler.Status != 0 {
			add("body-size", KindMistake, fmt.Sprintf("refuses a correctly signed 1 MiB body (%d %s) → it limits bodies below 1 MiB; the interface sets no size, and the reference reads up to 10 MiB.", r.Handler.Status, quote(r.Handler.Text)), "large")
		}
	}

	// Refused, naming another check.
	var misled []string
	for _, r := range rep.Results {
		if r.Outcome == Fail && r.Reference.Refused() && r.Handler.Refused() && misleads(r) && !explained[r.Case] {
			misled = append(misled, fmt.Sprintf("%s: %q where the reference says %q", r.Case, r.Handler.Text, r.Reference.Text))
			explained[r.Case] = true
		}
	}
	if len(misled) > 0 {
		add("misleading-text", KindMistake, "refuses, but names another check than the one that failed ("+strings.Join(misled, "; ")+") → a person reading the answer looks in the wrong place.")
	}

	// Refused, with another status.
	var other []string
	for _, r := range rep.Results {
		if r.Outcome == Fail && r.Reference.Refused() && r.Handler.Refused() && r.Handler.Status != r.Reference.Status {
			other = append(other, fmt.Sprintf("%s %d", r.Case, r.Handler.Status))
			explained[r.Case] = true
		}
	}
	if len(other) > 0 {
		add("status", KindMistake, "refuses with another status than the reference's 401 ("+strings.Join(other, ", ")+"); the interface's receivers answer 401. Pass --any-refusal to count any 4xx as a refusal.")
	}

	var rest []string
	for _, r := range rep.Results {
		if r.Outcome == Fail && !explained[r.Case] {
			rest = append(rest, r.Case)
		}
	}
	if len(rest) > 0 {
		add("other", KindMistake, "differs from the reference receiver in "+strings.Join(rest, ", ")+" in a way no rule here explains: see those rows.")
	}
	if rep.Failed == 0 {
		add("conforms", KindInfo, "answers every required case as the reference receiver does.")
	}

	// Information.
	if a.sent("replay") && a.acc("valid") {
		if a.acc("replay") {
			add("replay", KindInfo, "accepts the same delivery sent twice inside the window, as the reference does: make what it does with a delivery idempotent (run_id and status_v2 say which step it is).")
		} else {
			add("replay", KindInfo, fmt.Sprintf("refuses the same delivery sent twice (%d %s): it remembers deliveries it has seen. The reference accepts a replay inside the window; the service signs each retry afresh, so this is allowed.",
				a["replay"].Handler.Status, quote(a.text("replay"))))
		}
	}
	var texts []string
	for _, r := range rep.Results {
		if r.Outcome == Pass && r.Reference.Status == 401 && r.Handler.Text != r.Reference.Text {
			texts = append(texts, r.Case)
		}
	}
	if len(texts) > 0 {
		add("texts", KindInfo, fmt.Sprintf("refuses with other texts than the reference in %d cases (e.g. %s: %s, the reference says %s); the service does not read them, but they tell a person which check failed.",
			len(texts), texts[0], quote(a.text(texts[0])), quote(a[texts[0]].Reference.Text)))
	}
	add("constant-time", KindUnobservable, "whether the signature is compared in constant time cannot be seen from the answers: a plain == gives the same ones, and its timing difference (nanoseconds) drowns in HTTP's. Make sure the handler uses hmac.Equal (Go), crypto.timingSafeEqual (Node) or hmac.compare_digest (Python).")
	return fs
}

func hasFinding(fs []Finding, id string) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.ID == id })
}

func quote(s string) string {
	if s == "" {
		return "with an empty body"
	}
	return fmt.Sprintf("%q", s)
}
