package scenario

// A play report as JUnit XML (package junit writes the form).

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/devhook/devhook/junit"
)

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
func (r *Report) JUnit(file string) *junit.Suite {
	s := &junit.Suite{Name: "devhook scenario play " + file, Timestamp: r.Started, Time: time.Duration(r.Elapsed)}
	for _, res := range r.Results {
		name := fmt.Sprintf("delivery %d", res.N)
		if res.Label != "" {
			name += ": " + res.Label
		}
		c := junit.Case{Name: name, Classname: classname(file), Time: time.Duration(res.Duration),
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
			c.Failure = &junit.Problem{Type: kind, Message: res.Reason, Text: text}
		} else if res.Hint != "" {
			c.SystemOut += "\nhint: " + res.Hint
		}
		s.Cases = append(s.Cases, c)
	}
	if in := r.Interrupted; in != nil {
		for i, u := range in.Unplayed {
			c := junit.Case{Name: fmt.Sprintf("delivery %d", u.N), Classname: classname(file)}
			if u.Label != "" {
				c.Name += ": " + u.Label
			}
			if i == 0 {
				msg := in.Reason + " before it was sent"
				if in.InFlight {
					msg = in.Reason + " while waiting for the answer"
				}
				msg += fmt.Sprintf(": play stopped here, after %d of %d deliveries", len(r.Results), len(r.Results)+len(in.Unplayed))
				c.Error = &junit.Problem{Type: "interrupted", Message: msg, Text: msg + "\nthe delivery: " + u.Sent}
			} else {
				c.Skipped = "not played: " + in.Reason + fmt.Sprintf(" at delivery %d", in.Unplayed[0].N)
			}
			s.Cases = append(s.Cases, c)
		}
	}
	return s
}
