package check

import (
	"fmt"
)

// The rules that observe rather than find a mistake: conformance, replays,
// refusal texts, and what the answers cannot show.

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
