package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/hint"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/running"
	"github.com/devhook/devhook/scenario"
	"github.com/devhook/devhook/storage"
	"github.com/spf13/cobra"
)

// historyOptions find the recorded deliveries: through the inspector of
// the devhook listen that records in the data directory (--data, default
// ~/.devhook; listen says where it is in the directory's listen.json), or
// in the store when none runs there. --inspect ADDR names an inspector
// instead; with --data too, it is used only when it records there.
type historyOptions struct {
	dataDir string
	dataSet bool // --data was given
	inspect string
	secret  string
	// readOnly: the command only shows (list, show): the store is opened
	// read-only and never written, not even by retention or the journal.
	readOnly bool
}

func (h *historyOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&h.dataDir, "data", defaultDataDir(), "data directory of devhook listen: the listen recording there is found by itself")
	cmd.Flags().StringVar(&h.inspect, "inspect", "", "address of a running devhook listen's inspector (default: the one of the listen recording in --data)")
}

// history is the part of the store or the inspector the commands use.
type history interface {
	List(ctx context.Context, f devhook.Filter) ([]devhook.Summary, error)
	// ListPage is List with the records the store skipped (damaged, or a
	// newer devhook's).
	ListPage(ctx context.Context, f devhook.Filter) (inspector.ListPage, error)
	// Delivery, Replay and Delete take a whole id or the start of one
	// that only it has (storage.DB.Resolve, on either side).
	Delivery(ctx context.Context, id string) (*devhook.Delivery, error)
	Replay(ctx context.Context, id string, opt devhook.ReplayOptions) (devhook.Attempt, error)
	// Delete deletes all of refs, or none when one is missing or
	// ambiguous; DeleteMatching what sel chooses (zero: all).
	Delete(ctx context.Context, refs []string) (inspector.DeleteResult, error)
	DeleteMatching(ctx context.Context, sel storage.Selection) (inspector.DeleteResult, error)
}

// inspectorClient is the client of the inspector at base (http://host:port).
func inspectorClient(base string) *inspector.Client {
	return &inspector.Client{BaseURL: strings.TrimSuffix(base, "/"), HTTP: &http.Client{Timeout: 60 * time.Second}}
}

// open returns the client of the running listen's inspector when one
// answers for the data directory (or at --inspect), else the store,
// opened directly. It creates nothing: a directory without a store is an
// error. close releases it. live says whether a running listen answers.
func (h *historyOptions) open(cmd *cobra.Command) (hist history, close func(), live bool, err error) {
	ctx := cmd.Context()
	h.dataSet = cmd.Flags().Changed("data")
	var noInspector *running.Listen // a listen records there with --inspect off
	if h.inspect != "" {
		c := inspectorClient("http://" + h.inspect)
		if s, err := c.Settings(ctx); err == nil {
			if !h.dataSet || (s.Data != "" && s.Data == absDir(h.dataDir)) {
				return c, func() {}, true, nil
			}
			// Another listen's: read the directory asked for.
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, false, fmt.Errorf("%w (is another program on --inspect %s?)", err, h.inspect)
		}
	} else if l, err := running.Read(h.dataDir); err == nil {
		if l.InspectorURL == "" {
			noInspector = &l
		} else {
			c := inspectorClient(l.InspectorURL)
			if s, err := c.Settings(ctx); err == nil && s.Data == l.Data {
				return c, func() {}, true, nil
			}
			// Not answering for this directory: the listen is stopping,
			// or its pid was reused. The store's lock tells.
		}
	}
	path := filepath.Join(h.dataDir, "deliveries.db")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil, false, fmt.Errorf("no devhook data in %s: devhook listen --data %s records there", h.dataDir, h.dataDir)
	} else if err != nil {
		return nil, nil, false, fmt.Errorf("read the data directory: %w", err)
	}
	say := noticesTo(cmd.ErrOrStderr())
	// Retention is listen's (its --max-age, --max-deliveries): a command
	// that writes (replay's attempt, a delete) keeps what it did not ask
	// to remove, an old recording's deliveries too.
	db, err := storage.Open(path, storage.Config{ReadOnly: h.readOnly, Logf: say, MaxAge: -1, MaxDeliveries: -1})
	if errors.Is(err, storage.ErrLocked) {
		return nil, nil, false, lockedError(h.dataDir, noInspector)
	}
	if err != nil {
		return nil, nil, false, err
	}
	ag, err := agent.New(agent.Config{Store: db, Secret: h.secret, Logf: say})
	if err != nil {
		db.Close()
		return nil, nil, false, err
	}
	return offline{db: db, ag: ag}, func() { db.Close() }, false, nil
}

// noticesTo is the Logf of a store (or agent) a command opens: each
// notice one line of w, "devhook: " and the notice without its package's
// prefix, as the command's other lines, not a log line with a date. Safe
// for the store's own goroutine.
func noticesTo(w io.Writer) func(format string, args ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		msg := strings.TrimPrefix(fmt.Sprintf(format, args...), "storage: ")
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "devhook: %s\n", strings.TrimRight(msg, "\n"))
	}
}

// lockedError is the short error for a store another process holds: a
// listen without an inspector (l), or a devhook that says nothing of
// itself in listen.json.
func lockedError(dir string, l *running.Listen) error {
	if l != nil {
		return fmt.Errorf("devhook listen (pid %d) records in %s with --inspect off (%w): restart it with an inspector to read while it runs", l.PID, dir, storage.ErrLocked)
	}
	return fmt.Errorf("another devhook uses %s (%w): stop it, or pass its inspector's address with --inspect", dir, storage.ErrLocked)
}

type offline struct {
	db *storage.DB
	ag *agent.Agent
}

func (o offline) List(_ context.Context, f devhook.Filter) ([]devhook.Summary, error) {
	return o.db.List(f)
}
func (o offline) ListPage(_ context.Context, f devhook.Filter) (inspector.ListPage, error) {
	items, err := o.db.List(f)
	if err != nil {
		return inspector.ListPage{}, err
	}
	p := inspector.ListPage{Items: items}
	if d := o.db.Damage(); d.Any() {
		p.Damage = &d
	}
	return p, nil
}
func (o offline) Delivery(_ context.Context, ref string) (*devhook.Delivery, error) {
	id, err := o.db.Resolve(ref)
	if err != nil {
		return nil, err
	}
	return o.db.Delivery(id)
}
func (o offline) Replay(ctx context.Context, ref string, opt devhook.ReplayOptions) (devhook.Attempt, error) {
	id, err := o.db.Resolve(ref)
	if err != nil {
		return devhook.Attempt{}, err
	}
	return o.ag.Replay(ctx, id, opt)
}
func (o offline) Delete(_ context.Context, refs []string) (inspector.DeleteResult, error) {
	ids := make([]string, 0, len(refs))
	var problems []string
	for _, ref := range refs {
		id, err := o.db.Resolve(ref)
		if c := devhook.ErrorCode(err); c == devhook.ENOTFOUND || c == devhook.ECONFLICT || c == devhook.EINVALID {
			problems = append(problems, err.Error())
			continue
		} else if err != nil {
			return inspector.DeleteResult{}, err
		}
		ids = append(ids, id)
	}
	if len(problems) > 0 {
		return inspector.DeleteResult{}, fmt.Errorf("%s\nnothing was deleted", strings.Join(problems, "\n"))
	}
	removed, err := o.db.Delete(ids)
	return inspector.DeleteResult{Deleted: len(removed), IDs: removed}, err
}
func (o offline) DeleteMatching(_ context.Context, sel storage.Selection) (inspector.DeleteResult, error) {
	out, err := o.db.DeleteMatching(sel)
	return inspector.DeleteResult{Deleted: len(out.IDs), IDs: out.IDs, KeptDamaged: out.Kept}, err
}

func newDeliveriesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "deliveries", Short: "List, show, export and delete recorded deliveries",
		Long: `The recorded deliveries, through the devhook listen recording in --data when one runs,
else from the data directory. An ID is a whole delivery id or its start, when only one id
starts so (as for a git commit), with or without its dashes: 0190a1b2-c3d4-7 or 0190a1b2c3d47.`,
		Example: `  devhook deliveries list
  devhook deliveries show ID
  devhook deliveries delete ID`}
	cmd.AddCommand(newDeliveriesListCmd(), newDeliveriesShowCmd())
	cmd.AddCommand(newDeliveriesExportCmd())
	cmd.AddCommand(newDeliveriesDeleteCmd())
	return groupCmd(cmd)
}

func newDeliveriesListCmd() *cobra.Command {
	h := historyOptions{readOnly: true}
	var f devhook.Filter
	var status string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List recorded deliveries, newest first",
		Example: `  devhook deliveries list
  devhook deliveries list --status none --limit 50
  devhook deliveries list --verdict invalid_signature --json`,
		Long: `List shows recorded deliveries, newest first. STATUS is the receiver's status of the
last attempt: a number when it answered, none when it gave no status (no answer, such as a
refused connection or a timeout, or not forwarded). --status 502 finds deliveries the
receiver itself answered 502; one it did not answer (the sender got 502 from devhook) is
--status none, as the terminal line "→ none (sender got 502)" says.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := parseStatusFlag(status)
			if err != nil {
				return err
			}
			f.Status = n
			if f.Limit < 1 || f.Limit > storage.MaxListLimit {
				return fmt.Errorf("--limit %d: give a number from 1 to %d (older deliveries page by page: --before the last ID listed)", f.Limit, storage.MaxListLimit)
			}
			hist, done, live, err := h.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			page, err := listDeliveries(cmd.Context(), hist, f, live)
			if err == nil && len(page.Items) == 0 && f.RunID != "" && len(f.RunID) <= devhook.ShortRunIDLen {
				// The short run id listen shows: the run it names.
				var full string
				if full, err = scenario.ResolveRunID(cmd.Context(), hist.List, f.RunID); err == nil && full != f.RunID {
					f.RunID = full
					page, err = listDeliveries(cmd.Context(), hist, f, live)
				}
			}
			if err != nil {
				return err
			}
			if d := page.Damage; d != nil && d.Any() {
				fmt.Fprintf(cmd.ErrOrStderr(), "devhook deliveries list: skipped %s; %s\n", d.Summary(), d.Advice())
			}
			noteUnsearched(cmd.ErrOrStderr(), page.Items)
			items := page.Items
			if len(items) == 0 && !asJSON {
				if used := filterFlags(cmd); used != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "no delivery matches %s\n", used)
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), "no deliveries recorded yet")
				}
				return nil
			}
			return printSummaries(cmd.OutOrStdout(), items, asJSON)
		},
	}
	h.flags(cmd)
	fl := cmd.Flags()
	fl.IntVar(&f.Limit, "limit", 20, fmt.Sprintf("how many, at most %d (older ones with --before)", storage.MaxListLimit))
	fl.StringVar(&f.Before, "before", "", "only deliveries older than this id")
	fl.StringVar(&f.Verdict, "verdict", "", "only this signature verdict (ok, invalid_signature, ...)")
	fl.StringVar(&status, "status", "", "only this receiver status: a number, or none (it gave no status: no answer, or not forwarded)")
	fl.StringVar(&f.RunID, "run-id", "", "only this run (its id, or the short id listen shows)")
	fl.StringVar(&f.StatusV2, "status-v2", "", "only this status_v2")
	fl.StringVar(&f.Text, "q", "", "only bodies containing this text (one whose body cannot be read is listed, saying so)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// listDeliveries is the newest f.Limit deliveries f selects. A running
// listen's inspector gives inspector.MaxListLimit a page: more are asked
// for page after page; the store gives up to storage.MaxListLimit at once.
func listDeliveries(ctx context.Context, hist history, f devhook.Filter, live bool) (inspector.ListPage, error) {
	if !live {
		return hist.ListPage(ctx, f)
	}
	want := f.Limit
	var all inspector.ListPage
	for {
		f.Limit = min(want-len(all.Items), inspector.MaxListLimit)
		page, err := hist.ListPage(ctx, f)
		if err != nil {
			return all, err
		}
		all.Items = append(all.Items, page.Items...)
		if page.Damage != nil {
			all.Damage, all.DamageNote = page.Damage, page.DamageNote
		}
		if page.Next == "" || len(all.Items) >= want {
			return all, nil
		}
		f.Before = page.Next
	}
}

// noteUnsearched says on w which of items a search (--q) listed without
// searching their bodies, which cannot be read (Summary.BodyError), and
// why for the first: they may hold the text.
func noteUnsearched(w io.Writer, items []devhook.Summary) {
	var ids []string
	var why string
	for _, s := range items {
		if s.BodyError != "" {
			if why == "" {
				why = s.BodyError
			}
			ids = append(ids, s.ID)
		}
	}
	switch n := len(ids); {
	case n == 0:
		return
	case n == 1:
		fmt.Fprintf(w, "devhook deliveries list: the body of delivery %s cannot be read, so --q could not search it: it is listed, as it may hold the text (devhook deliveries show %s); %s\n", ids[0], ids[0], why)
	default:
		shown := strings.Join(ids[:min(n, devhook.DamageIDs)], ", ")
		if n > devhook.DamageIDs {
			shown += ", …"
		}
		fmt.Fprintf(w, "devhook deliveries list: the bodies of %d deliveries (%s) cannot be read, so --q could not search them: they are listed, as they may hold the text (devhook deliveries show ID says why for each; --json: body_error); delivery %s: %s\n", n, shown, ids[0], why)
	}
}

func printSummaries(w io.Writer, items []devhook.Summary, asJSON bool) error {
	if asJSON {
		return printJSON(w, items)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRECEIVED\tMETHOD\tPATH\tRUN\tSTATUS_V2\tVERDICT\tSTATUS\tDURATION")
	for _, s := range items {
		status := statusWord(s.Status)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.ReceivedAt.Local().Format("01-02 15:04:05"),
			s.Method, clip(s.Path, 30), dash(s.Event.RunID), dash(s.Event.StatusV2), s.Verdict, status,
			formatDuration(time.Duration(s.Duration)))
	}
	return tw.Flush()
}

// parseStatusFlag reads --status: "" (any), none, or an HTTP status. It
// returns the devhook.Filter status: 0 any, -1 none.
func parseStatusFlag(v string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "any":
		return 0, nil
	case "none", "-1":
		return -1, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 100 || n > 999 {
		return 0, fmt.Errorf("--status %q is not an HTTP status code or none", v)
	}
	return n, nil
}

// filterFlags names the filters given, as typed: "--status 502 --run-id r".
func filterFlags(cmd *cobra.Command) string {
	var parts []string
	for _, name := range []string{"verdict", "status", "run-id", "status-v2", "q", "before"} {
		if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			parts = append(parts, "--"+name+" "+fl.Value.String())
		}
	}
	return strings.Join(parts, " ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newDeliveriesShowCmd() *cobra.Command {
	h := historyOptions{readOnly: true}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one delivery: request, signature verdict and every attempt",
		Long: `Show prints one delivery: its request, signature verdict and every attempt with its answer.
A delivery some parts of which cannot be read from the store (its body file damaged, cut
short or missing; a damaged attempt) is shown with the rest, each such part saying why and
what to do (--json: "body_error", an attempt's "read_error"), and show exits with status 1.`,
		Example: `  devhook deliveries show ID
  devhook deliveries show ID --json --data ./recordings`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hist, done, _, err := h.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			// A delivery some parts of which cannot be read is shown
			// with the rest, and the command fails saying what.
			d, err := hist.Delivery(cmd.Context(), args[0])
			if err != nil && !isPartial(d, err) {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				if perr := printJSON(w, d); perr != nil {
					return perr
				}
			} else {
				printDelivery(w, d)
			}
			if err != nil {
				return fmt.Errorf("%w; the rest of it is shown", err)
			}
			return nil
		},
	}
	h.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (bodies in base64)")
	return cmd
}

// isPartial reports whether d, read with err, is a delivery some parts of
// which could not be read (storage.DB.Delivery): shown, never sent.
func isPartial(d *devhook.Delivery, err error) bool {
	var pe *devhook.PartialError
	return d != nil && errors.As(err, &pe)
}

func printDelivery(w io.Writer, d *devhook.Delivery) {
	fmt.Fprintf(w, "delivery  %s\nreceived  %s\nrequest   %s %s", d.ID, d.ReceivedAt.Local().Format(time.RFC3339Nano), d.Method, d.Path)
	if d.RawQuery != "" {
		fmt.Fprintf(w, "?%s", d.RawQuery)
	}
	fmt.Fprintln(w)
	if d.Queued {
		fmt.Fprintln(w, "          (waited in the relay's queue)")
	}
	if note := d.Event.StatusNote(); d.Event.RunID != "" || note != "" {
		fmt.Fprintf(w, "run       %s\n", dash(d.Event.RunID))
		if note != "" {
			fmt.Fprintf(w, "          %s\n", note)
		}
	}
	fmt.Fprintf(w, "verdict   %s: %s\n", d.Verdict.Result, d.Verdict.Reason)
	if d.Verdict.Result != devhook.VerdictUnchecked {
		fmt.Fprintf(w, "          the reference receiver answers %d %q\n", d.Verdict.Status, d.Verdict.Text)
	}
	fmt.Fprintln(w, "\nheaders")
	printHeader(w, d.Header)
	if d.BodyError != "" {
		fmt.Fprintf(w, "\nbody (cannot be read)\n  %s\n", d.BodyError)
	} else {
		fmt.Fprintf(w, "\nbody (%d bytes)\n", len(d.Body))
		printBody(w, d.Body)
	}
	for _, a := range d.Attempts {
		if a.ReadError != "" {
			fmt.Fprintf(w, "\nattempt %d (cannot be read)\n  %s\n", a.Seq, a.ReadError)
			continue
		}
		fmt.Fprintf(w, "\nattempt %d (%s) → %s at %s, %s, status %s\n", a.Seq, a.Kind, a.Target, a.StartedAt.Local().Format("15:04:05.000"),
			formatDuration(time.Duration(a.Duration)), statusWord(a.Status))
		printSent(w, &a)
		if a.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", a.Error)
		}
		if a.Status != 0 {
			fmt.Fprintf(w, "  status %d\n", a.Status)
			printHeader(w, a.Header)
			printBody(w, a.Body)
		}
		if h := hint.Text(d, &a); h != "" {
			fmt.Fprintf(w, "  hint: %s\n", h)
		}
	}
}

// printSent prints how attempt a was made and, when it is not the
// delivery, the request it sent.
func printSent(w io.Writer, a *devhook.Attempt) {
	if m := madeText(a); m != "" {
		fmt.Fprintf(w, "  made: %s\n", m)
	} else if a.Resigned() { // recorded before devhook kept how
		fmt.Fprintln(w, "  re-signed with a fresh t")
	}
	if r := a.Request; r != nil {
		fmt.Fprintf(w, "  request as sent: %s %s", r.Method, r.Path)
		if r.RawQuery != "" {
			fmt.Fprintf(w, "?%s", r.RawQuery)
		}
		fmt.Fprintf(w, " (%d bytes of body)\n", len(r.Body))
		// Indented more than the answer that follows.
		var b strings.Builder
		printHeader(&b, r.Header)
		printBody(&b, r.Body)
		io.WriteString(w, "  "+strings.ReplaceAll(strings.TrimSuffix(b.String(), "\n"), "\n", "\n  ")+"\n")
	}
}

// madeText says how attempt a was made from its delivery, or "" when the
// record does not say (written by an older devhook).
func madeText(a *devhook.Attempt) string {
	switch {
	case a.Made == devhook.MadeAsArrived:
		return "as it arrived, with its original signature"
	case a.Made == devhook.MadeResigned:
		return "as it arrived, re-signed with a fresh t"
	case a.Made == devhook.MadeEdited && a.Resigned():
		return "edited, re-signed with a fresh t"
	case a.Made == devhook.MadeEdited:
		return "edited, not re-signed (sent with the service-signature header as edited, or as it arrived)"
	}
	return a.Made
}

func printHeader(w io.Writer, h http.Header) {
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			fmt.Fprintf(w, "  %s: %s\n", k, v)
		}
	}
}

func printBody(w io.Writer, b []byte) {
	if len(b) == 0 {
		return
	}
	if !isText(b) {
		fmt.Fprintf(w, "  (binary, %d bytes; use --json for the bytes)\n", len(b))
		return
	}
	s := string(b)
	if len(s) > 4096 {
		s = s[:4096] + "\n  … (cut; use --json for all of it)"
	}
	fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(s, "\n", "\n  "))
}

func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	return true
}
