package check

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/devhook/devhook/signature"
)

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

func (a answers) acc(c string) bool { return a.sent(c) && a[c].Handler.Accepted() }

func (a answers) ref(c string) bool { return a.sent(c) && a[c].Handler.Refused() }

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

// refusesEverySigned reports that the handler accepts no correctly signed
// case and refuses valid with a 4xx, whose text it returns.
func refusesEverySigned(a answers) (string, bool) {
	if len(a.accepted(validCases...)) > 0 || !a.ref("valid") {
		return "", false
	}
	return a.text("valid"), true
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
