package main

import (
	"context"
	"flag"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/datadir"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/services/consensus"
)

func newConsensusCommand() *cobra.Command {
	cfg := consensus.DefaultConfig()
	var opts processOptions
	peerTLS := tlsconfig.Files{FlagPrefix: tlsconfig.PeerFlags}
	cmd := &cobra.Command{
		Use:   "consensus",
		Short: "Run one consensus member (Raft log, peer transport, membership, ReadIndex)",
		Example: "  cairn consensus --name m1 --data-dir m1.consensus --listen-peer-urls http://127.0.0.1:2380 \\\n" +
			"    --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster m1=http://127.0.0.1:2380 \\\n" +
			"    --listen-consensus-url http://127.0.0.1:2390 --advertise-storage-url http://127.0.0.1:23790",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runConsensus(cmd.Context(), cfg, peerTLS, opts) },
	}
	addGoFlags(cmd, func(fs *flag.FlagSet) {
		cfg.RegisterFlags(fs)
		peerTLS.RegisterFlags(fs)
	})
	opts.register(cmd.Flags(), "http://127.0.0.1:2381")
	return cmd
}

func runConsensus(ctx context.Context, cfg consensus.Config, peerTLS tlsconfig.Files, opts processOptions) error {
	proc, err := newProcess(ctx, "consensus", cfg.Name, opts)
	if err != nil {
		return err
	}
	lock, err := lockDataDir(cfg.DataDir, "cairn consensus", datadir.Consensus)
	if err != nil {
		return err
	}
	defer lock.Release()
	peer, err := proc.link(tlsconfig.KindPeer, peerTLS)
	if err != nil {
		return err
	}
	node, err := consensus.New(cfg, consensus.Deps{Logger: proc.logger, Telemetry: proc.telemetry, Registry: proc.registry,
		Peer: peer, Internal: proc.internal})
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	if err := proc.serveAdmin(node.Health); err != nil {
		_ = node.Stop(context.WithoutCancel(ctx))
		return err
	}
	return proc.waitForStop(ctx, node.Done(), node.Err, node.Stop)
}
