package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/natsrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/storage"
)

// devhook relay parked: the deliveries a relay set aside because they can
// never be sent to their agent, read from the single relay's relay.db
// (with the relay stopped: bbolt locks the file while it runs) or from a
// cluster's NATS.

// parkedStore is what the commands need of a relay's store:
// boltrelay.Store (a single relay) and natsrelay.Store (a cluster)
// have it.
type parkedStore interface {
	ListParked(channel string) ([]relay.Parked, error)
	ParkedDelivery(id string) (relay.Parked, error)
	Requeue(id string) (relay.Parked, error)
	DropParked(id string) (relay.Parked, error)
}

// parkedOptions find the relay's store: --data for a single relay,
// --nats for a cluster.
type parkedOptions struct {
	dataDir    string
	natsURLs   string
	natsCreds  string
	natsPrefix string
}

func (o *parkedOptions) flags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.dataDir, "data", filepath.Join(defaultDataDir(), "relay"), "data directory of the single relay (devhook relay serve --data), which must be stopped")
	f.StringVar(&o.natsURLs, "nats", "", "a cluster's NATS server URLs (comma-separated), as its relays have them: read the cluster's parked deliveries instead")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS credentials file (JWT and NKey), with --nats")
	f.StringVar(&o.natsPrefix, "nats-prefix", natsrelay.DefaultPrefix, "prefix of the cluster's NATS subjects, streams and buckets, with --nats")
}

// open returns the store, for writing when write is set, and what closes
// it.
func (o *parkedOptions) open(cmd *cobra.Command, write bool) (parkedStore, func(), error) {
	if o.natsURLs != "" {
		if cmd.Flags().Changed("data") {
			return nil, nil, errors.New("--data is the single relay's, --nats a cluster's: give one")
		}
		return o.openCluster(cmd.Context())
	}
	path := filepath.Join(o.dataDir, "relay.db")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("no relay.db in %s: give the relay's data directory (devhook relay serve --data DIR), or --nats for a cluster", o.dataDir)
	}
	db, err := boltrelay.Open(path, boltrelay.Config{ReadOnly: !write})
	if errors.Is(err, storage.ErrLocked) {
		return nil, nil, fmt.Errorf("%s is held by a running devhook relay (bbolt locks the file while the relay runs): stop the relay, run this again, then start the relay; meanwhile its /metrics counts the parked deliveries (devhook_relay_parked_deliveries)", path)
	}
	if err != nil {
		return nil, nil, err
	}
	return db, func() { db.Close() }, nil
}

func (o *parkedOptions) openCluster(ctx context.Context) (parkedStore, func(), error) {
	opts := []nats.Option{nats.Name("devhook relay parked")}
	if o.natsCreds != "" {
		opts = append(opts, nats.UserCredentials(o.natsCreds))
	}
	nc, err := nats.Connect(o.natsURLs, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w (check --nats)", o.natsURLs, err)
	}
	s, err := natsrelay.LookupStore(ctx, natsrelay.Config{Conn: nc, Prefix: o.natsPrefix})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return s, nc.Close, nil
}

// with runs fn on the store, opened for writing when write is set.
func (o *parkedOptions) with(cmd *cobra.Command, write bool, fn func(s parkedStore) error) error {
	s, done, err := o.open(cmd, write)
	if err != nil {
		return err
	}
	defer done()
	return fn(s)
}

func newRelayParkedCmd() *cobra.Command {
	o := &parkedOptions{}
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List, show, requeue and drop the deliveries a relay parked because it can never send them",
		Long: `A relay parks a queued delivery it can never send to its agent (one that cannot be
framed, or read back from the queue), with the reason, so that the deliveries behind it
go on. Parked deliveries wait here until you requeue or drop them; the relay's /metrics
counts them (devhook_relay_parked_deliveries).

A single relay's are in relay.db under --data, which the running relay locks: stop the
relay first (list and show only read the file; requeue and drop write it). A requeued
delivery reaches the channel's agent when the relay runs and the agent is connected.
A cluster's are in NATS (--nats, with --nats-creds and --nats-prefix as its relays
have them), and the relays may keep running: a requeued delivery goes at once to the
channel's agent wherever it is connected.`,
		Example: `  devhook relay parked list --data /var/lib/devhook-relay
  devhook relay parked requeue 0197a3c2-7b1e-7000-8000-0123456789ab --nats nats://nats-1:4222`,
	}
	o.flags(cmd)
	cmd.AddCommand(newParkedListCmd(o), newParkedShowCmd(o), newParkedRequeueCmd(o), newParkedDropCmd(o))
	return groupCmd(cmd)
}

func newParkedListCmd(o *parkedOptions) *cobra.Command {
	var channel string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List parked deliveries: channel, id, when received, body size, reason",
		Example: `  devhook relay parked list --data /var/lib/devhook-relay
  devhook relay parked list --nats nats://nats-1:4222,nats://nats-2:4222 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.with(cmd, false, func(s parkedStore) error {
				list, err := s.ListParked(channel)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if asJSON {
					if list == nil {
						list = []relay.Parked{}
					}
					return printJSON(w, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(w, "no parked deliveries")
					return nil
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CHANNEL\tID\tRECEIVED\tSIZE\tREASON")
				for _, p := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Channel, p.ID, formatWhen(p.ReceivedAt), formatSize(p.Size), clip(p.Reason, 100))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&channel, "channel", "", "only this channel's")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newParkedShowCmd(o *parkedOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a parked delivery: why it was parked, its request and headers, its body's size",
		Example: `  devhook relay parked show 0197a3c2-7b1e-7000-8000-0123456789ab
  devhook relay parked show 0197a3c2-7b1e-7000-8000-0123456789ab --json --data /var/lib/devhook-relay`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.with(cmd, false, func(s parkedStore) error {
				p, err := s.ParkedDelivery(args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), p)
				}
				printParked(cmd.OutOrStdout(), &p)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (the body in base64)")
	return cmd
}

func newParkedRequeueCmd(o *parkedOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "requeue ID",
		Short: "Put a parked delivery back in its channel's queue, for its agent",
		Long: `Requeue puts a parked delivery back at the end of its channel's queue, as it was
queued. If what made the relay park it still holds (the reason says), the relay parks it
again; requeue once a newer relay can send it, or the cause is gone.`,
		Example: `  devhook relay parked requeue 0197a3c2-7b1e-7000-8000-0123456789ab --data /var/lib/devhook-relay`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.with(cmd, true, func(s parkedStore) error {
				p, err := s.Requeue(args[0])
				if err != nil {
					return err
				}
				when := "once the relay runs and the agent is connected"
				if o.natsURLs != "" {
					when = "now if it is connected to a relay of the cluster, else when it connects"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "requeued delivery %s on channel %s: the channel's agent gets it %s\n", p.ID, p.Channel, when)
				return nil
			})
		},
	}
}

func newParkedDropCmd(o *parkedOptions) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "drop ID --yes",
		Short: "Delete a parked delivery for good",
		Long: `Drop deletes a parked delivery: no agent will ever get it. Without --yes it says
what it would drop and drops nothing.`,
		Example: `  devhook relay parked drop 0197a3c2-7b1e-7000-8000-0123456789ab --yes --data /var/lib/devhook-relay`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			if !yes {
				return o.with(cmd, false, func(s parkedStore) error {
					p, err := s.ParkedDelivery(args[0])
					if err != nil {
						return err
					}
					fmt.Fprintf(w, "would drop delivery %s of channel %s (received %s, %s; parked: %s)\n",
						p.ID, p.Channel, formatWhen(p.ReceivedAt), formatSize(p.Size), p.Reason)
					return errors.New("nothing dropped: add --yes to drop it for good")
				})
			}
			return o.with(cmd, true, func(s parkedStore) error {
				p, err := s.DropParked(args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "dropped delivery %s of channel %s\n", p.ID, p.Channel)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "drop it: the delivery is deleted for good")
	return cmd
}

func printParked(w io.Writer, p *relay.Parked) {
	fmt.Fprintf(w, "delivery  %s\nchannel   %s\nreceived  %s\n", p.ID, p.Channel, formatWhen(p.ReceivedAt))
	if !p.ParkedAt.IsZero() {
		fmt.Fprintf(w, "parked    %s\n", formatWhen(p.ParkedAt))
	}
	fmt.Fprintf(w, "reason    %s\n", p.Reason)
	d := p.Delivery
	if d == nil {
		fmt.Fprintln(w, "\nthe delivery cannot be decoded: requeue it for a newer relay, or drop it")
		return
	}
	fmt.Fprintf(w, "request   %s %s", d.Method, d.Path)
	if d.RawQuery != "" {
		fmt.Fprintf(w, "?%s", d.RawQuery)
	}
	fmt.Fprintln(w)
	if d.RemoteAddr != "" {
		fmt.Fprintf(w, "from      %s\n", d.RemoteAddr)
	}
	fmt.Fprintln(w, "\nheaders")
	printHeader(w, d.Header)
	fmt.Fprintf(w, "\nbody      %s (--json for the bytes)\n", formatSize(p.Size))
}

// formatWhen is a time for a person: local, to the second.
func formatWhen(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// formatSize is a body size, in bytes (exact) and, beyond a KiB, in KiB or
// MiB; "-" for an unknown one (-1).
func formatSize(n int) string {
	switch {
	case n < 0:
		return "-"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%d B (%.1f KiB)", n, float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B (%.1f MiB)", n, float64(n)/(1<<20))
}
