package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/storage"
)

// devhook relay compact: relay.db rewritten without its free pages, with
// the relay stopped (boltrelay.Compact).

type relayCompactOptions struct {
	dataDir string
	stdout  io.Writer
}

func newRelayCompactCmd() *cobra.Command {
	o := &relayCompactOptions{}
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Give the disk back the space of a single relay's drained queue (relay stopped)",
		Long: `A single relay keeps its queue in relay.db under --data. The pages that drained
deliveries free are reused by later ones, so the file stays within the queue's quota
(--queue-max-bytes) and bbolt's overhead, but it never shrinks by itself: after a flood
it keeps its largest size. Compact rewrites it with what it holds (channels, queued and
parked deliveries), packed, and puts the copy in its place; it prints the sizes before
and after.

The relay must be stopped: it locks relay.db while it runs. The copy needs free space up
to the file's current size while it is written. A cluster's queue is in NATS: JetStream
gives space back by itself.`,
		Example: `  devhook relay compact --data /var/lib/devhook-relay`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stdout = cmd.OutOrStdout()
			return o.run()
		},
	}
	cmd.Flags().StringVar(&o.dataDir, "data", filepath.Join(defaultDataDir(), "relay"), "data directory of the single relay (devhook relay serve --data), which must be stopped")
	return cmd
}

func (o *relayCompactOptions) run() error {
	path := filepath.Join(o.dataDir, "relay.db")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no relay.db in %s: give the relay's data directory (devhook relay --data DIR)", o.dataDir)
	}
	res, err := boltrelay.Compact(path, time.Second)
	if errors.Is(err, storage.ErrLocked) {
		return fmt.Errorf("%s is held by a running devhook relay (bbolt locks the file while the relay runs): stop the relay, run devhook relay compact again, then start the relay", path)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "compacted %s: %s → %s (%s given back to the disk)\n",
		path, sizeText(res.Before), sizeText(res.After), sizeText(res.Before-res.After))
	return nil
}

// sizeText is a byte count in the largest binary unit that keeps it at
// 1 or more.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
