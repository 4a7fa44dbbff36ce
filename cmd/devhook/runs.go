package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
		Short: "Start runs of an application and read them",
		Long:  "Each status change of a run (queued, running, then succeeded, failed or canceled) is a run.status delivery.\n\n" + cloudHelp,
		Example: `  echo '{"hello":"world"}' | devhook runs start my-app --input - --wait
  devhook runs get my-app RUN_ID
  devhook runs logs my-app RUN_ID`,
	}
	o.register(cmd.PersistentFlags(), true)

	s := &runsStartOptions{cloudCmd: o}
	start := &cobra.Command{
		Use:   "start APP --input FILE|-",
		Short: "Start a run and print its id; --wait waits for its end and prints the result",
		Long: `Start starts a run of APP and prints its id. With --wait it prints the id on standard
error at once and waits for the run to end, then prints the result; interrupted (Ctrl-C,
SIGTERM) it stops waiting, not the run, and says how to reach it; the exit status is then
130 (SIGINT) or 143 (SIGTERM).`,
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
	f.DurationVar(&s.poll, "poll", 500*time.Millisecond, "with --wait: how often to read the run")
	f.DurationVar(&s.waitTimeout, "wait-timeout", 30*time.Minute, "with --wait: how long to wait at most")
	start.MarkFlagRequired("input")
	start.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		s.stdin = start.InOrStdin()
		return s.run(ctx, c, args[0])
	})

	get := &cobra.Command{Use: "get APP RUN", Short: "Show a run: status and result", Args: cobra.ExactArgs(2),
		Example: `  devhook runs get my-app RUN_ID --json`}
	get.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		r, err := c.GetRun(ctx, args[0], args[1])
		if err != nil {
			return fmt.Errorf("get run %s of %s: %w", args[1], args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, r.Raw)
		}
		return printRun(o.stdout, r)
	})
	logs := &cobra.Command{Use: "logs APP RUN", Short: "Print a run's log: what the application wrote to standard error", Args: cobra.ExactArgs(2),
		Example: `  devhook runs logs my-app RUN_ID`}
	logs.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		text, err := c.RunLogs(ctx, args[0], args[1])
		if err != nil {
			return fmt.Errorf("get the logs of run %s of %s: %w", args[1], args[0], err)
		}
		if o.json {
			return printJSON(o.stdout, map[string]string{"log": text})
		}
		_, err = io.WriteString(o.stdout, text)
		return err
	})
	cancel := &cobra.Command{Use: "cancel APP RUN", Short: "Cancel a queued or running run", Args: cobra.ExactArgs(2),
		Example: `  devhook runs cancel my-app RUN_ID`}
	cancel.RunE = o.bind(func(ctx context.Context, c *cloud.Client, args []string) error {
		r, err := c.CancelRun(ctx, args[0], args[1])
		if err != nil {
			return fmt.Errorf("cancel run %s of %s: %w", args[1], args[0], err)
		}
		if o.json {
			return printRaw(o.stdout, r.Raw)
		}
		return printRun(o.stdout, r)
	})
	cmd.AddCommand(start, get, logs, cancel)
	return groupCmd(cmd)
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
	wctx, cancel := context.WithTimeout(ctx, s.waitTimeout)
	defer cancel()
	done, err := c.WaitRun(wctx, app, r.ID, s.poll, func(r cloud.Run) {
		fmt.Fprintf(s.stderr, "%s  %s\n", time.Now().Format("15:04:05.000"), r.Status())
	})
	switch {
	case ctx.Err() != nil:
		// Stopping the wait does not stop the run.
		return fmt.Errorf("%w: stopped waiting for run %s, which goes on: devhook runs get %s %s (devhook runs cancel %s %s cancels it)",
			context.Cause(ctx), r.ID, shellQuote(app), r.ID, shellQuote(app), r.ID)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w; the run goes on: devhook runs get %s %s", err, shellQuote(app), r.ID)
	case err != nil:
		return err
	}
	if s.json {
		if err := printRaw(s.stdout, done.Raw); err != nil {
			return err
		}
	} else if err := printRun(s.stdout, done); err != nil {
		return err
	}
	if !done.Succeeded() {
		return fmt.Errorf("run %s ended %s%s", done.ID, done.Status(), prefixed(": ", done.ErrorText()))
	}
	return nil
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
