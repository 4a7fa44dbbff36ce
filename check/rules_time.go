package check

import (
	"fmt"
	"strings"
	"time"

	"github.com/devhook/devhook/signature"
)

// The rules of t and the window: its unit, where the handler checks it, and
// how far back and ahead it accepts.

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

func clockRule(e *evidence) (string, []string, bool) {
	text, ok := refusesEverySigned(e.a)
	if !ok || textCheck(text) != "time" || e.a.acc("t-seconds") {
		return "", nil, false
	}
	return fmt.Sprintf("refuses every correctly signed delivery as out of its time window (%s), t in seconds too → its clock is far from this machine's, or it reads t in another unit than Unix milliseconds.",
		quote(text)), validCases, true
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
