package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/services/leasekeeper"
)

func newLeasekeeperCommand() *cobra.Command {
	cfg := leasekeeper.DefaultConfig()
	var opts processOptions
	cmd := &cobra.Command{
		Use:   "leasekeeper",
		Short: "Run a leasekeeper: the lease clock and etcd's Lease API (one active keeper, the others stand by)",
		Long: "Runs a leasekeeper. It follows the leases through the storages (--storage-endpoints) and the event bus " +
			"(--nats-url), claims the active role through storage when no other keeper renews it, and serves etcd's " +
			"Lease service on --listen-url; standbys answer FailedPrecondition \"not the active leasekeeper\". List every " +
			"keeper in the frontends' --lease-endpoints.",
		Example: "  cairn leasekeeper --name lk1 --listen-url http://127.0.0.1:2395 \\\n" +
			"    --storage-endpoints http://127.0.0.1:23790,http://127.0.0.1:23792 --nats-url nats://127.0.0.1:4222",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runLeasekeeper(cmd.Context(), cfg, opts) },
	}
	addGoFlags(cmd, func(fs *flag.FlagSet) { cfg.RegisterFlags(fs) })
	opts.register(cmd.Flags(), "http://127.0.0.1:2396")
	return cmd
}

// runLeasekeeper serves until ctx ends (SIGINT or SIGTERM), then stops cleanly, releasing the claim so a
// standby takes over at once.
func runLeasekeeper(ctx context.Context, cfg leasekeeper.Config, opts processOptions) error {
	proc, err := newProcess(ctx, "leasekeeper", cfg.Name, opts)
	if err != nil {
		return err
	}
	k, err := leasekeeper.New(cfg, leasekeeper.Deps{Logger: proc.logger, Telemetry: proc.telemetry, Registry: proc.registry,
		Internal: proc.internal})
	if err != nil {
		return err
	}
	if err := k.Start(ctx); err != nil {
		return fmt.Errorf("start leasekeeper: %w", err)
	}
	if err := proc.serveAdmin(k.Health); err != nil {
		_ = k.Stop(context.WithoutCancel(ctx))
		return err
	}
	return proc.waitForStop(ctx, nil, nil, k.Stop)
}
