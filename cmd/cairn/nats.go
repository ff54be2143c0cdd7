package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/eventbus"
)

func newNATSCommand() *cobra.Command {
	cfg := eventbus.EmbeddedConfig{Host: "127.0.0.1", Port: 4222}
	var opts processOptions
	var nkeysDir string
	cmd := &cobra.Command{
		Use:   "nats",
		Short: "Run the NATS server that carries applied records from storages to watchhubs and leasekeepers",
		Long: "Runs an embedded NATS server (github.com/nats-io/nats-server/v2) as its own process, as `cairn up` " +
			"does; any NATS server works in its place.",
		Example: "  cairn nats --addr 127.0.0.1 --port 4222 --listen-metrics-urls http://127.0.0.1:8223",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runNATS(cmd.Context(), cfg, nkeysDir, opts) },
	}
	flags := cmd.Flags()
	flags.StringVar(&cfg.Host, "addr", cfg.Host, "Host to accept NATS client connections on.")
	flags.IntVar(&cfg.Port, "port", cfg.Port, "Port to accept NATS client connections on (-1 picks a free one).")
	flags.IntVar(&cfg.HTTPPort, "http-port", 0, "Port of NATS's own monitoring endpoint (/varz, /healthz); 0 serves none.")
	flags.StringVar(&nkeysDir, "nkeys-dir", "", "Lock the bus down with role nkeys: the public keys (ROLE.pub) of storages, watchhubs and leasekeepers "+
		"in this directory, as cairn up keeps them in DATA-DIR/nats (each process connects with its role's seed, --nats-nkey-seed-file); "+
		"with --internal-cert-file too, the bus is TLS and the nkeys prove the roles.")
	opts.register(flags, "http://127.0.0.1:8223")
	return cmd
}

func runNATS(ctx context.Context, cfg eventbus.EmbeddedConfig, nkeysDir string, opts processOptions) error {
	proc, err := newProcess(ctx, "nats", "", opts)
	if err != nil {
		return err
	}
	cfg.TLS, cfg.Logger, cfg.Registry = proc.internal, proc.logger, proc.registry
	if nkeysDir != "" {
		if cfg.RoleKeys, err = eventbus.LoadRoleKeys(nkeysDir); err != nil {
			proc.close(context.WithoutCancel(ctx))
			return fmt.Errorf("--nkeys-dir: %w", err)
		}
	}
	server, err := eventbus.StartEmbedded(cfg)
	if err != nil {
		return err
	}
	proc.logger.Info("nats server started", "url", server.ClientURL())
	if err := proc.serveAdmin(server.Health); err != nil {
		server.Shutdown()
		return err
	}
	return proc.waitForStop(ctx, nil, nil, func(context.Context) error { server.Shutdown(); return nil })
}
