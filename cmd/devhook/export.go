package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/export"
	"github.com/devhook/devhook/internal/atomicfile"
	"github.com/devhook/devhook/scenario"
)

type exportOptions struct {
	history historyOptions
	sel     scenario.Selection
	format  string
	out     string
	to      string
	resign  bool
}

func newDeliveriesExportCmd() *cobra.Command {
	o := &exportOptions{history: historyOptions{readOnly: true}}
	cmd := &cobra.Command{
		Use:   "export [ID...] [--last N | --run RUN] [--format curl|har|scenario]",
		Short: "Write recorded deliveries as curl commands, an HTTP Archive (HAR) or a scenario file",
		Long: `Export writes recorded deliveries, in the order received, for another tool, a bug report
or a test fixture. Name them by id, as the last N received, or as a run's. It only reads:
through the inspector of the devhook listen recording in --data when one runs (found by
itself), else from the data directory.

--format curl (the default) is a shell script of curl commands that send each delivery
as it arrived: method, path and query, every header (repeated ones in order), the body byte
for byte, to the receiver it was forwarded to, or to --to URL with its path and query
appended. A body that is binary or over 64 KiB goes to a file beside --out FILE
(FILE.ID.body), or is written by printf in the script on standard output. The requests
carry the signature they arrived with, which a receiver refuses 5 minutes after its t;
--resign writes a script that signs each request when it runs, with the secret in
DEVHOOK_SECRET (it needs openssl; the script holds no secret).

--format har is an HTTP Archive 1.2: one entry per attempt, the request sent and the
receiver's answer (status, headers, body), its start and duration. --format scenario is
the scenario file devhook scenario save writes for the same deliveries, byte for byte.

A delivery some parts of which cannot be read from the store (its body file damaged, cut
short or missing; a damaged attempt) is partial: the curl script names it in a comment and
does not send one whose body cannot be read, the HAR marks its entries ("_devhook.partial",
no body that cannot be read), a scenario leaves it out. Every other delivery is exported
whole; export then says on standard error which are partial and why, and exits with status 1.
A record the store cannot read at all (damaged, or a newer devhook's) is in no list, so in no
--last or --run export: export says on standard error that it skipped it, as deliveries list does.`,
		Example: `  devhook deliveries export --last 1 --out repro.sh && sh repro.sh
  devhook deliveries export 0190a1b2-... --to http://localhost:9090 --resign --out replay.sh
  devhook deliveries export --run RUN_ID --format har --out run.har
  devhook deliveries export --last 5 --format scenario --out fixture.json`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	o.history.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.format, "format", "curl", "curl (a shell script), har (HTTP Archive 1.2) or scenario (devhook's scenario file)")
	f.StringVarP(&o.out, "out", "o", "", "write to this file instead of standard output (curl: bodies that are binary or large go to files beside it)")
	f.IntVar(&o.sel.Last, "last", 0, "the last N deliveries received")
	f.StringVar(&o.sel.RunID, "run", "", "the deliveries of this run (its id, or the short id listen shows)")
	f.StringVar(&o.to, "to", "", "curl: send to this receiver (URL or host:port), the delivery's path and query appended; har: the URL of deliveries never forwarded")
	f.BoolVar(&o.resign, "resign", false, "curl: sign each request when the script runs, with the secret in DEVHOOK_SECRET (needs openssl)")
	cmd.MarkFlagsMutuallyExclusive("run", "last")
	return cmd
}

func (o *exportOptions) run(cmd *cobra.Command, ids []string) error {
	to, err := o.check(ids)
	if err != nil {
		return err
	}
	o.sel.IDs = ids
	hist, done, _, err := o.history.open(cmd)
	if err != nil {
		return err
	}
	defer done()
	ctx := cmd.Context()
	ids, err = selectSayingSkips(cmd, hist, o.sel, "deliveries export")
	if errors.Is(err, scenario.ErrNoDeliveries) && o.sel.RunID != "" {
		return fmt.Errorf("%w (devhook deliveries list --run-id %s)", err, o.sel.RunID)
	}
	if err != nil {
		return err
	}
	ds, partial, err := loadAll(ctx, hist, ids)
	if err != nil {
		return err
	}
	switch o.format {
	case "scenario":
		err = o.scenario(cmd, ds)
	case "har":
		var b []byte
		if b, err = export.HAR(ds, export.HAROptions{Version: cmd.Root().Version, To: to}); err == nil {
			err = o.write(cmd, b, plural(len(ds), "delivery")+" as an HTTP Archive", "")
		}
	default:
		err = o.curl(cmd, ds, to)
	}
	if err != nil {
		return err
	}
	return o.partialOutcome(cmd, partial, len(ds))
}

// selectSayingSkips is scenario.Select of sel from hist, saying on
// stderr, as deliveries list does, the records the lists skipped (damaged,
// or a newer devhook's): what is written without them is not whole.
func selectSayingSkips(cmd *cobra.Command, hist history, sel scenario.Selection, name string) ([]string, error) {
	var skipped *devhook.Damage
	list := func(ctx context.Context, f devhook.Filter) ([]devhook.Summary, error) {
		page, err := hist.ListPage(ctx, f)
		if page.Damage != nil && page.Damage.Any() {
			skipped = page.Damage
		}
		return page.Items, err
	}
	ids, err := scenario.Select(cmd.Context(), list, sel)
	if skipped != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "devhook %s: skipped %s; %s\n", name, skipped.Summary(), skipped.Advice())
	}
	return ids, err
}

// partialOutcome says, on standard error, which deliveries exported are
// partial (parts of them could not be read from the store) and why, and
// is then the command's error, as tar's "exiting with failure status due
// to previous errors": the export holds every other delivery whole.
func (o *exportOptions) partialOutcome(cmd *cobra.Command, partial []*devhook.PartialError, n int) error {
	if len(partial) == 0 {
		return nil
	}
	errw := cmd.ErrOrStderr()
	for _, pe := range partial {
		fmt.Fprintf(errw, "devhook: %v\n", pe)
	}
	how := map[string]string{
		"curl":     "the script does not send one whose body cannot be read, and says why in a comment",
		"har":      `each of their entries says what cannot be read in "_devhook.partial", and has no body that could not be read`,
		"scenario": "a scenario plays whole deliveries only: they are left out of it",
	}[o.format]
	return fmt.Errorf("%d of the %s exported %s partial: parts of %s cannot be read from the store (said above); %s; exiting with failure status",
		len(partial), plural(n, "delivery"), isAre(len(partial)), themIt(len(partial)), how)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func themIt(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// check checks the flags, before anything is read, and returns --to.
func (o *exportOptions) check(ids []string) (*url.URL, error) {
	n := 0
	for _, set := range []bool{len(ids) > 0, o.sel.Last != 0, o.sel.RunID != ""} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return nil, errors.New("name the deliveries: their ids, --last N or --run RUN_ID (one of the three)")
	case o.sel.Last < 0:
		return nil, fmt.Errorf("--last %d: give a number of deliveries, 1 or more", o.sel.Last)
	case o.format != "curl" && o.format != "har" && o.format != "scenario":
		return nil, fmt.Errorf("--format %q: give curl, har or scenario", o.format)
	case o.resign && o.format != "curl":
		return nil, fmt.Errorf("--resign is for --format curl: a %s file keeps the signature as it arrived", o.format)
	case o.to != "" && o.format == "scenario":
		return nil, errors.New("--to is for --format curl and har: a scenario is played with devhook scenario play --to URL")
	case o.to == "":
		return nil, nil
	}
	u, err := agent.ParseTarget(o.to)
	if err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}
	return u, nil
}

// loadAll reads the deliveries ids name, each once, in the order of ids.
// Those some parts of which cannot be read (partial) are read all the
// same, marked (Delivery.Partial), and their errors returned.
func loadAll(ctx context.Context, hist history, ids []string) (ds []*devhook.Delivery, partial []*devhook.PartialError, err error) {
	var seen []string
	for _, id := range ids {
		if slices.Contains(seen, id) {
			continue
		}
		seen = append(seen, id)
		d, err := hist.Delivery(ctx, id)
		if pe := (*devhook.PartialError)(nil); d != nil && errors.As(err, &pe) {
			partial = append(partial, pe)
		} else if err != nil {
			return nil, nil, fmt.Errorf("read delivery %s: %w", id, err)
		}
		ds = append(ds, d)
	}
	return ds, partial, nil
}

func (o *exportOptions) curl(cmd *cobra.Command, ds []*devhook.Delivery, to *url.URL) error {
	opt := export.CurlOptions{To: to, Resign: o.resign}
	if o.out != "" && o.out != "-" {
		opt.BodyFiles = filepath.Base(o.out)
	}
	s, err := export.CurlScript(ds, opt)
	var noTarget *export.NoTargetError
	if errors.As(err, &noTarget) {
		return fmt.Errorf("%w: give one with --to URL", err)
	}
	if err != nil {
		return err
	}
	if opt.BodyFiles == "" {
		_, err := cmd.OutOrStdout().Write(s.Text)
		return err
	}
	if err := s.WriteFiles(o.out); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "wrote %s as curl commands to %s", plural(len(ds), "delivery"), o.out)
	switch n := len(s.Files); {
	case n == 1:
		fmt.Fprint(w, ", and 1 body file beside it")
	case n > 1:
		fmt.Fprintf(w, ", and %d body files beside it", n)
	}
	fmt.Fprintf(w, "; run it: sh %s\n", shellQuote(o.out))
	return nil
}

// scenario writes the scenario file of the deliveries ds, as devhook
// scenario save does, leaving out the partial ones (parts of them cannot
// be read): played, they would send a body or expect answers they did
// not have.
func (o *exportOptions) scenario(cmd *cobra.Command, ds []*devhook.Delivery) error {
	var ids []string
	byID := map[string]*devhook.Delivery{}
	for _, d := range ds {
		if !d.Partial() {
			ids = append(ids, d.ID)
			byID[d.ID] = d
		}
	}
	if len(ids) == 0 {
		return nil // nothing whole to write: partialOutcome says why
	}
	load := func(id string) (*devhook.Delivery, error) { return byID[id], nil }
	b, _, err := scenario.Export(ids, load, scenario.Options{})
	if err != nil {
		return err
	}
	if s, err := scenario.Parse("the scenario", b); err != nil {
		return fmt.Errorf("the scenario does not read back: %w", err)
	} else if note := s.SaveNote(); note != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "devhook:", note)
	}
	return o.write(cmd, b, plural(len(ids), "delivery")+" as a scenario", "play them: devhook scenario play "+shellQuote(o.out)+" --to URL")
}

// write writes b to --out, or to standard output; what and next are said
// when it goes to a file.
func (o *exportOptions) write(cmd *cobra.Command, b []byte, what, next string) error {
	if o.out == "" || o.out == "-" {
		_, err := cmd.OutOrStdout().Write(b)
		return err
	}
	if err := atomicfile.Write(o.out, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s to %s\n", what, o.out)
	if next != "" {
		fmt.Fprintln(cmd.OutOrStdout(), next)
	}
	return nil
}
