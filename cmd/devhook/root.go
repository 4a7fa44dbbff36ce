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
		Use:   "devhook",
		Short: "Receive the service's webhooks on this machine, verify them and see what happened",
		Example: `  devhook listen --forward localhost:8080
  devhook emulate --api-key devkey
  devhook check http://localhost:8080/webhooks --secret whsec_test`,
		Version:       versionString(version, info),
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
		newScenarioCmd(),
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
		newGenDocsCmd(),
	)
	groupCommands(root)
	addCompletions(root) // completion.go: what TAB offers, by command path and flag name
	return root
}

// commandGroup is a heading of devhook --help and the commands under it.
type commandGroup struct {
	group    cobra.Group
	commands []string
}

// commandGroups sorts the commands of devhook --help under headings, as gh
// does: a new command gets its place here (a test fails for one without).
func commandGroups() []commandGroup {
	return []commandGroup{
		{cobra.Group{ID: "start", Title: "Getting started:"}, []string{"listen", "emulate", "deliveries", "replay"}},
		{cobra.Group{ID: "service", Title: "The service:"}, []string{"login", "logout", "token", "orgs", "sso", "webhooks", "conversations", "trigger", "apps", "runs"}},
		{cobra.Group{ID: "relay", Title: "The relay:"}, []string{"relay"}},
		{cobra.Group{ID: "tools", Title: "Tools:"}, []string{"check", "scenario", "receive", "send", "version"}},
	}
}

func groupCommands(root *cobra.Command) {
	byName := map[string]*cobra.Command{}
	for _, c := range root.Commands() {
		byName[c.Name()] = c
	}
	for _, g := range commandGroups() {
		root.AddGroup(&g.group)
		for _, name := range g.commands {
			if c := byName[name]; c != nil {
				c.GroupID = g.group.ID
			}
		}
	}
	root.SetHelpCommandGroupID("tools")
	root.SetCompletionCommandGroupID("tools")
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
