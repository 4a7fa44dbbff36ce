package scenario_test

import (
	"context"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devhook/devhook/junit/junittest"
	"github.com/devhook/devhook/scenario"
)

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

	suites := junittest.Read(t, file)
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
	if s := junittest.Read(t, file)[0]; s.Tests != 3 || s.Failures != 0 || len(s.Cases[0].Result) != 0 {
		t.Errorf("a passing play read as %+v", s)
	}
}
