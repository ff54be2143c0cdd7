package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/services/watchhub"
)

// watchhubGCPercent is a watchhub's --gc-percent default. A hub's live heap grows with its watchers and what it
// has queued for them (84 MiB at 100,000 watchers receiving 200k events/s), and at defaultGCPercent its heap
// grew to five times that. Measured with 100,000 watchers (1,000 streams x 100) straight on one hub of a
// `cairn up`, 2 puts/s for 15 s, on 2 cores, 3-4 runs each: GOGC 400 peaked at 377-495 MiB with the collector
// at 0.18 s of CPU; 200 at 308-329 MiB and 0.25 s; 100 at 229-245 MiB and 0.50 s, with about 10% fewer events per
// hub CPU-second. So 200 saves about a third of a loaded hub's memory for about 1% more of its CPU.
const watchhubGCPercent = 200

func newWatchhubCommand() *cobra.Command {
	cfg := watchhub.DefaultConfig()
	var opts processOptions
	var name string
	var enc encryptionFlag
	cmd := &cobra.Command{
		Use:   "watchhub",
		Short: "Run a watchhub: the etcd Watch API, fed by the storages' applied records on NATS",
		Example: "  cairn watchhub --listen-url http://127.0.0.1:23800 --nats-url nats://127.0.0.1:4222 " +
			"--storage-endpoints http://127.0.0.1:23790,http://127.0.0.1:23791 --listen-metrics-urls http://127.0.0.1:23801",
		Long: fmt.Sprintf("Runs a watchhub. Its --gc-percent defaults to %d, not %d: a hub's live heap grows with "+
			"its watchers, and the collector's headroom over it is memory.", watchhubGCPercent, defaultGCPercent),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWatchhub(cmd.Context(), cfg, name, enc, opts) },
	}
	withGCPercent(cmd, watchhubGCPercent)
	addGoFlags(cmd, func(fs *flag.FlagSet) { cfg.RegisterFlags(fs) })
	cmd.Flags().StringVar(&name, "name", "watchhub", "Name of this hub in logs.")
	enc.register(cmd.Flags())
	opts.register(cmd.Flags(), "http://127.0.0.1:23801")
	return cmd
}

// runWatchhub serves until ctx ends (SIGINT or SIGTERM), then stops; its clients resume on another hub.
func runWatchhub(ctx context.Context, cfg watchhub.Config, name string, enc encryptionFlag, opts processOptions) error {
	proc, err := newProcess(ctx, "watchhub", name, opts)
	if err != nil {
		return err
	}
	keyring, err := enc.load(ctx, proc.logger)
	if err != nil {
		return err
	}
	defer keyring.Close()
	hub, err := watchhub.New(cfg, watchhub.Deps{Logger: proc.logger, Telemetry: proc.telemetry, Registry: proc.registry,
		Keyring: keyring, Internal: proc.internal})
	if err != nil {
		return err
	}
	if err := hub.Start(ctx); err != nil {
		return fmt.Errorf("start watchhub: %w", err)
	}
	if err := proc.serveAdmin(hub.Health); err != nil {
		_ = hub.Stop(context.WithoutCancel(ctx))
		return err
	}
	return proc.waitForStop(ctx, nil, nil, hub.Stop)
}
