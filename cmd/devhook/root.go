package main

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newRootCmd builds the command tree. Output goes to stdout and stderr so
// that tests can capture it.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	info, _ := debug.ReadBuildInfo()
	root := &cobra.Command{
		Use:           "devhook",
		Short:         "Receive the service's webhooks on this machine, verify them and see what happened",
		Version:       versionString(info),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("devhook {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(suggestFlag)
	root.AddCommand(
		// one constructor per command, each in its own file
		newListenCmd(),
		newRelayCmd(),
		newReceiveCmd(),
		newSendCmd(),
		newCheckCmd(),
		newReplayCmd(),
		newDeliveriesCmd(),
		newEmulateCmd(),
		newWebhooksCmd(),
		newConversationsCmd(),
		newTriggerCmd(),
		newAppsCmd(),
		newRunsCmd(),
		newLoginCmd(),
		newLogoutCmd(),
		newTokenCmd(),
		newOrgsCmd(),
		newSSOCmd(),
		newVersionCmd(info),
	)
	return root
}

func newVersionCmd(info *debug.BuildInfo) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print devhook's version: the module version and the commit it was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "devhook %s\n", versionString(info))
			return nil
		},
	}
}

// versionString is the module version and, when the build recorded it,
// the commit, its time and whether the tree had changes:
// "v1.2.0 (commit 0123abcd4567, 2026-11-23T10:00:00Z)" or
// "(devel) (commit 0123abcd4567, modified)".
func versionString(info *debug.BuildInfo) string {
	if info == nil {
		return "unknown (built without module information)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	parts := []string{"commit " + rev}
	if at != "" {
		parts = append(parts, at)
	}
	if modified {
		parts = append(parts, "modified")
	}
	return v + " (" + strings.Join(parts, ", ") + ")"
}

// suggestFlag adds the nearest flag's name to an unknown flag error:
// "unknown flag: --foward (did you mean --forward?)".
func suggestFlag(cmd *cobra.Command, err error) error {
	const prefix = "unknown flag: --"
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return err
	}
	name := strings.TrimPrefix(msg, prefix)
	best, bestD := "", 3 // at most two edits away
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	}
	return fmt.Errorf("%w (did you mean --%s?)", err, best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// groupCmd is a command that only holds subcommands: without one it
// prints its help; an unknown one is an error (exit 1), with the nearest
// names.
func groupCmd(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		var near, names []string
		for _, c := range cmd.Commands() {
			if !c.IsAvailableCommand() {
				continue
			}
			names = append(names, c.Name())
			if editDistance(args[0], c.Name()) <= 2 || strings.HasPrefix(c.Name(), args[0]) {
				near = append(near, c.Name())
			}
		}
		if len(near) > 0 {
			msg += "; did you mean " + strings.Join(near, " or ") + "?"
		} else {
			msg += "; the commands are " + strings.Join(names, ", ")
		}
		return errors.New(msg)
	}
	return cmd
}
