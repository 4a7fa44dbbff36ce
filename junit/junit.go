// Package junit writes JUnit XML, the one form both devhook check's and
// devhook scenario play's reports take for a CI.
//
// JUnit XML, as CI systems (Jenkins, GitLab, GitHub's test reporters) read
// it: a <testsuites> root holding one <testsuite>, a <testcase> per played
// delivery or per devhook check case, a <failure> with the reason for one
// that did not pass, <skipped> for a check case not sent (or a delivery or
// case not played when the run was interrupted), and <error> when nothing
// could be run (the handler unreachable, a bad scenario file) or for the
// delivery or case under way when it was interrupted (Ctrl-C, SIGTERM).
package junit

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"time"

	"github.com/devhook/devhook/internal/atomicfile"
)

// Suite is one test suite.
type Suite struct {
	Name      string
	Timestamp time.Time
	Time      time.Duration
	Cases     []Case
	SystemOut string // what the whole run says: check's diagnosis
}

// Case is one test case. At most one of Failure, Error and Skipped is set.
type Case struct {
	Name      string
	Classname string
	Time      time.Duration
	Failure   *Problem
	Error     *Problem
	Skipped   string // why it was not run
	SystemOut string
}

// Problem is a failure or an error: a one-line message and the details.
type Problem struct {
	Type    string
	Message string
	Text    string
}

// The XML form.
type xmlSuites struct {
	XMLName  xml.Name `xml:"testsuites"`
	Name     string   `xml:"name,attr"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Errors   int      `xml:"errors,attr"`
	Skipped  int      `xml:"skipped,attr"`
	Time     string   `xml:"time,attr"`
	Suite    xmlSuite `xml:"testsuite"`
}

type xmlSuite struct {
	Name      string    `xml:"name,attr"`
	Tests     int       `xml:"tests,attr"`
	Failures  int       `xml:"failures,attr"`
	Errors    int       `xml:"errors,attr"`
	Skipped   int       `xml:"skipped,attr"`
	Time      string    `xml:"time,attr"`
	Timestamp string    `xml:"timestamp,attr,omitempty"`
	Cases     []xmlCase `xml:"testcase"`
	SystemOut string    `xml:"system-out,omitempty"`
}

type xmlCase struct {
	Name      string      `xml:"name,attr"`
	Classname string      `xml:"classname,attr"`
	Time      string      `xml:"time,attr"`
	Failure   *xmlProblem `xml:"failure,omitempty"`
	Error     *xmlProblem `xml:"error,omitempty"`
	Skipped   *xmlSkipped `xml:"skipped,omitempty"`
	SystemOut string      `xml:"system-out,omitempty"`
}

type xmlProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

type xmlSkipped struct {
	Message string `xml:"message,attr,omitempty"`
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }

func problem(p *Problem) *xmlProblem {
	if p == nil {
		return nil
	}
	return &xmlProblem{Message: p.Message, Type: p.Type, Text: p.Text}
}

// Marshal writes the suite as a JUnit XML document.
func (s *Suite) Marshal() ([]byte, error) {
	x := xmlSuite{Name: s.Name, Time: seconds(s.Time), SystemOut: s.SystemOut}
	if !s.Timestamp.IsZero() {
		x.Timestamp = s.Timestamp.UTC().Format("2006-01-02T15:04:05")
	}
	for _, c := range s.Cases {
		xc := xmlCase{Name: c.Name, Classname: c.Classname, Time: seconds(c.Time), Failure: problem(c.Failure),
			Error: problem(c.Error), SystemOut: c.SystemOut}
		switch {
		case c.Failure != nil:
			x.Failures++
		case c.Error != nil:
			x.Errors++
		case c.Skipped != "":
			x.Skipped++
			xc.Skipped = &xmlSkipped{Message: c.Skipped}
		}
		x.Cases = append(x.Cases, xc)
	}
	x.Tests = len(x.Cases)
	root := xmlSuites{Name: s.Name, Tests: x.Tests, Failures: x.Failures, Errors: x.Errors, Skipped: x.Skipped, Time: x.Time, Suite: x}
	b, err := xml.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the JUnit report: %w", err)
	}
	return append(append([]byte(xml.Header), b...), '\n'), nil
}

// WriteFile writes the suite to path, replacing the file whole.
func (s *Suite) WriteFile(path string) error {
	b, err := s.Marshal()
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// Error is a suite whose one case is the error that stopped the run
// before any case: an unreachable handler, a scenario file that cannot be
// read. A CI then shows the error rather than a missing report.
func Error(suite, caseName string, err error) *Suite {
	return &Suite{Name: suite, Timestamp: time.Now(), Cases: []Case{{
		Name: caseName, Classname: "devhook",
		Error: &Problem{Type: "error", Message: err.Error(), Text: err.Error()},
	}}}
}
