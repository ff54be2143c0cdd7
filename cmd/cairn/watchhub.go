package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/pkg/obs"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// watchhubStopTimeout bounds the stop after SIGINT/SIGTERM.
const watchhubStopTimeout = 10 * time.Second

func newWatchhubCommand() *cobra.Command {
	cfg := watchhub.Config{}.WithDefaults()
	fs := flag.NewFlagSet("watchhub", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	name := fs.String("name", "watchhub", "Name of this hub in logs.")
	logLevel := fs.String("log-level", "info", "Log level: debug, info, warn or error.")
	cmd := &cobra.Command{
		Use:   "watchhub",
		Short: "Run a watchhub: the etcd Watch API, fed by the storages' events on NATS",
		Example: "  cairn watchhub --listen-url http://127.0.0.1:23800 --nats-url nats://127.0.0.1:4222 " +
			"--storage-endpoints http://127.0.0.1:23790,http://127.0.0.1:23791,http://127.0.0.1:23792",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWatchhub(cmd.Context(), cfg, *name, *logLevel) },
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}

// runWatchhub serves until ctx ends (SIGINT or SIGTERM), then stops; its clients resume on another hub.
func runWatchhub(ctx context.Context, cfg watchhub.Config, name, logLevel string) error {
	level, err := obs.ParseLevel(logLevel)
	if err != nil {
		return err
	}
	logger := obs.NewLogger(os.Stderr, "watchhub", name, level)
	tel, err := obs.NewTelemetry(ctx, "watchhub")
	if err != nil {
		return err
	}
	hub, err := watchhub.New(cfg, tel, logger)
	if err != nil {
		return err
	}
	if err := hub.Start(ctx); err != nil {
		return fmt.Errorf("start watchhub: %w", err)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), watchhubStopTimeout)
	defer cancel()
	err = hub.Stop(stopCtx)
	if terr := tel.Shutdown(stopCtx); err == nil {
		err = terr
	}
	return err
}
