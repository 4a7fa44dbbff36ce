package scenario

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

// WriteText writes the report for a person: the heading, a line per
// delivery (as Config.Progress gets them while play goes), then the
// summary.
func (r *Report) WriteText(w io.Writer, file string) error {
	all := slices.Clone(r.Results)
	if r.Interrupted != nil {
		for _, u := range r.Interrupted.Unplayed {
			all = append(all, Result{N: u.N, Label: u.Label, Sent: u.Sent})
		}
	}
	r.writeHeading(w, file, len(all))
	lines := newLineWriter(w, all)
	for i := range r.Results {
		lines.write(&r.Results[i])
	}
	if r.Interrupted != nil {
		lines.interrupted(&all[len(r.Results)], r.Interrupted)
	}
	return r.WriteSummary(w)
}

// writeHeading writes what is played, how, and the table's header.
func (r *Report) writeHeading(w io.Writer, file string, n int) {
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
	asRecorded := r.asRecorded // Play's count, also of those not played
	if asRecorded == 0 {
		for _, res := range r.Results {
			if res.Signature != "" {
				asRecorded++
			}
		}
	}
	if asRecorded > 0 {
		signed = fmt.Sprintf("%s but %d with the failed signature they were recorded with (--resign signs them too)", signed, asRecorded)
	}
	fmt.Fprintf(w, "devhook scenario play %s → %s\n%d deliveries, %s, %s; expecting %s\n\n", file, r.URL, n, signed, pace, expectWords(r.Expect))
}

// lineWriter writes a delivery's line as soon as it is answered, its
// columns as wide as those of every delivery of the scenario, which are
// known before the first is sent; what came back is last, as it is the
// only column whose width is not.
type lineWriter struct {
	w                   io.Writer
	name, sent, expects int
}

func newLineWriter(w io.Writer, all []Result) *lineWriter {
	l := &lineWriter{w: w, name: len("DELIVERY"), sent: len("SENT"), expects: len("EXPECTED")}
	for i := range all {
		l.name = max(l.name, utf8.RuneCountInString(lineName(&all[i])))
		l.sent = max(l.sent, utf8.RuneCountInString(all[i].Sent))
		l.expects = max(l.expects, utf8.RuneCountInString(all[i].Expected))
	}
	l.row("DELIVERY", "SENT", "EXPECTED", "RESULT", "GOT")
	return l
}

func lineName(res *Result) string {
	name := strconv.Itoa(res.N)
	if res.Label != "" {
		name += " " + clip(res.Label)
	}
	return name
}

func (l *lineWriter) row(name, sent, expected, result, got string) {
	fmt.Fprintf(l.w, "%-*s  %-*s  %-*s  %-7s  %s\n", l.name, name, l.sent, sent, l.expects, expected, result, got)
}

// write writes res's line; nothing on a nil lineWriter.
func (l *lineWriter) write(res *Result) {
	if l == nil {
		return
	}
	result := "pass"
	if !res.Pass {
		result = "FAIL"
	}
	l.row(lineName(res), res.Sent, res.Expected, result, res.got())
}

// interrupted writes the line of the delivery under way when play stopped.
func (l *lineWriter) interrupted(res *Result, in *Interruption) {
	if l == nil {
		return
	}
	what := in.Reason + " before it was sent"
	if in.InFlight {
		what = in.Reason + " while waiting for the answer"
	}
	l.row(lineName(res), res.Sent, res.Expected, "STOPPED", what)
}

// WriteSummary writes what follows the lines: each hint once, with the
// deliveries it is for, then the verdict.
func (r *Report) WriteSummary(w io.Writer) error {
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
	var err error
	switch in := r.Interrupted; {
	case in != nil:
		n := len(r.Results) + len(in.Unplayed)
		where := "before it was sent"
		if in.InFlight {
			where = "while waiting for its answer"
		}
		_, err = fmt.Fprintf(w, "STOPPED: %s at delivery %d of %d, %s; %d played (%d answered otherwise than expected), %d not played.\n",
			in.Reason, in.Unplayed[0].N, n, where, len(r.Results), r.Failed, len(in.Unplayed))
	case r.Pass:
		_, err = fmt.Fprintf(w, "PASS: %d of %d deliveries answered as expected.\n", len(r.Results), len(r.Results))
	default:
		_, err = fmt.Fprintf(w, "FAIL: %d of %d deliveries answered otherwise than expected.\n", r.Failed, len(r.Results))
	}
	return err
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
