package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/services/frontend"
)

func newFrontendCommand() *cobra.Command {
	cfg := frontend.DefaultConfig()
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	var tlsOpts tlsOptions
	tlsOpts.register(fs)
	var sampleRatio float64
	registerTraceSampleRatio(fs, &sampleRatio)
	cmd := &cobra.Command{
		Use:   "frontend",
		Short: "Run a frontend: the etcd v3 API (gRPC, JSON gateway, /health, /metrics) in front of the members",
		Example: "  cairn frontend --name m1 --listen-client-urls http://127.0.0.1:2379 " +
			"--consensus-endpoints http://127.0.0.1:2390,http://127.0.0.1:2391,http://127.0.0.1:2392",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFrontend(cmd.Context(), cfg, tlsOpts, sampleRatio)
		},
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}

// runFrontend serves until ctx ends (SIGINT or SIGTERM), then stops gracefully, as every service
// subcommand does. The frontend serves its own --listen-metrics-urls (etcd's flags are its own).
func runFrontend(ctx context.Context, cfg frontend.Config, tlsOpts tlsOptions, sampleRatio float64) error {
	proc, err := newProcess(ctx, "frontend", cfg.Name, processOptions{logLevel: cfg.LogLevel, tls: tlsOpts,
		traceSampleRatio: sampleRatio})
	if err != nil {
		return err
	}
	cfg.TLSPolicy = tlsOpts.policy
	fe, err := frontend.New(cfg, frontend.Deps{Logger: proc.logger, Telemetry: proc.telemetry, Registry: proc.registry,
		Internal: proc.internal})
	if err != nil {
		proc.close(context.WithoutCancel(ctx))
		return err
	}
	if err := fe.Start(ctx); err != nil {
		proc.close(context.WithoutCancel(ctx))
		return fmt.Errorf("start frontend: %w", err)
	}
	return proc.waitForStop(ctx, nil, nil, fe.Stop)
}
