// Command cairn is Cairn's single binary: every service, the local stacks and the tools are subcommands.
//
// Each subcommand lives in its own file as a newXCommand() *cobra.Command constructor and is wired below
// with one line. Flags follow etcd's names where etcd has one; `--flag value` and `--flag=value` both work.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

// newRootCommand builds the command tree. SIGINT and SIGTERM cancel the context every subcommand gets from
// cmd.Context(), which is how long-running subcommands learn to stop.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "cairn",
		Short: "Cairn: an etcd-compatible, strongly consistent, distributed key-value store",
		Long: "Cairn serves the etcd v3 API from separate services (consensus, storage, watchhub, leasekeeper, " +
			"frontend). This one binary runs any of them, a whole local stack, and the tools.",
		SilenceUsage: true,
	}
	root.AddCommand(
		newConsensusCommand(),
		newStorageCommand(),
		newFrontendCommand(),
		newNATSCommand(),
		newDevCommand(),
		newUpCommand(),
		newVersionCommand(),
		newBenchCommand(),
		newLeasekeeperCommand(),
		newWatchhubCommand(),
	)
	return root
}
