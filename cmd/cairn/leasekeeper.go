package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/pkg/obs"
	"github.com/cairn-kv/cairn/services/leasekeeper"
)

// leasekeeperStopTimeout bounds the clean stop (which releases the claim) after SIGINT/SIGTERM.
const leasekeeperStopTimeout = 10 * time.Second

func newLeasekeeperCommand() *cobra.Command {
	cfg := leasekeeper.DefaultConfig()
	logLevel := "info"
	fs := flag.NewFlagSet("leasekeeper", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	fs.StringVar(&logLevel, "log-level", logLevel, "Configures log level. Only supports debug, info, warn, error.")
	cmd := &cobra.Command{
		Use:   "leasekeeper",
		Short: "Run a leasekeeper: the lease clock and etcd's Lease API (one active keeper, the others stand by)",
		Long: "Runs a leasekeeper. It follows the leases through the storages (--storage-endpoints) and the event bus " +
			"(--nats-url), claims the active role through storage when no other keeper renews it, and serves etcd's " +
			"Lease service on --listen-url; standbys answer FailedPrecondition \"not the active leasekeeper\".",
		Example: "  cairn leasekeeper --name lk1 --listen-url http://127.0.0.1:2395 \\\n" +
			"    --storage-endpoints http://127.0.0.1:23790,http://127.0.0.1:23792 --nats-url nats://127.0.0.1:4222 --admin-addr 127.0.0.1:2396",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runLeasekeeper(cmd.Context(), cfg, logLevel) },
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}

// runLeasekeeper serves until ctx ends (SIGINT or SIGTERM), then stops cleanly, releasing the claim.
func runLeasekeeper(ctx context.Context, cfg leasekeeper.Config, logLevel string) error {
	level, err := obs.ParseLevel(logLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := obs.NewLogger(os.Stderr, "leasekeeper", cfg.Name, level)
	tel, err := obs.NewTelemetry(ctx, "leasekeeper")
	if err != nil {
		return err
	}
	k, err := leasekeeper.New(cfg, tel, logger)
	if err != nil {
		return err
	}
	if err := k.Start(ctx); err != nil {
		return fmt.Errorf("start leasekeeper: %w", err)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), leasekeeperStopTimeout)
	defer cancel()
	err = k.Stop(stopCtx)
	if terr := tel.Shutdown(stopCtx); err == nil {
		err = terr
	}
	return err
}
