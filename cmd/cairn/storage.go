package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/internal/datadir"
	"github.com/cairn-kv/cairn/services/storage"
)

// storageOptions are the flags of `cairn storage` beyond storage.Config's own.
type storageOptions struct {
	name              string
	consensusEndpoint string
	natsURL           string
	natsSeedFile      string
	encryption        encryptionFlag
}

func newStorageCommand() *cobra.Command {
	cfg := storage.Config{DataDir: "default.storage"}
	var opts processOptions
	var so storageOptions
	cmd := &cobra.Command{
		Use:   "storage",
		Short: "Run one member's storage (MVCC on bbolt), applying its consensus member's committed log",
		Long: "Runs the storage of one member. It follows the committed log of its consensus member " +
			"(--consensus-endpoint), takes that member's ID, serves the Storage API on --listen-storage-url and, " +
			"with --nats-url, publishes every applied record on NATS for watchhubs and leasekeepers.",
		Example: "  cairn storage --name m1 --data-dir m1.storage --listen-storage-url http://127.0.0.1:23790 \\\n" +
			"    --consensus-endpoint http://127.0.0.1:2390 --nats-url nats://127.0.0.1:4222",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStorage(cmd.Context(), cfg, so, opts) },
	}
	addGoFlags(cmd, func(fs *flag.FlagSet) { cfg.RegisterFlags(fs) })
	flags := cmd.Flags()
	flags.StringVar(&so.name, "name", "default", "Name of this member (as its consensus member is named), for logs.")
	flags.StringVar(&so.consensusEndpoint, "consensus-endpoint", "http://127.0.0.1:2390", "Consensus API URL of this member's consensus (its --listen-consensus-url).")
	flags.StringVar(&so.natsURL, "nats-url", "", "NATS URL to publish applied records on (comma-separated for a NATS cluster); empty publishes nothing.")
	flags.StringVar(&so.natsSeedFile, "nats-nkey-seed-file", "", "File holding this process's nkey seed, its credentials on a bus locked down with role nkeys (cairn up keeps them in DATA-DIR/nats); empty: none.")
	so.encryption.register(flags)
	opts.register(flags, "http://127.0.0.1:23791")
	return cmd
}

func runStorage(ctx context.Context, cfg storage.Config, so storageOptions, opts processOptions) error {
	proc, err := newProcess(ctx, "storage", so.name, opts)
	if err != nil {
		return err
	}
	lock, err := lockDataDir(cfg.DataDir, "cairn storage", datadir.Storage)
	if err != nil {
		return err
	}
	defer lock.Release()
	log, err := consensusclient.New(consensusclient.Config{Target: so.consensusEndpoint,
		DialOptions: proc.telemetry.DialOptions(), Telemetry: proc.telemetry, Logger: proc.logger, TLS: proc.internal})
	if err != nil {
		return err
	}
	defer log.Close()
	keyring, err := so.encryption.load(ctx, proc.logger)
	if err != nil {
		return fmt.Errorf("storage of %s: %w", so.name, err)
	}
	defer keyring.Close()
	member, err := storage.Assemble(ctx, cfg, storage.Deps{Logger: proc.logger, Telemetry: proc.telemetry,
		Registry: proc.registry, Log: log, Keyring: keyring, Internal: proc.internal}, storage.Bus{NATSURL: so.natsURL, NkeySeedFile: so.natsSeedFile})
	if err == nil {
		err = member.Start(ctx)
	}
	if err != nil {
		return fmt.Errorf("storage of %s: %w", so.name, err)
	}
	if err := proc.serveAdmin(member.Health); err != nil {
		_ = member.Stop(context.WithoutCancel(ctx))
		return err
	}
	return proc.waitForStop(ctx, nil, nil, member.Stop)
}
