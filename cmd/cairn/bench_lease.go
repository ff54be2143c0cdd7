package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/tools/bench"
)

func newBenchLeaseKeepAliveCommand(opts *benchOptions) *cobra.Command {
	var cfg bench.LeaseConfig
	cmd := &cobra.Command{
		Use:   "lease-keepalive",
		Short: "Benchmark lease keep-alives, as etcd's benchmark lease-keepalive (one lease and stream per client)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keepAlive := bench.NewLeaseKeepAlive(cfg)
			defer keepAlive.Close()
			return opts.runBenchmark(cmd, "lease-keepalive", keepAlive.Op, map[string]string{"ttl": strconv.FormatInt(cfg.TTL, 10)})
		},
	}
	cmd.Flags().Int64Var(&cfg.TTL, "ttl", bench.DefaultLeaseTTL, "TTL of each client's lease, in seconds")
	return cmd
}

func newBenchLeaseGrantRevokeCommand(opts *benchOptions) *cobra.Command {
	var cfg bench.LeaseConfig
	cmd := &cobra.Command{
		Use:   "lease-grant-revoke",
		Short: "Benchmark lease grant followed by revoke (two writes through the log per request)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return opts.runBenchmark(cmd, "lease-grant-revoke", bench.LeaseGrantRevokeOp(cfg), map[string]string{"ttl": strconv.FormatInt(cfg.TTL, 10)})
		},
	}
	cmd.Flags().Int64Var(&cfg.TTL, "ttl", bench.DefaultLeaseTTL, "TTL of each granted lease, in seconds")
	return cmd
}
