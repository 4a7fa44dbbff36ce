package check

import (
	"fmt"
	"strings"

	"github.com/devhook/devhook/signature"
)

// The rules of answers that differ in how, not what: a failure (5xx, no
// answer), a misleading text, another status, and what no rule explains.

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
