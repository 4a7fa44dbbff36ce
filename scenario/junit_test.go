package scenario_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/receiver"
	"github.com/devhook/devhook/scenario"
)

// junitSuites is what a JUnit consumer reads of a file.
type junitSuites struct {
	Name     string  `json:"name"`
	Tests    int     `json:"tests"`
	Failures int     `json:"failures"`
	Errors   int     `json:"errors"`
	Skipped  int     `json:"skipped"`
	Time     float64 `json:"time"`
	Cases    []struct {
		Name      string  `json:"name"`
		Classname string  `json:"classname"`
		Time      float64 `json:"time"`
		Result    []struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"result"`
	} `json:"cases"`
}

// junitparserScript prints, as JSON, what junitparser (Debian's
// python3-junitparser) reads of the file named by its argument.
const junitparserScript = `
import json, sys
from junitparser import JUnitXml, TestSuite
xml = JUnitXml.fromfile(sys.argv[1])
suites = [xml] if isinstance(xml, TestSuite) else list(xml)
out = []
for s in suites:
    cases = [{"name": c.name, "classname": c.classname, "time": c.time,
              "result": [{"kind": type(r).__name__, "message": r.message} for r in c.result]} for c in s]
    out.append({"name": s.name, "tests": s.tests, "failures": s.failures, "errors": s.errors,
                "skipped": s.skipped, "time": s.time, "cases": cases})
print(json.dumps(out))
`

// junitparser returns the suites a real JUnit consumer reads in the file:
// junitparser, from Debian's python3-junitparser (.ci/run installs it).
// Without it the test is skipped, and fails under CI.
func junitparser(t *testing.T, file string) []junitSuites {
	t.Helper()
	var python string
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import junitparser").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		msg := "no python3 with junitparser (apt-get install python3-junitparser): the JUnit file is not read by a real consumer"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	out, err := exec.Command(python, "-c", junitparserScript, file).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("junitparser could not read %s: %v\n%s", file, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var suites []junitSuites
	if err := json.Unmarshal(out, &suites); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return suites
}

// The play report of a handler that reads t as seconds, read back by
// junitparser: one suite, a case per delivery, each a failure with the
// reason and the hint.
func TestJUnit_PlayReadByJunitparser(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer srv.Close()
	rep, err := scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: srv.URL, Secret: secret, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "play.xml")
	if err := rep.JUnit("testdata/run one.json").WriteFile(file); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	// Go's own reading, so that the structure is checked even without
	// the consumer.
	var doc struct {
		XMLName xml.Name `xml:"testsuites"`
		Suites  []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil || len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != 3 || doc.Suites[0].Failures != 3 {
		t.Fatalf("%v %+v\n%s", err, doc, b)
	}
	if f := doc.Suites[0].Cases[0].Failure; f == nil || !strings.Contains(f.Text, "hint: your receiver refused a delivery whose signature is valid") {
		t.Fatalf("failure %+v", f)
	}

	suites := junitparser(t, file)
	if len(suites) != 1 {
		t.Fatalf("junitparser reads %d suites", len(suites))
	}
	s := suites[0]
	if s.Tests != 3 || s.Failures != 3 || s.Errors != 0 || len(s.Cases) != 3 || !strings.HasPrefix(s.Name, "devhook scenario play ") {
		t.Fatalf("junitparser reads %+v", s)
	}
	for i, c := range s.Cases {
		if !strings.HasPrefix(c.Name, "delivery ") || c.Classname != "devhook.scenario.run_one" || len(c.Result) != 1 || c.Result[0].Kind != "Failure" ||
			c.Result[0].Message != rep.Results[i].Reason {
			t.Errorf("case %d read as %+v", i+1, c)
		}
	}

	// Passing, the same deliveries have no result but success.
	ok, _ := referenceServer(t)
	rep, err = scenario.Play(context.Background(), runScenario(t), scenario.Config{URL: ok.URL, Secret: secret, NoWait: true})
	if err != nil || rep.JUnit("run.json").WriteFile(file) != nil {
		t.Fatal(err)
	}
	if s := junitparser(t, file)[0]; s.Tests != 3 || s.Failures != 0 || len(s.Cases[0].Result) != 0 {
		t.Errorf("a passing play read as %+v", s)
	}
}

// devhook check's report as JUnit: a case per case of the suite, failures
// for those that differ from the reference, skipped for those not sent.
func TestJUnit_CheckReadByJunitparser(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(secondsHandler))
	defer srv.Close()
	rep, err := check.Run(context.Background(), check.Config{URL: srv.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "check.xml")
	if err := scenario.CheckJUnit(rep).WriteFile(file); err != nil {
		t.Fatal(err)
	}
	s := junitparser(t, file)[0]
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

	// Nothing could run: one case, an error.
	if err := scenario.ErrorJUnit("devhook check http://x", "reach the handler", errors.New("cannot reach")).WriteFile(file); err != nil {
		t.Fatal(err)
	}
	if s := junitparser(t, file)[0]; s.Tests != 1 || s.Errors != 1 || s.Cases[0].Result[0].Kind != "Error" || s.Cases[0].Result[0].Message != "cannot reach" {
		t.Errorf("an error suite read as %+v", s)
	}
}

// check --junit gives each case the time the handler took to answer it,
// and the suite its whole time, as a CI shows them: a handler that takes
// 30 ms a request has no case at 0.000.
func TestJUnit_CheckCasesHaveTheirTimes(t *testing.T) {
	const slow = 30 * time.Millisecond
	ref := receiver.New(receiver.Config{Secret: secret})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slow) // the handler's own pace, which the times must show
		ref.ServeHTTP(w, r)
	}))
	defer srv.Close()
	rep, err := check.Run(context.Background(), check.Config{URL: srv.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "check.xml")
	if err := scenario.CheckJUnit(rep).WriteFile(file); err != nil {
		t.Fatal(err)
	}
	s := junitparser(t, file)[0]
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
