package check

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/devhook/devhook/junit"
)

// JUnit returns the report as a JUnit suite, a test case
// per case of the suite, the diagnosis as the suite's output.
func (r *Report) JUnit() *junit.Suite {
	s := &junit.Suite{Name: "devhook check " + r.URL, Timestamp: r.Started, Time: time.Duration(r.Elapsed)}
	for _, res := range r.Results {
		c := junit.Case{Name: res.Case, Classname: "devhook.check", Time: time.Duration(res.Duration)}
		sent := "sent " + res.Sent
		if res.Outcome != Skipped {
			c.SystemOut = fmt.Sprintf("%s; the reference receiver answers %s; the handler answered %s", sent, answerWords(res.Reference), answerWords(res.Handler))
		}
		switch res.Outcome {
		case Fail:
			msg := fmt.Sprintf("the handler answered %s; the reference receiver answers %s", answerWords(res.Handler), answerWords(res.Reference))
			c.Failure = &junit.Problem{Type: "differs-from-reference", Message: msg, Text: msg + "\n" + sent}
		case Skipped:
			c.Skipped = "not sent: " + res.Skip
		case Info:
			c.SystemOut += " (information, not required)"
		}
		s.Cases = append(s.Cases, c)
	}
	if in := r.Interrupted; in != nil {
		for i, name := range in.Unsent {
			c := junit.Case{Name: name, Classname: "devhook.check"}
			if i == 0 {
				msg := fmt.Sprintf("%s before the handler answered: check stopped here, after %d of %d cases", in.Reason, len(r.Results), len(r.Results)+len(in.Unsent))
				c.Error = &junit.Problem{Type: "interrupted", Message: msg, Text: msg}
			} else {
				c.Skipped = "not sent: " + in.Reason + " at case " + in.Unsent[0]
			}
			s.Cases = append(s.Cases, c)
		}
		s.SystemOut = "no diagnosis: " + in.Reason + " before the last case, and the diagnosis reads the answers to every case\n"
		return s
	}
	var diag strings.Builder
	for _, f := range r.Findings {
		fmt.Fprintf(&diag, "%s %s: %s\n", f.Kind, f.ID, f.Text)
	}
	s.SystemOut = diag.String()
	return s
}

func answerWords(a Answer) string {
	switch {
	case a.Status == 0 && a.Error != "":
		return "nothing (" + a.Error + ")"
	case a.Status == 0:
		return "nothing"
	case a.Text == "":
		return strconv.Itoa(a.Status)
	}
	return strconv.Itoa(a.Status) + " " + strconv.Quote(a.Text)
}
