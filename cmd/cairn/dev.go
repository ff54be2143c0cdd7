package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/pkg/eventbus"
	"github.com/cairn-kv/cairn/pkg/supervisor"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/storage"
)

// devOptions are the flags of `cairn dev`.
type devOptions struct {
	name              string
	dataDir           string
	clientURLs        []string
	advertiseURLs     []string
	peerURLs          []string
	quotaBackendBytes int64
	maxRequestBytes   int
	maxTxnOps         int
}

func newDevCommand() *cobra.Command {
	var do devOptions
	var opts processOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole of Cairn in one process: one member, on http://127.0.0.1:2379",
		Long: "Runs embedded NATS, one consensus member, its storage and the frontend in this one process, wired " +
			"as the multi-process stack is (over loopback gRPC), with the data in --data-dir, kept across restarts.",
		Example: "  cairn dev\n  cairn dev --data-dir /tmp/cairn --listen-client-urls http://127.0.0.1:12379",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), do, opts) },
	}
	flags := cmd.Flags()
	flags.StringVar(&do.name, "name", "default", "Human-readable name for this member.")
	flags.StringVar(&do.dataDir, "data-dir", "default.cairn", "Path to the data directory (consensus WAL and storage database).")
	flags.StringSliceVar(&do.clientURLs, "listen-client-urls", []string{"http://127.0.0.1:2379"}, "List of URLs to listen on for client traffic (etcd's gRPC API and /v3 JSON gateway).")
	flags.StringSliceVar(&do.advertiseURLs, "advertise-client-urls", nil, "List of this member's client URLs to advertise (default: --listen-client-urls).")
	flags.StringSliceVar(&do.peerURLs, "listen-peer-urls", []string{"http://127.0.0.1:2380"}, "List of URLs to listen on for peer traffic.")
	flags.Int64Var(&do.quotaBackendBytes, "quota-backend-bytes", storage.DefaultQuotaBackendBytes, "Raise alarms when backend size exceeds the given quota.")
	flags.IntVar(&do.maxRequestBytes, "max-request-bytes", 1572864, "Maximum client request size in bytes the server will accept.")
	flags.IntVar(&do.maxTxnOps, "max-txn-ops", 128, "Maximum number of operations permitted in a transaction.")
	opts.register(flags, "http://127.0.0.1:2381")
	return cmd
}

// stopList stops what was started, last first.
type stopList []func(context.Context) error

func (l stopList) stop(ctx context.Context) error {
	var errs []error
	for i := len(l) - 1; i >= 0; i-- {
		errs = append(errs, l[i](ctx))
	}
	return errors.Join(errs...)
}

func runDev(ctx context.Context, do devOptions, opts processOptions) error {
	if len(do.advertiseURLs) == 0 {
		do.advertiseURLs = do.clientURLs
	}
	proc, err := newProcess(ctx, "dev", do.name, opts)
	if err != nil {
		return err
	}
	var stops stopList
	fail := func(err error) error {
		_ = stops.stop(context.WithoutCancel(ctx))
		proc.close(context.WithoutCancel(ctx))
		return err
	}

	bus, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Host: "127.0.0.1", Port: -1})
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func(context.Context) error { bus.Shutdown(); return nil })

	ports, err := supervisor.FreePorts(1)
	if err != nil {
		return fail(err)
	}
	storageURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	node, consensusURL, err := startDevConsensus(ctx, proc.component("consensus"), do, storageURL)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, node.Stop)

	storageCfg := storage.Config{DataDir: filepath.Join(do.dataDir, "storage"), ListenURL: storageURL,
		QuotaBackendBytes: do.quotaBackendBytes, MaxRequestBytes: do.maxRequestBytes, MaxTxnOps: do.maxTxnOps}
	member, err := startMemberStorage(ctx, proc.component("storage"), storageCfg, node, bus.ClientURL())
	if err != nil {
		return fail(err)
	}
	stops = append(stops, member.stop)
	_ = consensusURL

	health := func(ctx context.Context) error {
		return errors.Join(bus.Health(ctx), node.Health(ctx), member.storage.Health(ctx))
	}
	if err := proc.serveAdmin(health); err != nil {
		return fail(err)
	}
	proc.logger.Info("cairn dev is ready", "client-urls", do.advertiseURLs, "data-dir", do.dataDir,
		"nats-url", bus.ClientURL(), "consensus-url", consensusURL, "storage-url", member.storage.URL())
	return proc.waitForStop(ctx, node.Done(), node.Err, stops.stop)
}

// startDevConsensus starts the single consensus member, serving its Consensus API on a loopback port of its
// own (the frontend uses it as it would a remote member's).
func startDevConsensus(ctx context.Context, proc *process, do devOptions, storageURL string) (*consensus.Node, string, error) {
	cfg := consensus.DefaultConfig()
	cfg.Name, cfg.DataDir = do.name, filepath.Join(do.dataDir, "consensus")
	cfg.ListenPeerURLs, cfg.InitialAdvertisePeerURLs = do.peerURLs, do.peerURLs
	cfg.InitialCluster = initialCluster(do.name, do.peerURLs)
	cfg.AdvertiseClientURLs, cfg.AdvertiseStorageURL = do.advertiseURLs, storageURL
	cfg.MaxRequestBytes = do.maxRequestBytes
	cfg.Logger, cfg.Telemetry, cfg.Registry = proc.logger, proc.telemetry, proc.registry
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("consensus API listener: %w", err)
	}
	cfg.ConsensusListener, cfg.ListenConsensusURL = lis, ""
	node, err := consensus.New(cfg)
	if err == nil {
		err = node.Start(ctx)
	}
	if err != nil {
		lis.Close()
		return nil, "", err
	}
	return node, "http://" + lis.Addr().String(), nil
}

// initialCluster is --initial-cluster for a one-member cluster.
func initialCluster(name string, peerURLs []string) string {
	parts := make([]string, len(peerURLs))
	for i, u := range peerURLs {
		parts[i] = name + "=" + u
	}
	return strings.Join(parts, ",")
}
