package check

import (
	"fmt"
	"slices"

	"github.com/devhook/devhook/signature"
)

// The rules of the service-signature header: the name the handler reads and
// the form it parses.

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

func headerFormat(e *evidence) (string, []string, bool) {
	text, ok := refusesEverySigned(e.a)
	if !ok || textCheck(text) != "format" {
		return "", nil, false
	}
	return fmt.Sprintf("refuses every correctly signed delivery as malformed (%s) → it expects another form of the header than the interface's t=<Unix milliseconds>,v1=<lowercase hex>, or reads another header of that name.",
		quote(text)), validCases, true
}

func lenientFormat(e *evidence) (string, []string, bool) {
	f := e.a.accepted(malformedCases...)
	if len(f) == 0 {
		return "", nil, false
	}
	return "accepts headers the reference refuses (" + join(f) + ") → its parser is lenient: require exactly two parts, t=<digits> then v1=<lowercase hex>, and answer 401 " + signature.TextFormat + " otherwise.",
		f, true
}
