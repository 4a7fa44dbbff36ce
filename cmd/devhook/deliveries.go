package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/agent"
	"github.com/devhook/devhook/check"
	"github.com/devhook/devhook/inspector"
	"github.com/devhook/devhook/storage"
)

// historyOptions find the recorded deliveries: through the inspector of a
// running listen, or in the store when none runs.
type historyOptions struct {
	dataDir string
	inspect string
	secret  string
}

func (h *historyOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&h.dataDir, "data", defaultDataDir(), "data directory of devhook listen")
	cmd.Flags().StringVar(&h.inspect, "inspect", "127.0.0.1:4040", "inspector of a running devhook listen")
}

// history is the part of the store or the inspector the commands use.
type history interface {
	List(ctx context.Context, f devhook.Filter) ([]devhook.Summary, error)
	Delivery(ctx context.Context, id string) (*devhook.Delivery, error)
	Replay(ctx context.Context, id string, opt devhook.ReplayOptions) (devhook.Attempt, error)
}

// open returns the running inspector's client if one answers, else the
// store, opened directly. close releases it.
func (h *historyOptions) open(ctx context.Context) (history, func(), error) {
	c := &inspector.Client{BaseURL: "http://" + h.inspect, HTTP: &http.Client{Timeout: 60 * time.Second}}
	if _, err := c.List(ctx, devhook.Filter{Limit: 1}); err == nil {
		return c, func() {}, nil
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		return nil, nil, fmt.Errorf("%w (is another program on --inspect %s?)", err, h.inspect)
	}
	db, err := storage.Open(filepath.Join(h.dataDir, "deliveries.db"), storage.Config{})
	if err != nil {
		return nil, nil, err
	}
	ag, err := agent.New(agent.Config{Store: db, Secret: h.secret})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return offline{db: db, ag: ag}, func() { db.Close() }, nil
}

type offline struct {
	db *storage.DB
	ag *agent.Agent
}

func (o offline) List(_ context.Context, f devhook.Filter) ([]devhook.Summary, error) {
	return o.db.List(f)
}
func (o offline) Delivery(_ context.Context, id string) (*devhook.Delivery, error) {
	return o.db.Delivery(id)
}
func (o offline) Replay(ctx context.Context, id string, opt devhook.ReplayOptions) (devhook.Attempt, error) {
	return o.ag.Replay(ctx, id, opt)
}

func newDeliveriesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "deliveries", Short: "List and show recorded deliveries"}
	cmd.AddCommand(newDeliveriesListCmd(), newDeliveriesShowCmd())
	return cmd
}

func newDeliveriesListCmd() *cobra.Command {
	var h historyOptions
	var f devhook.Filter
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List recorded deliveries, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hist, done, err := h.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			items, err := hist.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			return printSummaries(cmd.OutOrStdout(), items, asJSON)
		},
	}
	h.flags(cmd)
	fl := cmd.Flags()
	fl.IntVar(&f.Limit, "limit", 20, "how many")
	fl.StringVar(&f.Before, "before", "", "only deliveries older than this id")
	fl.StringVar(&f.Verdict, "verdict", "", "only this signature verdict (ok, invalid_signature, ...)")
	fl.IntVar(&f.Status, "status", 0, "only this receiver status (-1: no answer)")
	fl.StringVar(&f.RunID, "run-id", "", "only this run")
	fl.StringVar(&f.StatusV2, "status-v2", "", "only this status_v2")
	fl.StringVar(&f.Text, "q", "", "only bodies containing this text")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printSummaries(w io.Writer, items []devhook.Summary, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(items)
	}
	if len(items) == 0 {
		fmt.Fprintln(w, "no deliveries recorded")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRECEIVED\tMETHOD\tPATH\tRUN\tSTATUS_V2\tVERDICT\tSTATUS\tDURATION")
	for _, s := range items {
		status := "-"
		if s.Status != 0 {
			status = fmt.Sprint(s.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.ReceivedAt.Local().Format("01-02 15:04:05"),
			s.Method, clip(s.Path, 30), dash(s.Event.RunID), dash(s.Event.StatusV2), s.Verdict, status,
			time.Duration(s.Duration).Round(10*time.Microsecond))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newDeliveriesShowCmd() *cobra.Command {
	var h historyOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one delivery: request, signature verdict and every attempt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hist, done, err := h.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			d, err := hist.Delivery(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(d)
			}
			printDelivery(w, d)
			return nil
		},
	}
	h.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (bodies in base64)")
	return cmd
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
	fmt.Fprintf(w, "verdict   %s: %s\n", d.Verdict.Result, d.Verdict.Reason)
	if d.Verdict.Result != devhook.VerdictUnchecked {
		fmt.Fprintf(w, "          the reference receiver answers %d %q\n", d.Verdict.Status, d.Verdict.Text)
	}
	fmt.Fprintln(w, "\nheaders")
	printHeader(w, d.Header)
	fmt.Fprintf(w, "\nbody (%d bytes)\n", len(d.Body))
	printBody(w, d.Body)
	for _, a := range d.Attempts {
		fmt.Fprintf(w, "\nattempt %d (%s) → %s at %s, %s\n", a.Seq, a.Kind, a.Target, a.StartedAt.Local().Format("15:04:05.000"),
			time.Duration(a.Duration).Round(10*time.Microsecond))
		if a.Request != nil && a.Request.Resigned {
			fmt.Fprintln(w, "  re-signed with a fresh t")
		}
		if a.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", a.Error)
		}
		if a.Status != 0 {
			fmt.Fprintf(w, "  status %d\n", a.Status)
			printHeader(w, a.Header)
			printBody(w, a.Body)
		}
		if h := check.Hint(d, &a); h != "" {
			fmt.Fprintf(w, "  hint: %s\n", h)
		}
	}
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

func newReplayCmd() *cobra.Command {
	var h historyOptions
	var resign, noResign bool
	var to string
	cmd := &cobra.Command{
		Use:   "replay ID",
		Short: "Send a recorded delivery to the receiver again and record the attempt",
		Long: `Replay sends a recorded delivery again: through the running devhook listen when its
inspector answers, else directly from the data directory. By default it is re-signed with
a fresh t when the secret is known, so the receiver's 5-minute window accepts it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if h.secret == "" {
				h.secret = os.Getenv("DEVHOOK_SECRET")
			}
			hist, done, err := h.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			opt := devhook.ReplayOptions{To: to}
			switch {
			case resign && noResign:
				return errors.New("--resign and --no-resign exclude each other")
			case resign:
				opt.Resign = &resign
			case noResign:
				f := false
				opt.Resign = &f
			}
			a, err := hist.Replay(cmd.Context(), args[0], opt)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "attempt %d → %s  ", a.Seq, a.Target)
			if a.Status != 0 {
				fmt.Fprintf(w, "%d", a.Status)
			}
			if a.Request != nil && a.Request.Resigned {
				fmt.Fprint(w, "  (re-signed)")
			}
			fmt.Fprintf(w, "  %s\n", time.Duration(a.Duration).Round(10*time.Microsecond))
			if a.Error != "" {
				return fmt.Errorf("replay failed: %s", a.Error)
			}
			return nil
		},
	}
	h.flags(cmd)
	cmd.Flags().BoolVar(&resign, "resign", false, "sign with a fresh t (needs the secret)")
	cmd.Flags().BoolVar(&noResign, "no-resign", false, "send the original signature as is")
	cmd.Flags().StringVar(&to, "to", "", "send to this receiver instead")
	cmd.Flags().StringVar(&h.secret, "secret", "", "signing secret, for re-signing without a running listen (or DEVHOOK_SECRET)")
	return cmd
}
