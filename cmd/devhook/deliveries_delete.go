package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/storage"
)

// deleteOptions are the flags of deliveries delete.
type deleteOptions struct {
	h      historyOptions
	all    bool
	yes    bool
	before string // --before DURATION
	status string
	runID  string
	asJSON bool
	// terminal says whether stdin is a terminal, where --all asks first;
	// tests give their own.
	terminal func(io.Reader) bool
	now      func() time.Time
}

func newDeliveriesDeleteCmd() *cobra.Command {
	o := &deleteOptions{terminal: readerIsTerminal, now: time.Now}
	cmd := &cobra.Command{
		Use:   "delete ID... | --all | --before DURATION | --status S | --run-id R",
		Short: "Delete recorded deliveries, with their attempts",
		Long: `Delete removes recorded deliveries with everything kept of them: the request, every
attempt and its answer, and the retry state of one owed to the receiver, which is then no
longer retried. Through the devhook listen recording in --data when one runs (its inspector's
list drops them at once), else from the data directory.

An ID is a whole delivery id or its start, when only one id starts so; several IDs are all
deleted, or none when one is not found. --all deletes every delivery; --before DURATION
those received longer ago than that (24h, 90m, 7d), --status those whose receiver answered
that status (none: no answer), --run-id those of a run; these combine. On a terminal,
--all and a selection ask first; elsewhere they need --yes. A selection keeps the records
that cannot be read to be matched (damaged, or a newer devhook's) as evidence, and says which;
deleting them by ID, or --all, removes them.`,
		Example: `  devhook deliveries delete 0190a1b2-c3d4-7e5f
  devhook deliveries delete --before 7d --yes
  devhook deliveries delete --status 500 --run-id run-7f3a
  devhook deliveries delete --all`,
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	o.h.flags(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&o.all, "all", false, "delete every recorded delivery")
	fl.BoolVarP(&o.yes, "yes", "y", false, "do not ask before deleting with --all or a selection")
	fl.StringVar(&o.before, "before", "", "only deliveries received longer ago than this: 24h, 90m, 7d")
	fl.StringVar(&o.status, "status", "", "only this receiver status: a number, or none (no answer, or not forwarded)")
	fl.StringVar(&o.runID, "run-id", "", "only the deliveries of this run")
	fl.BoolVar(&o.asJSON, "json", false, "print {\"deleted\":N,\"ids\":[...]}")
	return cmd
}

func (o *deleteOptions) run(cmd *cobra.Command, args []string) error {
	sel, selected, err := o.selection()
	if err != nil {
		return err
	}
	switch {
	case len(args) > 0 && (o.all || selected):
		return errors.New("give delivery ids, or --all, or a selection (--before, --status, --run-id), not both")
	case len(args) == 0 && !o.all && !selected:
		return errors.New("which deliveries? Give their ids (or unique prefixes), --all, or a selection (--before, --status, --run-id)")
	case o.all && selected:
		return errors.New("--all deletes every delivery: drop it to delete those --before, --status or --run-id choose")
	}
	hist, done, _, err := o.h.open(cmd)
	if err != nil {
		return err
	}
	defer done()
	var res inspector.DeleteResult
	if len(args) > 0 {
		res, err = hist.Delete(cmd.Context(), args)
	} else {
		if err := o.confirm(cmd, o.describe(sel)); err != nil {
			return err
		}
		res, err = hist.DeleteMatching(cmd.Context(), sel)
	}
	if err != nil {
		return err
	}
	sayKept(cmd.ErrOrStderr(), res.KeptDamaged)
	return o.print(cmd.OutOrStdout(), res, selected)
}

// sayKept says on w which records a selection kept because they cannot
// be read to be matched: evidence, which the store never drops unasked.
func sayKept(w io.Writer, ids []string) {
	if len(ids) == 0 {
		return
	}
	if len(ids) == 1 {
		fmt.Fprintf(w, "devhook: kept 1 record that cannot be read (damaged, or a newer devhook's), delivery %s: a selection cannot match it, so it stays as evidence; devhook deliveries delete %s removes it\n", ids[0], ids[0])
		return
	}
	named := strings.Join(ids[:min(len(ids), 10)], ", ")
	if len(ids) > 10 {
		named += fmt.Sprintf(" and %d more", len(ids)-10)
	}
	fmt.Fprintf(w, "devhook: kept %d records that cannot be read (damaged, or a newer devhook's), deliveries %s: a selection cannot match them, so they stay as evidence; devhook deliveries delete ID removes one, --all every one\n", len(ids), named)
}

// selection reads --before, --status and --run-id, and says whether any
// was given.
func (o *deleteOptions) selection() (storage.Selection, bool, error) {
	var sel storage.Selection
	n, err := parseStatusFlag(o.status)
	if err != nil {
		return sel, false, err
	}
	sel.Filter.Status, sel.Filter.RunID = n, strings.TrimSpace(o.runID)
	if o.before != "" {
		d, err := parseAge(o.before)
		if err != nil {
			return sel, false, fmt.Errorf("--before %q: %w", o.before, err)
		}
		sel.ReceivedBefore = o.now().Add(-d)
	}
	return sel, o.before != "" || o.status != "" || o.runID != "", nil
}

// parseAge reads a duration as time.ParseDuration does, with days (7d,
// 1d12h) too.
func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil {
			return 0, errors.New("not a duration such as 24h, 90m or 7d")
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	var d time.Duration
	if s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, errors.New("not a duration such as 24h, 90m or 7d")
		}
	}
	if d += days; d <= 0 {
		return 0, errors.New("give a duration above zero, such as 24h, 90m or 7d")
	}
	return d, nil
}

// describe says what sel deletes, for the question.
func (o *deleteOptions) describe(sel storage.Selection) string {
	if o.all {
		return "every delivery recorded in " + o.h.dataDir
	}
	var parts []string
	if o.before != "" {
		parts = append(parts, "received before "+sel.ReceivedBefore.Local().Format(time.DateTime))
	}
	if o.status != "" {
		parts = append(parts, "with receiver status "+statusWord(max(sel.Filter.Status, 0)))
	}
	if sel.Filter.RunID != "" {
		parts = append(parts, "of run "+sel.Filter.RunID)
	}
	return "the deliveries recorded in " + o.h.dataDir + " " + strings.Join(parts, ", ")
}

// confirm asks before --all or a selection, on a terminal, unless --yes.
func (o *deleteOptions) confirm(cmd *cobra.Command, what string) error {
	if o.yes {
		return nil
	}
	in := cmd.InOrStdin()
	if !o.terminal(in) {
		return fmt.Errorf("this deletes %s: pass --yes to confirm (stdin is not a terminal to ask on)", what)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Delete %s? [y/N] ", what)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errors.New("nothing was deleted")
}

func (o *deleteOptions) print(w io.Writer, res inspector.DeleteResult, selected bool) error {
	if o.asJSON {
		if res.IDs == nil {
			res.IDs = []string{}
		}
		return printJSON(w, res)
	}
	switch {
	case res.Deleted == 0 && selected:
		fmt.Fprintln(w, "no delivery matches; nothing was deleted")
	case res.Deleted == 0:
		fmt.Fprintln(w, "no deliveries recorded; nothing was deleted")
	case len(res.IDs) > 0 && len(res.IDs) <= 20:
		for _, id := range res.IDs {
			fmt.Fprintf(w, "deleted %s\n", id)
		}
	default:
		fmt.Fprintf(w, "deleted %s\n", plural(res.Deleted, "delivery"))
	}
	return nil
}

// readerIsTerminal reports whether r is a terminal: a character device
// other than the null device (the stdin of a program started without one).
func readerIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(st, null)
}
