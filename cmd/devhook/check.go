package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/junit"
	"github.com/devhook/devhook/receiver"
	"github.com/spf13/cobra"
)

type checkOptions struct {
	url        string
	secret     string
	skew       time.Duration
	timeout    time.Duration
	json       bool
	self       bool
	anyRefusal bool
	junit      string
	stdout     io.Writer
}

func newCheckCmd() *cobra.Command {
	o := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check URL --secret S",
		Short: "Prove a webhook handler verifies service-signature as the interface says, and say why when it does not",
		Long: `Check sends a fixed suite of deliveries to a running handler: real signed run.status
deliveries (now, 4m59s old, just inside the skew ahead, other layouts, the layouts
Python's json.dumps, JavaScript's JSON.stringify and Go's json.Marshal of a map write,
a body that is not UTF-8, 1 MiB) and deliberate corruptions of them (expired, too far
ahead, t in seconds, no header, empty header, malformed headers, wrong signature,
another body's signature, the body re-serialized under the original signature, the
secret decoded as the key, the same delivery twice). It prints what each case sent,
what the reference receiver answers, what the handler answered, and a diagnosis from
the pattern of answers: named rules (docs/CHECK.md), the root cause first, and nothing
that a rule before it explains. --json carries each finding's id and kind.

Exit status: 0 when every required case is answered as the reference answers it
(the same status, any 2xx for an acceptance, and a refusal text that does not name
another check); 1 otherwise; 2 when the handler cannot be reached; 130 when
interrupted (Ctrl-C, SIGINT), 143 on SIGTERM, 129 on SIGHUP (its terminal closed), 141
when its output was closed, with the cases answered so far reported.

--junit FILE also writes the report as JUnit XML for a CI: a test case per case, a
failure for each required case answered otherwise than the reference, the diagnosis
as the suite's output.

--self runs the suite against devhook's own reference receiver (devhook receive),
in this process: every case must match.`,
		Example: `  devhook check http://localhost:8080/webhooks --secret whsec_...
  devhook check http://localhost:8080/webhooks --secret whsec_... --skew 5s --json
  devhook check --self
  devhook check http://localhost:8080/webhooks --secret whsec_... --junit check.xml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.stdout = cmd.OutOrStdout()
			if len(args) == 1 {
				o.url = args[0]
			}
			if o.secret == "" {
				o.secret = os.Getenv("DEVHOOK_SECRET")
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.secret, "secret", "", "the secret the handler verifies with (or DEVHOOK_SECRET)")
	f.DurationVar(&o.skew, "skew", 0, "how far ahead t may be (default 60s; the stricter reference receiver uses 5s)")
	f.DurationVar(&o.timeout, "timeout", check.DefaultTimeout, "how long each case waits for the handler's answer")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	f.BoolVar(&o.self, "self", false, "check devhook's own reference receiver, in this process")
	f.BoolVar(&o.anyRefusal, "any-refusal", false, "count any 4xx as a refusal where the reference answers 401")
	f.StringVar(&o.junit, "junit", "", "also write the report as JUnit XML to this file")
	return cmd
}

func (o *checkOptions) run(ctx context.Context) error {
	switch {
	case o.self && o.url != "":
		return errors.New("--self checks the built-in reference receiver: give a URL or --self, not both")
	case !o.self && o.url == "":
		return errors.New("give the handler's URL (devhook check http://localhost:8080/webhooks --secret S), or --self")
	case !o.self && o.secret == "":
		return errors.New("--secret is required: the suite signs with the handler's secret (or set DEVHOOK_SECRET)")
	}
	if o.self {
		if o.secret == "" {
			o.secret = "whsec_devhook_check_self"
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("start the reference receiver: %w", err)
		}
		stop := serveAside(newHTTPServer(receiver.New(receiver.Config{Secret: o.secret, Skew: o.skew})), ln)
		defer stop()
		o.url = "http://" + ln.Addr().String() + "/"
	}
	rep, err := check.Run(ctx, check.Config{URL: o.url, Secret: o.secret, Skew: o.skew, Timeout: o.timeout, AnyRefusal: o.anyRefusal})
	var unreachable *check.UnreachableError
	switch {
	case errors.As(err, &unreachable):
		if o.junit != "" {
			if jerr := junit.Error("devhook check "+o.url, "reach the handler", err).WriteFile(o.junit); jerr != nil {
				err = fmt.Errorf("%w; and writing --junit: %w", err, jerr)
			}
		}
		return &exitError{code: 2, err: err}
	case err != nil && rep == nil:
		return err
	}
	if o.junit != "" {
		if err := rep.JUnit().WriteFile(o.junit); err != nil {
			return err
		}
	}
	if o.json {
		if err := printJSON(o.stdout, rep); err != nil {
			return err
		}
	} else if err := rep.WriteText(o.stdout); err != nil {
		return err
	}
	if in := rep.Interrupted; in != nil {
		where := "the report above has them"
		if o.junit != "" {
			where = "the report above and " + o.junit + " have them"
		}
		return fmt.Errorf("%w at case %s: %d case(s) answered, %d of them differently from the reference receiver; %s",
			context.Cause(ctx), in.Unsent[0], len(rep.Results), rep.Failed, where)
	}
	if !rep.Conformed {
		return &exitError{code: 1, err: fmt.Errorf("the handler at %s answered %d required case(s) differently from the reference receiver", o.url, rep.Failed)}
	}
	return nil
}

// exitError ends devhook with its exit status; main prints err.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }
