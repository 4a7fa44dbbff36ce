package check

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report for a person: the table, then the diagnosis,
// each finding after its rule's id (docs/CHECK.md says what each means).
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "devhook check %s\n", r.URL)
	fmt.Fprintf(w, "t in Unix milliseconds; the reference accepts t newer than %s ago and at most %s ahead\n\n",
		time.Duration(r.WindowMS)*time.Millisecond, time.Duration(r.SkewMS)*time.Millisecond)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tSENT\tREFERENCE\tHANDLER\tRESULT")
	for _, c := range r.Results {
		ref, got := "-", "not sent: "+c.Skip
		if c.Outcome != Skipped {
			ref, got = short(c.Reference), short(c.Handler)
		}
		result := c.Outcome
		if c.Outcome == Fail {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Case, c.Sent, ref, got, result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if in := r.Interrupted; in != nil {
		_, err := fmt.Fprintf(w, "STOPPED: %s at case %s, %d of %d, before its answer; %d required case(s) answered differently so far. No diagnosis: it reads the answers to every case.\n",
			in.Reason, in.Unsent[0], len(r.Results)+1, len(r.Results)+len(in.Unsent), r.Failed)
		return err
	}
	if r.Conformed {
		fmt.Fprintln(w, "PASS: every required case is answered as the reference receiver answers it.")
	} else {
		fmt.Fprintf(w, "FAIL: %d required case(s) answered differently from the reference receiver.\n", r.Failed)
	}
	fmt.Fprintln(w, "\nDiagnosis")
	for _, f := range r.Findings {
		mark := "✗"
		switch f.Kind {
		case KindInfo:
			mark = "·"
		case KindUnobservable:
			mark = "?"
		}
		fmt.Fprintf(w, "  %s %s\n", mark, wrap("["+f.ID+"] "+f.Text, 96, "    "))
	}
	return nil
}

// short is an answer in a table cell.
func short(a Answer) string {
	if a.Status == 0 {
		return "no answer"
	}
	t := strings.TrimPrefix(a.Text, "Unauthorized: ")
	if len(t) > 34 {
		t = t[:33] + "…"
	}
	if t == "" {
		return fmt.Sprint(a.Status)
	}
	return fmt.Sprintf("%d %s", a.Status, t)
}

// wrap breaks s into lines of at most width bytes, the lines after the
// first indented.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && n+1+len(word) > width {
			b.WriteString("\n" + indent)
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
