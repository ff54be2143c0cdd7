package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/services/backup"
)

func newBackupCommand() *cobra.Command {
	cfg := backup.DefaultConfig()
	var opts processOptions
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Take verified snapshots of a Cairn (or etcd) cluster on a schedule and keep the newest ones",
		Long: "Every --interval, takes a snapshot (etcd's Maintenance.Snapshot) from the first of --endpoints that " +
			"answers, writes it under a temporary name, verifies it (sha256 trailer, bbolt integrity), renames it " +
			"to DIR/snapshot-<UTC time>.db and removes the oldest beyond --keep. /metrics has " +
			"cairn_backup_last_success_timestamp_seconds, _last_duration_seconds, _last_size_bytes and " +
			"cairn_backup_failures_total{reason}.",
		Example: "  cairn backup --endpoints http://127.0.0.1:2379,http://127.0.0.1:22379 --dir /var/backups/cairn --interval 30m --keep 48",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runBackup(cmd.Context(), cfg, opts) },
	}
	flags := cmd.Flags()
	flags.StringSliceVar(&cfg.Endpoints, "endpoints", []string{"http://127.0.0.1:2379"}, "Client URLs; each backup uses the first that answers.")
	flags.StringVar(&cfg.Dir, "dir", "backups", "Directory for the snapshots.")
	flags.DurationVar(&cfg.Interval, "interval", cfg.Interval, "Time between backups (the first is taken at start).")
	flags.IntVar(&cfg.Keep, "keep", cfg.Keep, "Number of snapshots to keep.")
	flags.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "Longest one backup may take.")
	flags.StringVar(&cfg.TLS.CAFile, "cacert", "", "Verify https:// endpoints with this CA bundle (as etcdctl's --cacert).")
	flags.StringVar(&cfg.TLS.CertFile, "cert", "", "Client certificate for endpoints that require one (as etcdctl's --cert).")
	flags.StringVar(&cfg.TLS.KeyFile, "key", "", "Key of --cert (as etcdctl's --key).")
	opts.register(flags, "http://127.0.0.1:2382")
	return cmd
}

func runBackup(ctx context.Context, cfg backup.Config, opts processOptions) error {
	proc, err := newProcess(ctx, "backup", "", opts)
	if err != nil {
		return err
	}
	lock, err := lockDataDir(cfg.Dir, "cairn backup")
	if err != nil {
		return err
	}
	defer lock.Release()
	svc, err := backup.New(cfg, backup.Deps{Logger: proc.logger, Registry: proc.registry})
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	if err := proc.serveAdmin(svc.Health); err != nil {
		_ = svc.Stop(context.WithoutCancel(ctx))
		return err
	}
	return proc.waitForStop(ctx, nil, nil, svc.Stop)
}
