package check_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/junit/junittest"
	"github.com/devhook/devhook/receiver"
)

// devhook check's report as JUnit: a case per case of the suite, failures
// for those that differ from the reference, skipped for those not sent.
func TestJUnit_CheckReadByJunitparser(t *testing.T) {
	rep := run(t, handler{secret: secret, seconds: true}, check.Config{})
	file := filepath.Join(t.TempDir(), "check.xml")
	if err := rep.JUnit().WriteFile(file); err != nil {
		t.Fatal(err)
	}
	s := junittest.Read(t, file)[0]
	if s.Tests != len(check.Cases()) || s.Failures != rep.Failed || s.Failures == 0 {
		t.Fatalf("junitparser reads %d tests, %d failures; the report has %d cases, %d failed", s.Tests, s.Failures, len(rep.Results), rep.Failed)
	}
	skipped := 0
	for i, c := range s.Cases {
		r := rep.Results[i]
		if c.Name != r.Case || c.Classname != "devhook.check" {
			t.Errorf("case %d: %+v", i, c)
		}
		switch r.Outcome {
		case check.Fail:
			if len(c.Result) != 1 || c.Result[0].Kind != "Failure" || !strings.Contains(c.Result[0].Message, "the reference receiver answers") {
				t.Errorf("failed case %s read as %+v", r.Case, c)
			}
		case check.Skipped:
			skipped++
			if len(c.Result) != 1 || c.Result[0].Kind != "Skipped" {
				t.Errorf("skipped case %s read as %+v", r.Case, c)
			}
		default:
			if len(c.Result) != 0 {
				t.Errorf("case %s (%s) read as %+v", r.Case, r.Outcome, c)
			}
		}
	}
	if s.Skipped != skipped || skipped == 0 {
		t.Errorf("skipped %d, counted %d", s.Skipped, skipped)
	}

}

// check --junit gives each case the time the handler took to answer it,
// and the suite its whole time, as a CI shows them: a handler that takes
// 30 ms a request has no case at 0.000.
func TestJUnit_CheckCasesHaveTheirTimes(t *testing.T) {
	const slow = 30 * time.Millisecond
	ref := receiver.New(receiver.Config{Secret: secret, Now: clock})
	rep := run(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slow) // the handler's own pace, which the times must show
		ref.ServeHTTP(w, r)
	}), check.Config{})
	file := filepath.Join(t.TempDir(), "check.xml")
	if err := rep.JUnit().WriteFile(file); err != nil {
		t.Fatal(err)
	}
	s := junittest.Read(t, file)[0]
	var sum float64
	for i, c := range s.Cases {
		if rep.Results[i].Outcome == check.Skipped {
			continue
		}
		if c.Time < slow.Seconds() {
			t.Errorf("case %s: time %.3f, want at least %.3f", c.Name, c.Time, slow.Seconds())
		}
		sum += c.Time
	}
	// Each time is rounded to the millisecond: the sum of the cases' may
	// pass the suite's by half a millisecond a case.
	if s.Time+0.0005*float64(len(s.Cases)) < sum || sum == 0 {
		t.Errorf("the suite's time %.3f is less than its cases' %.3f", s.Time, sum)
	}
}
