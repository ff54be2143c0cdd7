package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/services/frontend"
)

// frontendStopTimeout bounds the graceful stop after SIGINT/SIGTERM; streams still open then are cut.
const frontendStopTimeout = 10 * time.Second

func newFrontendCommand() *cobra.Command {
	cfg := frontend.DefaultConfig()
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cmd := &cobra.Command{
		Use:   "frontend",
		Short: "Run a frontend: the etcd v3 API (gRPC, JSON gateway, /health, /metrics) in front of the members",
		Example: "  cairn frontend --name m1 --listen-client-urls http://127.0.0.1:2379 " +
			"--consensus-endpoints http://127.0.0.1:2390,http://127.0.0.1:2391,http://127.0.0.1:2392",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFrontend(cmd.Context(), cfg) },
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}

// runFrontend serves until ctx ends (SIGINT or SIGTERM), then stops gracefully.
func runFrontend(ctx context.Context, cfg frontend.Config) error {
	level, err := obs.ParseLevel(cfg.LogLevel)
	if err != nil {
		return err
	}
	logger := obs.NewLogger(os.Stderr, "frontend", cfg.Name, level)
	tel, err := obs.NewTelemetry(ctx, "frontend")
	if err != nil {
		return err
	}
	fe, err := frontend.New(cfg, tel, logger)
	if err != nil {
		return err
	}
	if err := fe.Start(ctx); err != nil {
		return fmt.Errorf("start frontend: %w", err)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), frontendStopTimeout)
	defer cancel()
	err = fe.Stop(stopCtx)
	if terr := tel.Shutdown(stopCtx); err == nil {
		err = terr
	}
	return err
}
