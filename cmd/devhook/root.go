package main

import (
	"io"

	"github.com/spf13/cobra"
)

// newRootCmd builds the command tree. Output goes to stdout and stderr so
// that tests can capture it.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "devhook",
		Short:         "Receive the service's webhooks on this machine, verify them and see what happened",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
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
	)
	return root
}
