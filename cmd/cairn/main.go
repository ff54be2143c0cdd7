// Command cairn is Cairn's single binary: every service, the local stacks and the tools are subcommands.
//
// Each subcommand lives in its own file as a newXCommand() *cobra.Command constructor and is wired below
// with one line. Flags follow etcd's names where etcd has one; `--flag value` and `--flag=value` both work.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/services/consensus"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	switch {
	case errors.Is(err, consensus.ErrRemoved):
		os.Exit(consensus.ExitCodeRemoved)
	case err != nil:
		os.Exit(1)
	}
}

// runsNATS reports whether the subcommand's process runs a NATS server: every other stops nats-server's process
// sampler, which would wake it every second for nothing (see eventbus.StopProcessSampler).
func runsNATS(subcommand string) bool { return subcommand == "nats" || subcommand == "dev" }

// newRootCommand builds the command tree. SIGINT and SIGTERM cancel the context every subcommand gets from
// cmd.Context(), which is how long-running subcommands learn to stop.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "cairn",
		Short: "Cairn: an etcd-compatible, strongly consistent, distributed key-value store",
		Long: "Cairn serves the etcd v3 API from separate services (consensus, storage, watchhub, leasekeeper, " +
			"frontend). This one binary runs any of them, a whole local stack, and the tools.",
		SilenceUsage: true,
		Version:      cairnVersion, // --version, as etcd has it
	}
	root.SetVersionTemplate(versionText())
	var gc gcFlags
	gc.register(root.PersistentFlags())
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if !runsNATS(cmd.Name()) {
			eventbus.StopProcessSampler()
		}
		return gc.apply(cmd)
	}
	root.PersistentPostRun = func(*cobra.Command, []string) { gc.stop() }
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
		newSnapshotCommand(),
		newBackupCommand(),
		newEncryptionCommand(),
		newCertsCommand(),
		newKeysCommand(),
		newTraceCommand(),
		newHealthCommand(),
	)
	return root
}
