package check

import (
	"fmt"
	"slices"
	"strings"

	"github.com/devhook/devhook/signature"
)

// The rules of the signature check itself: whether the handler verifies at
// all, compares v1 whole, keys the HMAC with the secret as it is, and
// demands the header. Their place in the table is diagnose.go's rules.

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
