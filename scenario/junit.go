package scenario

// JUnit XML, as CI systems (Jenkins, GitLab, GitHub's test reporters) read
// it: a <testsuites> root holding one <testsuite>, a <testcase> per played
// delivery or per devhook check case, a <failure> with the reason for one
// that did not pass, <skipped> for a check case not sent (or a delivery or
// case not played when the run was interrupted), and <error> when nothing
// could be run (the handler unreachable, a bad scenario file) or for the
// delivery or case under way when it was interrupted (Ctrl-C, SIGTERM).

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/devhook/devhook/check"
)

// JUnitSuite is one test suite.
type JUnitSuite struct {
	Name      string
	Timestamp time.Time
	Time      time.Duration
	Cases     []JUnitCase
	SystemOut string // what the whole run says: check's diagnosis
}

// JUnitCase is one test case. At most one of Failure, Error and Skipped is set.
type JUnitCase struct {
	Name      string
	Classname string
	Time      time.Duration
	Failure   *JUnitProblem
	Error     *JUnitProblem
	Skipped   string // why it was not run
	SystemOut string
}

// JUnitProblem is a failure or an error: a one-line message and the details.
type JUnitProblem struct {
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

func problem(p *JUnitProblem) *xmlProblem {
	if p == nil {
		return nil
	}
	return &xmlProblem{Message: p.Message, Type: p.Type, Text: p.Text}
}

// Marshal writes the suite as a JUnit XML document.
func (s *JUnitSuite) Marshal() ([]byte, error) {
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
		return nil, err
	}
	return append(append([]byte(xml.Header), b...), '\n'), nil
}

// WriteFile writes the suite to path, replacing the file whole.
func (s *JUnitSuite) WriteFile(path string) error {
	b, err := s.Marshal()
	if err != nil {
		return err
	}
	return WriteFile(path, b)
}

// classname is the JUnit class of a scenario file's cases:
// devhook.scenario.<file name without extension>.
func classname(file string) string {
	base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	base = strings.Map(func(r rune) rune {
		if r == '.' || r == ' ' || r == '/' {
			return '_'
		}
		return r
	}, base)
	return "devhook.scenario." + base
}

// JUnit returns the report as a JUnit suite, a test case per delivery.
func (r *Report) JUnit(file string) *JUnitSuite {
	s := &JUnitSuite{Name: "devhook scenario play " + file, Timestamp: r.Started, Time: time.Duration(r.Elapsed)}
	for _, res := range r.Results {
		name := fmt.Sprintf("delivery %d", res.N)
		if res.Label != "" {
			name += ": " + res.Label
		}
		c := JUnitCase{Name: name, Classname: classname(file), Time: time.Duration(res.Duration),
			SystemOut: fmt.Sprintf("sent %s to %s; expected %s; got %s", res.Sent, res.Target, res.Expected, res.got())}
		if !res.Pass {
			kind := "unexpected-status"
			if res.Status == 0 {
				kind = "no-answer"
			}
			text := res.Reason
			if res.Hint != "" {
				text += "\nhint: " + res.Hint
			}
			c.Failure = &JUnitProblem{Type: kind, Message: res.Reason, Text: text}
		} else if res.Hint != "" {
			c.SystemOut += "\nhint: " + res.Hint
		}
		s.Cases = append(s.Cases, c)
	}
	if in := r.Interrupted; in != nil {
		for i, u := range in.Unplayed {
			c := JUnitCase{Name: fmt.Sprintf("delivery %d", u.N), Classname: classname(file)}
			if u.Label != "" {
				c.Name += ": " + u.Label
			}
			if i == 0 {
				msg := in.Reason + " before it was sent"
				if in.InFlight {
					msg = in.Reason + " while waiting for the answer"
				}
				msg += fmt.Sprintf(": play stopped here, after %d of %d deliveries", len(r.Results), len(r.Results)+len(in.Unplayed))
				c.Error = &JUnitProblem{Type: "interrupted", Message: msg, Text: msg + "\nthe delivery: " + u.Sent}
			} else {
				c.Skipped = "not played: " + in.Reason + fmt.Sprintf(" at delivery %d", in.Unplayed[0].N)
			}
			s.Cases = append(s.Cases, c)
		}
	}
	return s
}

// ErrorJUnit is a suite whose one case is the error that stopped the run
// before any case: an unreachable handler, a scenario file that cannot be
// read. A CI then shows the error rather than a missing report.
func ErrorJUnit(suite, caseName string, err error) *JUnitSuite {
	return &JUnitSuite{Name: suite, Timestamp: time.Now(), Cases: []JUnitCase{{
		Name: caseName, Classname: "devhook",
		Error: &JUnitProblem{Type: "error", Message: err.Error(), Text: err.Error()},
	}}}
}

// CheckJUnit returns devhook check's report as a JUnit suite, a test case
// per case of the suite, the diagnosis as the suite's output.
func CheckJUnit(r *check.Report) *JUnitSuite {
	s := &JUnitSuite{Name: "devhook check " + r.URL, Timestamp: r.Started, Time: time.Duration(r.Elapsed)}
	for _, res := range r.Results {
		c := JUnitCase{Name: res.Case, Classname: "devhook.check", Time: time.Duration(res.Duration)}
		sent := "sent " + res.Sent
		if res.Outcome != check.Skipped {
			c.SystemOut = fmt.Sprintf("%s; the reference receiver answers %s; the handler answered %s", sent, answerWords(res.Reference), answerWords(res.Handler))
		}
		switch res.Outcome {
		case check.Fail:
			msg := fmt.Sprintf("the handler answered %s; the reference receiver answers %s", answerWords(res.Handler), answerWords(res.Reference))
			c.Failure = &JUnitProblem{Type: "differs-from-reference", Message: msg, Text: msg + "\n" + sent}
		case check.Skipped:
			c.Skipped = "not sent: " + res.Skip
		case check.Info:
			c.SystemOut += " (information, not required)"
		}
		s.Cases = append(s.Cases, c)
	}
	if in := r.Interrupted; in != nil {
		for i, name := range in.Unsent {
			c := JUnitCase{Name: name, Classname: "devhook.check"}
			if i == 0 {
				msg := fmt.Sprintf("%s before the handler answered: check stopped here, after %d of %d cases", in.Reason, len(r.Results), len(r.Results)+len(in.Unsent))
				c.Error = &JUnitProblem{Type: "interrupted", Message: msg, Text: msg}
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

func answerWords(a check.Answer) string {
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
