package scenario

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/devhook/devhook"
)

// WriteText writes the report for a person: a row per delivery, the hints,
// then the verdict.
func (r *Report) WriteText(w io.Writer, file string) error {
	pace := "no waiting"
	if r.Speed != 0 {
		pace = "the recorded spacing"
		if r.Speed != 1 {
			pace += " ÷ " + strconv.FormatFloat(r.Speed, 'g', -1, 64)
		}
	}
	signed := "signed afresh"
	if !r.Signed {
		signed = "unsigned (no secret)"
	}
	asRecorded := 0
	for _, res := range r.Results {
		if res.Signature != "" {
			asRecorded++
		}
	}
	if asRecorded > 0 {
		signed = fmt.Sprintf("%s but %d with the failed signature they were recorded with (--resign signs them too)", signed, asRecorded)
	}
	fmt.Fprintf(w, "devhook scenario play %s → %s\n%d deliveries, %s, %s; expecting %s\n\n", file, r.URL, len(r.Results), signed, pace, expectWords(r.Expect))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DELIVERY\tSENT\tEXPECTED\tGOT\tRESULT")
	for _, res := range r.Results {
		name := strconv.Itoa(res.N)
		if res.Label != "" {
			name += " " + clip(res.Label)
		}
		result := "pass"
		if !res.Pass {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, res.Sent, res.Expected, res.got(), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A hint once, with the deliveries it is for.
	var hints []string
	hintFor := map[string][]string{}
	for _, res := range r.Results {
		if res.Hint == "" {
			continue
		}
		if hintFor[res.Hint] == nil {
			hints = append(hints, res.Hint)
		}
		hintFor[res.Hint] = append(hintFor[res.Hint], strconv.Itoa(res.N))
	}
	if len(hints) > 0 {
		fmt.Fprintln(w)
	}
	for _, h := range hints {
		ns := hintFor[h]
		which := "delivery " + ns[0]
		if len(ns) > 1 {
			which = "deliveries " + strings.Join(ns, ", ")
		}
		fmt.Fprintf(w, "%s: hint: %s\n", which, h)
	}
	fmt.Fprintln(w)
	if r.Pass {
		fmt.Fprintf(w, "PASS: %d of %d deliveries answered as expected.\n", len(r.Results), len(r.Results))
	} else {
		fmt.Fprintf(w, "FAIL: %d of %d deliveries answered otherwise than expected.\n", r.Failed, len(r.Results))
	}
	return nil
}

func expectWords(x string) string {
	if x == "recorded" {
		return "the class of each recorded status"
	}
	return x
}

// got is an answer in a table cell.
func (res *Result) got() string {
	if res.Status == 0 {
		return "no answer"
	}
	t := strings.TrimPrefix(res.Text, "Unauthorized: ")
	if len(t) > 34 {
		t = t[:33] + "…"
	}
	if t == "" || strings.HasPrefix(t, "{") {
		return strconv.Itoa(res.Status)
	}
	return strconv.Itoa(res.Status) + " " + t
}

// WriteList writes s's deliveries as devhook scenario show lists them.
func (s *Scenario) WriteList(w io.Writer, file string) error {
	v := s.Version
	if v == 0 {
		v = 1
	}
	fmt.Fprintf(w, "%s: devhook scenario version %d, %d deliveries", file, v, len(s.Deliveries))
	if len(s.Redacted) > 0 {
		fmt.Fprintf(w, ", redacted %s", strings.Join(s.Redacted, " "))
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tOFFSET\tMETHOD\tPATH\tRUN\tSTATUS_V2\tSIZE\tSIGNATURE\tRECORDED")
	for i, e := range s.Deliveries {
		ev := devhook.ParseEvent(e.Body)
		path := e.Path
		if e.Query != "" {
			path += "?" + e.Query
		}
		rec := "-"
		if e.Recorded != nil {
			rec = strconv.Itoa(e.Recorded.Status)
		}
		sig := "afresh"
		if e.Signature != "" {
			sig = e.Signature + " (as recorded)"
		}
		fmt.Fprintf(tw, "%d\t+%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", i+1, time.Duration(e.OffsetMS)*time.Millisecond, e.Method,
			clip(path), dash(ev.RunID), dash(ev.StatusV2), len(e.Body), sig, rec)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := s.FailedSignatures(); n > 0 {
		fmt.Fprintf(w, "\n%s\n", failedSignaturesNote(n))
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// FailedSignatures counts the deliveries whose signature failed when
// recorded, which play sends as they were.
func (s *Scenario) FailedSignatures() int {
	n := 0
	for i := range s.Deliveries {
		if s.Deliveries[i].Signature != "" {
			n++
		}
	}
	return n
}

// failedSignaturesNote says what play does with them, for save and show.
func failedSignaturesNote(n int) string {
	which := "1 delivery's signature"
	if n > 1 {
		which = strconv.Itoa(n) + " deliveries' signatures"
	}
	return which + " failed when recorded: play sends them as they failed (another secret, none, the malformed header, an expired t), so the handler's recorded refusal is expected again; --resign signs them afresh instead."
}

// SaveNote is what devhook scenario save says of the scenario beyond the
// count, or "".
func (s *Scenario) SaveNote() string {
	if n := s.FailedSignatures(); n > 0 {
		return failedSignaturesNote(n)
	}
	return ""
}
