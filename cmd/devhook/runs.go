package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/cloud"
)

func newAppsCmd() *cobra.Command {
	o := &cloudCmd{}
	cmd := &cobra.Command{
		Use:   "apps",
		Short: "Create, read and push the service's applications",
		Example: `  devhook apps create my-app --name "My app" --endpoint http://127.0.0.1:4010 --api-key devkey
  devhook apps get my-app
  devhook apps push ./my-app --app my-app`,
		Long: cloudHelp,
	}
	o.register(cmd.PersistentFlags(), true)
	var in cloud.ApplicationInput
	create := &cobra.Command{Use: "create ID --name NAME", Short: "Create an application (and its instances)", Args: cobra.ExactArgs(1),
		Example: `  devhook apps create my-app --name "My app"`}
	create.Flags().StringVar(&in.Name, "name", "", "the application's name (default: its id)")
	create.Flags().StringVar(&in.Description, "description", "", "free text")
	create.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		in.ID = args[0]
		if in.Name == "" {
			in.Name = in.ID
		}
		a, err := c.CreateApplication(ctx, in)
		if err != nil {
			return fmt.Errorf("create application %s: %w", in.ID, err)
		}
		if o.json {
			return printRaw(o.stdout, a.Raw)
		}
		fmt.Fprintf(o.stdout, "created application %s; start a run with: devhook runs start %s --input FILE\n", a.ID, shellQuote(a.ID))
		return nil
	})
	get := &cobra.Command{Use: "get ID", Short: "Show an application", Args: cobra.ExactArgs(1),
		Example: `  devhook apps get my-app --json`}
	get.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		a, err := c.GetApplication(ctx, args[0])
		if err != nil {
			return fmt.Errorf("get application %s: %w", args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, a.Raw)
		}
		return fields(o.stdout, "id", a.ID, "name", a.Name, "description", a.Description, "type", a.Type,
			"default_instance", a.DefaultInstance, "created_at", a.CreatedAt)
	})
	cmd.AddCommand(create, get, newAppsPushCmd(o))
	return groupCmd(cmd)
}

type runsStartOptions struct {
	*cloudCmd
	instance    string
	input       string
	options     []string
	name        string
	wait        bool
	poll        time.Duration
	waitTimeout time.Duration
	stdin       io.Reader
}

func newRunsCmd() *cobra.Command {
	o := &cloudCmd{}
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Start runs of an application, list them, follow them and read them",
		Long: "Each status change of a run (queued, running, then succeeded, failed or canceled) is a run.status delivery.\n\n" +
			"RUN is a run's id, the start of one (unique among the application's runs), or the short id devhook listen shows.\n\n" + cloudHelp,
		Example: `  echo '{"hello":"world"}' | devhook runs start my-app --input - --wait
  devhook runs list my-app --status failed
  devhook runs logs my-app RUN --follow
  devhook runs wait my-app RUN`,
	}
	o.register(cmd.PersistentFlags(), true)
	cmd.AddCommand(newRunsStartCmd(o), newRunsListCmd(o), newRunsGetCmd(o), newRunsLogsCmd(o), newRunsWaitCmd(o), newRunsCancelCmd(o))
	return groupCmd(cmd)
}

func newRunsStartCmd(o *cloudCmd) *cobra.Command {
	s := &runsStartOptions{cloudCmd: o}
	start := &cobra.Command{
		Use:   "start APP --input FILE|-",
		Short: "Start a run and print its id; --wait waits for its end and prints the result",
		Long: `Start starts a run of APP and prints its id. With --wait it prints the id on standard
error at once and waits for the run to end, then prints the result, and its exit status
says how the run ended, as devhook runs wait's does. Interrupted (Ctrl-C, SIGTERM) it stops
waiting, not the run, and says how to reach it.

` + runEndHelp,
		Example: `  echo '{"hello":"world"}' | devhook runs start my-app --input - --wait
  devhook runs start my-app --input input.json --option duration=30s --name nightly`,
		Args: cobra.ExactArgs(1),
	}
	f := start.Flags()
	f.StringVar(&s.instance, "instance", "latest", "the application's instance")
	f.StringVar(&s.input, "input", "", "the run's input: a JSON file, or - for standard input")
	f.StringArrayVar(&s.options, "option", nil, "a run option NAME=VALUE (repeatable)")
	f.StringVar(&s.name, "name", "", "the run's name")
	f.BoolVar(&s.wait, "wait", false, "wait until the run ends, then print the result")
	f.DurationVar(&s.poll, "poll", 500*time.Millisecond, "with --wait: how often to read the run at first (less often, up to every 2s, while it does not change)")
	f.DurationVar(&s.waitTimeout, "wait-timeout", 30*time.Minute, "with --wait: how long to wait at most (0: no limit); past it devhook exits 124 and the run goes on")
	start.MarkFlagRequired("input")
	start.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		s.stdin = start.InOrStdin()
		return s.run(ctx, c, args[0])
	})
	return start
}

func newRunsGetCmd(o *cloudCmd) *cobra.Command {
	get := &cobra.Command{Use: "get APP RUN", Short: "Show a run: status and result", Args: cobra.ExactArgs(2),
		Example: `  devhook runs get my-app RUN_ID --json`}
	get.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		var r cloud.Run
		err := c.WithRunID(ctx, args[0], args[1], func(id string) (err error) {
			r, err = c.GetRun(ctx, args[0], id)
			return err
		})
		if err != nil {
			return fmt.Errorf("get run %s of %s: %w", args[1], args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, r.Raw)
		}
		return printRun(o.stdout, r)
	})
	return get
}

func newRunsCancelCmd(o *cloudCmd) *cobra.Command {
	cancel := &cobra.Command{Use: "cancel APP RUN", Short: "Cancel a queued or running run", Args: cobra.ExactArgs(2),
		Example: `  devhook runs cancel my-app RUN_ID`}
	cancel.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		var r cloud.Run
		err := c.WithRunID(ctx, args[0], args[1], func(id string) (err error) {
			r, err = c.CancelRun(ctx, args[0], id)
			return err
		})
		if err != nil {
			return fmt.Errorf("cancel run %s of %s: %w", args[1], args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, r.Raw)
		}
		return printRun(o.stdout, r)
	})
	return cancel
}

func (s *runsStartOptions) run(ctx context.Context, c *cloud.Client, app string) error {
	in, err := s.readInput()
	if err != nil {
		return err
	}
	opts := map[string]string{}
	for _, kv := range s.options {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--option %q: want NAME=VALUE", kv)
		}
		opts[k] = v
	}
	r, err := c.StartRun(ctx, app, s.instance, cloud.RunInput{Input: in, Options: opts, Name: s.name})
	if err != nil {
		return fmt.Errorf("start a run of %s: %w", app, err)
	}
	if !s.wait {
		if s.json {
			return printRaw(s.stdout, r.Raw)
		}
		fmt.Fprintln(s.stdout, r.ID)
		return nil
	}
	// The id shows at once, so that an interrupt leaves it on screen, and
	// again in the result; the lines while waiting say only the status.
	fmt.Fprintf(s.stderr, "started run %s of %s on instance %s; waiting for it to end\n", r.ID, app, s.instance)
	w := runWaiter{cloudCmd: s.cloudCmd, app: app, timeout: s.waitTimeout,
		watch: cloud.RunWatch{Min: s.poll, Max: max(s.poll, cloud.DefaultWatchMax)}}
	return w.waitAndPrint(ctx, c, r.ID)
}

func (s *runsStartOptions) readInput() (json.RawMessage, error) {
	var b []byte
	var err error
	name := s.input
	if s.input == "-" {
		name = "standard input"
		b, err = io.ReadAll(s.stdin)
	} else {
		b, err = os.ReadFile(s.input)
	}
	if err != nil {
		return nil, fmt.Errorf("read the run's input: %w", err)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("the run's input in %s is not JSON: the service takes any JSON value as input", name)
	}
	return json.RawMessage(strings.TrimSpace(string(b))), nil
}

func printRun(w io.Writer, r cloud.Run) error {
	m := r.Metadata
	fields(w, "run", r.ID, "status", r.Status(), "application", m.ApplicationID, "instance", m.ApplicationInstanceID,
		"runtime", m.Runtime, "created_at", m.CreatedAt, "duration", string(m.Duration), "output_size", string(m.OutputSize),
		"error", strings.ReplaceAll(r.ErrorText(), "\n", "\n"+strings.Repeat(" ", len("application  "))))
	if len(r.Output) > 0 && string(r.Output) != "null" {
		fmt.Fprintln(w, "\noutput:")
		return printRaw(w, r.Output)
	}
	return nil
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// The exit statuses of a command that waits for a run's end: runs wait,
// runs logs --follow and runs start --wait.
const (
	exitRunFailed    = 1
	exitCouldNotWait = 2
	exitRunCanceled  = 3
	exitWaitTimeout  = 124 // as timeout(1)
)

// runEndCodes says the exit statuses, for the commands' help.
const runEndCodes = `0 the run succeeded; 1 it failed (its error
is printed); 3 it was canceled; 2 devhook could not wait (the service or the run could not
be read, or the command line is wrong); 124 the time limit passed first; 130 Ctrl-C
(SIGINT), 143 SIGTERM, 129 SIGHUP (its terminal closed), 141 its output closed. In the last
five the run goes on: devhook only stopped waiting, and says how to take it up again.`

const runEndHelp = "Exit status: " + runEndCodes

func newRunsListCmd(o *cloudCmd) *cobra.Command {
	var f cloud.RunFilter
	cmd := &cobra.Command{
		Use:   "list APP [--status S] [--limit N]",
		Short: "List an application's runs, newest first",
		Long: `List shows an application's runs, newest first: the short id (the one devhook listen
shows, which every runs command takes), status, creation time, duration (once ended) and
instance. --json prints {"items": [...]}, the run records as the service lists them.

` + cloudHelp,
		Example: `  devhook runs list my-app
  devhook runs list my-app --status failed,canceled --limit 50
  devhook runs list my-app --status running --json`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringSliceVar(&f.Status, "status", nil, "only runs with this status: "+strings.Join(cloud.RunStatuses, ", ")+" (repeatable, or comma-separated)")
	cmd.Flags().IntVar(&f.Limit, "limit", cloud.DefaultRunLimit, "how many runs at most")
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		if err := checkRunFilter(&f); err != nil {
			return err
		}
		runs, err := c.ListRuns(ctx, args[0], f)
		if err != nil {
			return fmt.Errorf("list the runs of %s: %w", args[0], err)
		}
		if len(runs) == f.Limit {
			defer fmt.Fprintf(o.stderr, "(the %d newest; --limit shows more)\n", len(runs))
		}
		if o.json {
			return printRunList(o.stdout, runs)
		}
		if len(runs) == 0 {
			if len(f.Status) > 0 {
				fmt.Fprintf(o.stdout, "no run of %s is %s\n", args[0], strings.Join(f.Status, " or "))
			} else {
				fmt.Fprintf(o.stdout, "%s has no runs yet; start one with: devhook runs start %s --input FILE\n", args[0], shellQuote(args[0]))
			}
			return nil
		}
		return printRunTable(o.stdout, runs)
	})
	return cmd
}

// checkRunFilter checks --status and --limit, and spells the statuses as
// the service does.
func checkRunFilter(f *cloud.RunFilter) error {
	if f.Limit < 1 {
		return fmt.Errorf("--limit %d: give 1 or more", f.Limit)
	}
	for i, s := range f.Status {
		s = strings.ToLower(strings.TrimSpace(s))
		if s == "cancelled" {
			s = "canceled"
		}
		if !slices.Contains(cloud.RunStatuses, s) {
			return fmt.Errorf("--status %q: a run's status is one of %s", f.Status[i], strings.Join(cloud.RunStatuses, ", "))
		}
		f.Status[i] = s
	}
	return nil
}

// printRunList prints runs as the service lists them: {"items": [...]}.
func printRunList(w io.Writer, runs []cloud.Run) error {
	items := make([]json.RawMessage, 0, len(runs))
	for _, r := range runs {
		items = append(items, r.Raw)
	}
	b, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		return err
	}
	return printRaw(w, b)
}

func printRunTable(w io.Writer, runs []cloud.Run) error {
	rows := make([][]string, 0, len(runs))
	for _, r := range runs {
		m := r.Metadata
		created := m.CreatedAt
		if t, err := time.Parse(time.RFC3339Nano, created); err == nil {
			created = t.Local().Format("01-02 15:04:05")
		}
		dur := ""
		if ms, err := m.Duration.Int64(); err == nil && r.Final() {
			dur = runDuration(time.Duration(ms) * time.Millisecond)
		}
		rows = append(rows, []string{devhook.ShortRunID(r.ID), r.Status(), created, dur, m.ApplicationInstanceID})
	}
	return table(w, []string{"RUN", "STATUS", "CREATED", "DURATION", "INSTANCE"}, rows)
}

// runDuration is d as a person reads a run's: 820ms, 12.4s, 3m5s, 1h2m0s.
func runDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func newRunsWaitCmd(o *cloudCmd) *cobra.Command {
	w := runWaiter{cloudCmd: o}
	cmd := &cobra.Command{
		Use:   "wait APP RUN [--timeout D]",
		Short: "Wait for a run to end; the exit status says how it ended",
		Long: `Wait waits for a run to end (one started without --wait, or by anyone), printing its
status as it changes on standard error, then the run as devhook runs get does.

` + runEndHelp,
		Example: `  devhook runs wait my-app RUN_ID
  devhook runs wait my-app 1f0c2a9e --timeout 10m && echo done`,
		Args: cobra.ExactArgs(2),
	}
	cmd.Flags().DurationVar(&w.timeout, "timeout", 0, "how long to wait at most (0: until the run ends); past it devhook exits 124")
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		w.app = args[0]
		id, err := w.resolve(ctx, c, args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(o.stderr, "waiting for run %s of %s to end\n", id, w.app)
		return w.waitAndPrint(ctx, c, id)
	})
	return waitCodes(cmd, func() bool { return true })
}

type runsLogsOptions struct {
	runWaiter
	follow bool
}

func newRunsLogsCmd(o *cloudCmd) *cobra.Command {
	l := &runsLogsOptions{runWaiter: runWaiter{cloudCmd: o, following: true}}
	cmd := &cobra.Command{
		Use:   "logs APP RUN [--follow]",
		Short: "Print a run's log: what the application wrote to standard error",
		Long: `Logs prints a run's log: what a pushed application wrote to standard error, so far while it
runs. --follow prints it as it grows until the run ends, reading it again every 250ms while
it grows and less often, up to every 2s, while it does not; it then prints the rest and
exits as devhook runs wait does. With --json each piece is a line {"log": "..."}.

With --follow, the exit status: ` + runEndCodes,
		Example: `  devhook runs logs my-app RUN_ID
  devhook runs logs my-app RUN_ID --follow`,
		Args: cobra.ExactArgs(2),
	}
	cmd.Flags().BoolVarP(&l.follow, "follow", "f", false, "print the log as it grows, until the run ends")
	cmd.Flags().DurationVar(&l.timeout, "timeout", 0, "with --follow: how long to follow at most (0: until the run ends); past it devhook exits 124")
	cmd.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		l.app = args[0]
		if cmd.Flags().Changed("timeout") && !l.follow {
			return errors.New("--timeout goes with --follow")
		}
		if !l.follow {
			return l.print(ctx, c, args[1])
		}
		id, err := l.resolve(ctx, c, args[1])
		if err != nil {
			return err
		}
		return l.followLog(ctx, c, id)
	})
	return waitCodes(cmd, func() bool { return l.follow })
}

// print prints the log as it is.
func (l *runsLogsOptions) print(ctx context.Context, c *cloud.Client, ref string) error {
	var text string
	err := c.WithRunID(ctx, l.app, ref, func(id string) (err error) {
		text, err = c.RunLogs(ctx, l.app, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("get the logs of run %s of %s: %w", ref, l.app, err)
	}
	if l.json {
		return printJSON(l.stdout, map[string]string{"log": text})
	}
	_, err = io.WriteString(l.stdout, text)
	return err
}

// followLog prints the log as it grows until the run ends.
func (l *runsLogsOptions) followLog(ctx context.Context, c *cloud.Client, id string) error {
	enc := json.NewEncoder(l.stdout)
	l.watch.OnLog = func(text string, gap bool) error {
		if gap {
			fmt.Fprintf(l.stderr, "devhook: some of the log of run %s was not seen: more came between two reads than the service keeps; it goes on from what it keeps\n", id)
		}
		if l.json {
			return enc.Encode(map[string]string{"log": text})
		}
		_, err := io.WriteString(l.stdout, text)
		return err
	}
	r, err := l.wait(ctx, c, id)
	if err != nil {
		return err
	}
	return runEnd(r)
}

// runWaiter waits for a run's end: runs wait, runs logs --follow and runs
// start --wait.
type runWaiter struct {
	*cloudCmd
	app     string
	timeout time.Duration // 0: no limit
	watch   cloud.RunWatch
	// following says the waiting is runs logs --follow's, to say so when
	// it stops.
	following bool
}

// resolve returns the id of the run ref names (cloud.WithRunID).
func (w *runWaiter) resolve(ctx context.Context, c *cloud.Client, ref string) (string, error) {
	var id string
	err := c.WithRunID(ctx, w.app, ref, func(i string) error {
		id = i
		_, err := c.RunMetadata(ctx, w.app, i)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read run %s of %s: %w", ref, w.app, err)
	}
	return id, nil
}

// waitAndPrint waits for the run's end, prints it, and returns the error
// whose exit status says how it ended.
func (w *runWaiter) waitAndPrint(ctx context.Context, c *cloud.Client, id string) error {
	w.watch.OnStatus = func(r cloud.Run) {
		fmt.Fprintf(w.stderr, "%s  %s\n", time.Now().Format("15:04:05.000"), r.Status())
	}
	done, err := w.wait(ctx, c, id)
	if err != nil {
		return err
	}
	if w.json {
		err = printRaw(w.stdout, done.Raw)
	} else {
		err = printRun(w.stdout, done)
	}
	if err != nil {
		return err
	}
	return runEnd(done)
}

// wait waits for the run's end. Stopped by a signal or its time limit it
// says the run goes on and how to take it up again.
func (w *runWaiter) wait(ctx context.Context, c *cloud.Client, id string) (cloud.Run, error) {
	wctx := ctx
	if w.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	w.watch.OnTrouble = func(err error, n int) {
		if err != nil {
			fmt.Fprintf(w.stderr, "devhook: reading run %s failed (%v); trying again\n", id, err)
		} else {
			fmt.Fprintf(w.stderr, "devhook: read run %s again after %d failed reads\n", id, n)
		}
	}
	r, err := c.WatchRun(wctx, w.app, id, w.watch)
	app := shellQuote(w.app)
	again, doing := fmt.Sprintf("devhook runs get %s %s", app, id), "waiting for"
	if w.following {
		again, doing = fmt.Sprintf("devhook runs logs %s %s --follow", app, id), "following the log of"
	}
	switch {
	case ctx.Err() != nil:
		return r, fmt.Errorf("%w: stopped %s run %s, which goes on: %s (devhook runs cancel %s %s cancels it)",
			context.Cause(ctx), doing, id, again, app, id)
	case wctx.Err() != nil:
		return r, &exitError{code: exitWaitTimeout, err: fmt.Errorf("run %s did not end within %s%s; it goes on: %s",
			id, w.timeout, prefixed(" and is ", r.Status()), again)}
	case err != nil:
		return r, &exitError{code: exitCouldNotWait, err: err}
	}
	return r, nil
}

// runEnd is nil for a run that succeeded, else the error that says how it
// ended, with its exit status.
func runEnd(r cloud.Run) error {
	switch strings.ToLower(r.Status()) {
	case "succeeded":
		return nil
	case "canceled", "cancelled":
		msg := r.ErrorText()
		if strings.Contains(strings.ToLower(msg), "cancel") {
			msg = "" // the service's "run was canceled" says it again
		}
		return &exitError{code: exitRunCanceled, err: fmt.Errorf("run %s was canceled%s", r.ID, prefixed(": ", msg))}
	}
	return &exitError{code: exitRunFailed, err: fmt.Errorf("run %s ended %s%s", r.ID, r.Status(), prefixed(": ", r.ErrorText()))}
}

// waitCodes gives the errors of a command that waits for a run's end
// (when waits says it does) and carry no exit status of their own (the
// command line, the client's settings, the service unreachable) exit
// status 2, so that 1 says only that the run failed.
func waitCodes(cmd *cobra.Command, waits func() bool) *cobra.Command {
	coded := func(err error) error {
		var c interface{ ExitCode() int }
		if err == nil || !waits() || errors.As(err, &c) {
			return err
		}
		return &exitError{code: exitCouldNotWait, err: err}
	}
	run, args := cmd.RunE, cmd.Args
	cmd.RunE = func(cmd *cobra.Command, a []string) error { return coded(run(cmd, a)) }
	cmd.Args = func(cmd *cobra.Command, a []string) error { return coded(args(cmd, a)) }
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return coded(suggestFlag(c, err)) })
	return cmd
}
