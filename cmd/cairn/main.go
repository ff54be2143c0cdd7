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
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

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
	var gcPercent int
	root.PersistentFlags().IntVar(&gcPercent, "gc-percent", defaultGCPercent, "Go garbage collector target percentage (GOGC); "+
		"the GOGC environment variable, when set, wins")
	root.PersistentPreRun = func(*cobra.Command, []string) { setGCPercent(gcPercent) }
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

// defaultGCPercent trades memory for CPU: every service's heap is small (tens of MiB) and its garbage is
// per-request, so collecting at 5× the live heap rather than 2× takes most of the GC's share of a core.
const defaultGCPercent = 400

// setGCPercent applies --gc-percent unless GOGC is set in the environment.
func setGCPercent(percent int) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}
