package check

import (
	"fmt"
	"strings"
)

// The rules of the body: whether the handler verifies the raw bytes (not
// JSON parsed and encoded again), and reads a body that is not UTF-8 or is
// large.

// encoders names the encoder whose layout each layout case is in.
func encoders() map[string]string {
	return map[string]string{
		"layout-python":      "Python's json.dumps",
		"layout-python-utf8": "Python's json.dumps with ensure_ascii=False",
		"layout-js":          "JavaScript's JSON.stringify",
		"layout-go-map":      "Go's json.Marshal of a map",
	}
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
