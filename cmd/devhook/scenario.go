package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/internal/atomicfile"
	"github.com/devhook/devhook/junit"
	"github.com/devhook/devhook/scenario"
)

func newScenarioCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scenario",
		Short: "Save recorded deliveries as a scenario file, and play it against a handler as a test",
		Long: `A scenario is recorded deliveries in a file (documented, versioned JSON: docs/SCENARIOS.md):
save one from what devhook listen recorded, redacting what should not be shared, keep it
beside the handler's code, and play it against the handler in CI. devhook trigger
--scenario FILE has devhook emulate send it to every webhook.`,
		Example: `  devhook scenario save run.json --run RUN_ID --redact '$.data.run_id'
  devhook scenario play run.json --to http://localhost:8080/webhooks --secret whsec_... --junit report.xml
  devhook scenario show run.json`,
	}
	cmd.AddCommand(newScenarioSaveCmd(), newScenarioPlayCmd(), newScenarioShowCmd())
	return groupCmd(cmd)
}

type scenarioSaveOptions struct {
	history historyOptions
	sel     scenario.Selection
	redact  []string
}

func newScenarioSaveCmd() *cobra.Command {
	o := &scenarioSaveOptions{history: historyOptions{readOnly: true}}
	cmd := &cobra.Command{
		Use:   "save FILE (--run RUN_ID | --id ID[,ID...] | --last N)",
		Short: "Write recorded deliveries to a scenario file",
		Long: `Save writes recorded deliveries, in the order received, to FILE (- for standard output):
method, path and query, every header value but the signature, the body byte for byte,
each one's time after the first, and the receiver's recorded answer. The same deliveries
give the same bytes. It reads through the inspector of the devhook listen recording in
--data when one runs (found by itself), else the data directory.

--redact JSONPATH replaces what the path names in each body ($.data.run_id, $..email,
$.items[*].id) with a pseudonym, the same wherever the same value is in the file; a path
that names nothing is a warning. docs/SCENARIOS.md says what is replaced and how.`,
		Example: `  devhook scenario save run.json --run run-8f2c --redact '$.data.run_id' --redact '$.data.application_id'
  devhook scenario save last.json --last 5 --data ./recordings
  devhook scenario save two.json --id 0190a,0190b`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	o.history.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.sel.RunID, "run", "", "the deliveries of this run (its id, or the short id listen shows)")
	f.StringSliceVar(&o.sel.IDs, "id", nil, "these deliveries (comma-separated or repeated)")
	f.IntVar(&o.sel.Last, "last", 0, "the last N deliveries received")
	f.StringArrayVar(&o.redact, "redact", nil, "replace what this JSON path names in the bodies with a pseudonym (repeatable)")
	cmd.MarkFlagsMutuallyExclusive("run", "id", "last")
	cmd.MarkFlagsOneRequired("run", "id", "last")
	return cmd
}

func (o *scenarioSaveOptions) run(cmd *cobra.Command, file string) error {
	ctx := cmd.Context()
	hist, done, _, err := o.history.open(cmd)
	if err != nil {
		return err
	}
	defer done()
	if o.sel.Last < 0 {
		return fmt.Errorf("--last %d: give a number of deliveries, 1 or more", o.sel.Last)
	}
	if err := scenario.CheckRedact(o.redact); err != nil {
		return fmt.Errorf("--redact: %w", err)
	}
	ids, err := selectSayingSkips(cmd, hist, o.sel, "scenario save")
	if errors.Is(err, scenario.ErrNoDeliveries) && o.sel.RunID != "" {
		return fmt.Errorf("%w (devhook deliveries list --run-id %s)", err, o.sel.RunID)
	}
	if err != nil {
		return err
	}
	load := func(id string) (*devhook.Delivery, error) { return hist.Delivery(ctx, id) }
	b, warnings, err := scenario.Export(ids, load, scenario.Options{Redact: o.redact})
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "devhook: warning: --redact", w)
	}
	s, err := scenario.Parse(file, b)
	if err != nil {
		return fmt.Errorf("the scenario does not read back: %w", err)
	}
	note := s.SaveNote()
	if file == "-" {
		if note != "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "devhook:", note)
		}
		_, err := cmd.OutOrStdout().Write(b)
		return err
	}
	if err := atomicfile.Write(file, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "saved %s to %s (play them: devhook scenario play %s --to URL)\n", plural(len(ids), "delivery"), file, file)
	if note != "" {
		fmt.Fprintln(cmd.OutOrStdout(), note)
	}
	return nil
}

type scenarioPlayOptions struct {
	to, secret, expect, junit string
	speed                     float64
	timeout                   time.Duration
	json, resign              bool
}

func newScenarioPlayCmd() *cobra.Command {
	o := &scenarioPlayOptions{}
	cmd := &cobra.Command{
		Use:   "play FILE --to URL",
		Short: "Send a scenario's deliveries to a handler and compare each answer with the expectation",
		Long: `Play sends each delivery of FILE to the handler at URL (the delivery's path and query
are appended to it), in order, signed afresh (service-signature, t in Unix milliseconds)
when the secret is given, and waits the recorded spacing divided by --speed between them
(--speed 0: no waiting). A delivery whose signature failed when it was recorded (another
secret, none, a malformed header, an expired t) is sent as it failed, so that the handler's
recorded refusal is expected again; --resign signs those afresh too. Each answer is
compared with --expect: recorded (the same status
class as the answer recorded; 2xx where none was), 2xx (or another class), or one status.
A delivery the handler refuses (401, 403) although devhook's own verifier accepts it
carries the hint devhook listen gives. A line per delivery is printed as soon as it is
answered (with --json, on standard error), the summary at the end.

Exit status: 0 when every delivery is answered as expected; 1 otherwise; 2 when the
handler cannot be reached or FILE cannot be read (then nothing is sent); 130 when
interrupted (Ctrl-C, SIGINT), 143 on SIGTERM, 129 on SIGHUP (its terminal closed), 141
when its output was closed: the report and --junit then hold the
deliveries answered so far, the one under way as an error, the rest as skipped.`,
		Example: `  devhook scenario play run.json --to http://localhost:8080/webhooks --secret whsec_...
  devhook scenario play run.json --to localhost:8080 --speed 0 --expect 2xx --junit scenario.xml
  devhook scenario play run.json --to http://localhost:8080 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.secret == "" {
				o.secret = os.Getenv("DEVHOOK_SECRET")
			}
			return o.run(cmd.Context(), args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "the handler: a URL, or host:port")
	f.StringVar(&o.secret, "secret", "", "sign each delivery with this secret (or DEVHOOK_SECRET); without it they are sent unsigned")
	f.Float64Var(&o.speed, "speed", 1, "divide the recorded spacing by this; 0 sends without waiting")
	f.StringVar(&o.expect, "expect", "recorded", "what each answer must be: recorded, 2xx (or another class), or a status")
	f.DurationVar(&o.timeout, "timeout", scenario.DefaultTimeout, "how long each delivery waits for the answer")
	f.BoolVar(&o.resign, "resign", false, "sign every delivery afresh, also those whose signature failed when recorded")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	f.StringVar(&o.junit, "junit", "", "also write the report as JUnit XML to this file")
	cmd.MarkFlagRequired("to")
	return cmd
}

func (o *scenarioPlayOptions) run(ctx context.Context, file string, stdout, stderr io.Writer) error {
	expect, err := scenario.ParseExpect(o.expect)
	if err != nil {
		return fmt.Errorf("--expect %w", err)
	}
	if o.speed < 0 {
		return fmt.Errorf("--speed %g: give a positive number, or 0 for no waiting", o.speed)
	}
	target, err := agent.ParseTarget(o.to)
	if err != nil {
		return fmt.Errorf("--to %q is not a handler's address; use host:port or an http(s) URL", o.to)
	}
	suite := "devhook scenario play " + file
	s, err := scenario.ReadFile(file)
	if err != nil {
		return o.stopped(suite, "read the scenario", err)
	}
	if o.secret == "" {
		fmt.Fprintln(stderr, "devhook: no --secret (or DEVHOOK_SECRET): the deliveries are sent without service-signature")
	}
	cfg := scenario.Config{URL: target.String(), Secret: o.secret, Resign: o.resign, Speed: o.speed, NoWait: o.speed == 0,
		Expect: expect, Timeout: o.timeout, Name: file, Progress: stdout}
	if o.json {
		cfg.Progress = stderr // standard output is the JSON report
	}
	rep, err := scenario.Play(ctx, s, cfg)
	var unreachable *check.UnreachableError
	switch {
	case errors.As(err, &unreachable):
		return o.stopped(suite, "reach the handler", err)
	case err != nil && rep == nil:
		return err
	}
	if o.json {
		err = printJSON(stdout, rep)
	} else {
		err = rep.WriteSummary(stdout)
	}
	if err != nil {
		return err
	}
	if o.junit != "" {
		if err := rep.JUnit(file).WriteFile(o.junit); err != nil {
			return err
		}
	}
	if rep.Interrupted != nil {
		return o.interrupted(ctx, rep)
	}
	if !rep.Pass {
		return &exitError{code: 1, err: fmt.Errorf("the handler at %s answered %d of %d deliveries otherwise than expected", target, rep.Failed, len(rep.Results))}
	}
	return nil
}

// interrupted is play's error when a signal stopped it: what was played,
// and where the report is. The exit status is the signal's (main).
func (o *scenarioPlayOptions) interrupted(ctx context.Context, rep *scenario.Report) error {
	in := rep.Interrupted
	where := "the report above has them"
	if o.junit != "" {
		where = "the report above and " + o.junit + " have them"
	}
	return fmt.Errorf("%w at delivery %d of %d: %d played, %d answered otherwise than expected; %s",
		context.Cause(ctx), in.Unplayed[0].N, len(rep.Results)+len(in.Unplayed), len(rep.Results), rep.Failed, where)
}

// stopped ends play with exit status 2: nothing could be played. The JUnit
// file, when asked for, says why.
func (o *scenarioPlayOptions) stopped(suite, what string, err error) error {
	if o.junit != "" {
		if jerr := junit.Error(suite, what, err).WriteFile(o.junit); jerr != nil {
			err = fmt.Errorf("%w; and writing --junit: %w", err, jerr)
		}
	}
	return &exitError{code: 2, err: err}
}

func newScenarioShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "show FILE",
		Short:   "List a scenario's deliveries: run, status_v2, path, size and time after the first",
		Long:    "Show checks FILE as play does and lists its deliveries. Exit status 2 when FILE cannot be read.",
		Example: `  devhook scenario show run.json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := scenario.ReadFile(args[0])
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			return s.WriteList(cmd.OutOrStdout(), strings.TrimSpace(args[0]))
		},
	}
}
