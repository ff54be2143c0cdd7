package main

import (
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/datadir"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/frontend"
	"github.com/cairn-kv/cairn/services/leasekeeper"
	"github.com/cairn-kv/cairn/services/storage"
	"github.com/cairn-kv/cairn/services/watchhub"
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
	tls               tlsconfig.Files
	peerTLS           tlsconfig.Files
	autoTLS           bool // --tls
	clientURLsSet     bool // --listen-client-urls was given (else --tls makes the default https)
	fromSnapshot      string
	encryption        encryptionFlag
	authToken         string
	authTokenTTL      uint
	bcryptCost        int
	integrity         storage.Config // --auto-compaction-* and the corruption checks, for the storage
	raft              etcdTuning     // --heartbeat-interval, --election-timeout, --snapshot-count, --max-watch-lag
}

func newDevCommand() *cobra.Command {
	var do devOptions
	var opts processOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole of Cairn in one process: one member, on http://127.0.0.1:2379",
		Long: "Runs embedded NATS, one consensus member, its storage, a leasekeeper, a watchhub and the frontend in this one process, wired " +
			"as the multi-process stack is (over loopback gRPC), with the data in --data-dir, kept across restarts.",
		Example: "  cairn dev\n  cairn dev --data-dir /tmp/cairn --listen-client-urls http://127.0.0.1:12379",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			do.clientURLsSet = cmd.Flags().Changed("listen-client-urls")
			if err := do.raft.validate(); err != nil {
				return err
			}
			if err := do.checkURLs(); err != nil {
				return err
			}
			return runDev(cmd.Context(), do, opts)
		},
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
	flags.StringVar(&do.fromSnapshot, "from-snapshot", "", "Restore this snapshot (etcdctl snapshot save of Cairn or etcd) into a new --data-dir, then start.")
	do.encryption.register(flags)
	defaults := frontend.DefaultConfig()
	flags.StringVar(&do.authToken, "auth-token", defaults.AuthToken, "Specify auth token specific options (simple, or jwt,pub-key=...,priv-key=...,sign-method=...).")
	flags.UintVar(&do.authTokenTTL, "auth-token-ttl", defaults.AuthTokenTTL, "The lifetime in seconds of the auth token.")
	flags.IntVar(&do.bcryptCost, "bcrypt-cost", defaults.BcryptCost, "Specify bcrypt algorithm cost factor for auth password hashing.")
	tlsFlags := goflag.NewFlagSet("tls", goflag.ContinueOnError)
	do.tls.RegisterFlags(tlsFlags)
	do.peerTLS.FlagPrefix = tlsconfig.PeerFlags
	do.peerTLS.RegisterFlags(tlsFlags)
	flags.AddGoFlagSet(tlsFlags)
	integrityFlags := goflag.NewFlagSet("integrity", goflag.ContinueOnError)
	do.integrity.RegisterIntegrityFlags(integrityFlags)
	flags.AddGoFlagSet(integrityFlags)
	flags.BoolVar(&do.autoTLS, "tls", false, "Run every link with mutual TLS and the client URLs with TLS, on a CA and per-component certificates created in --data-dir/pki (kept across restarts); prints the etcdctl flags.")
	opts.register(flags, "http://127.0.0.1:2381")
	do.raft.registerRaft(flags)
	do.raft.registerWatch(flags)
	return cmd
}

// checkURLs refuses, in etcd's words, a URL flag etcd would refuse (one without a scheme, say).
func (do devOptions) checkURLs() error {
	for flagName, urls := range map[string][]string{"--listen-client-urls": do.clientURLs,
		"--advertise-client-urls": do.advertiseURLs, "--listen-peer-urls": do.peerURLs} {
		for _, u := range urls {
			if err := config.CheckEtcdURL(u); err != nil {
				return fmt.Errorf("%s: %w", flagName, err)
			}
		}
	}
	return nil
}

// devStack is what `cairn dev` runs: the components start in order, each seeing what the earlier ones serve,
// and stop in reverse order. Every loopback port is bound before the component that serves it is built, so
// no port is picked free and bound later; every service reports to the process's one registry, which the
// frontend serves on the client URLs and on --listen-metrics-urls.
type devStack struct {
	relaySecret  string // the frontend's, watchhub's and leasekeeper's (package relayauth)
	do           devOptions
	proc         *process
	peer         *tlsconfig.Link            // the raft peer port's TLS (nil: plain)
	links        map[string]*tlsconfig.Link // --tls: each component's internal link
	clientFiles  tlsconfig.Files            // --tls: the certificate issued for clients
	natsURL      string
	natsSeeds    string       // the bus's role nkeys (unless --tls's certificates prove the roles): SeedFile(natsSeeds, role)
	storageLis   net.Listener // bound before consensus starts: consensus names it as its snapshots' source
	storageURL   string
	node         *consensus.Node
	consensusURL string
	leaseURL     string
	watchURL     string
	keyring      *seal.Keyring // the storage's and the watchhub's; nil without --encryption-config
	stops        []func(context.Context) error
}

// devComponents start the components of `cairn dev`, in order. A new service is one more line here (and
// its endpoint in the frontend's configuration).
func devComponents() []func(ctx context.Context, d *devStack) error {
	return []func(ctx context.Context, d *devStack) error{
		startDevNATS,
		startDevConsensus,
		startDevStorage,
		startDevLeasekeeper,
		startDevWatchhub,
		startDevFrontend,
	}
}

func runDev(ctx context.Context, do devOptions, opts processOptions) error {
	proc, err := newProcess(ctx, "dev", do.name, opts)
	if err != nil {
		return err
	}
	if err := restoreDevDataDir(ctx, do, proc.logger); err != nil {
		proc.close(context.WithoutCancel(ctx))
		return err
	}
	lock, err := lockDataDir(do.dataDir, "cairn dev", datadir.Member)
	if err != nil {
		proc.close(context.WithoutCancel(ctx))
		return err
	}
	defer lock.Release()
	d := &devStack{do: do, proc: proc}
	if d.relaySecret, err = relayauth.NewSecret(); err != nil {
		proc.close(context.WithoutCancel(ctx))
		return err
	}
	if d.keyring, err = do.encryption.load(ctx, proc.logger); err != nil {
		proc.close(context.WithoutCancel(ctx))
		return err
	}
	d.stops = append(d.stops, func(context.Context) error { return d.keyring.Close() }) // last to stop
	if d.peer, err = proc.link(tlsconfig.KindPeer, do.peerTLS); err == nil {
		err = setUpDevTLS(d, do.clientURLsSet)
	}
	if err != nil {
		proc.close(context.WithoutCancel(ctx))
		return err
	}
	if len(d.do.advertiseURLs) == 0 {
		d.do.advertiseURLs = d.do.clientURLs
	}
	for _, start := range devComponents() {
		if err := start(ctx, d); err != nil {
			_ = d.stop(context.WithoutCancel(ctx))
			proc.close(context.WithoutCancel(ctx))
			return err
		}
	}
	if flags := d.etcdctlFlags(); flags != "" {
		fmt.Fprintf(os.Stdout, "cairn dev: every link is mutual TLS; etcdctl flags: %s\n", flags)
	}
	do = d.do
	proc.logger.Info("cairn dev is ready", "client-urls", do.advertiseURLs, "data-dir", do.dataDir,
		"nats-url", d.natsURL, "consensus-url", d.consensusURL, "storage-url", d.storageURL)
	return proc.waitForStop(ctx, d.node.Done(), d.node.Err, d.stop)
}

// stop stops what was started, last first.
func (d *devStack) stop(ctx context.Context) error {
	var errs []error
	for i := len(d.stops) - 1; i >= 0; i-- {
		errs = append(errs, d.stops[i](ctx))
	}
	return errors.Join(errs...)
}

// listen binds a listener for a component before it is built; it is closed with the stack unless a
// component took it (a service closes its listeners when it stops; closing twice is harmless).
func (d *devStack) listen(what, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener on %s: %w", what, addr, err)
	}
	d.stops = append(d.stops, func(context.Context) error {
		if err := lis.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	return lis, nil
}

// startDevNATS runs the embedded NATS, locked down as `cairn up`'s: with --tls, role certificates prove each
// component's role; otherwise role nkeys kept in DATA-DIR/nats do (over TLS when --internal-* are given).
func startDevNATS(_ context.Context, d *devStack) error {
	proc := d.component("nats")
	cfg := eventbus.EmbeddedConfig{Host: "127.0.0.1", Port: -1, TLS: proc.internal, Logger: proc.logger,
		Registry: proc.registry}
	if d.links == nil {
		d.natsSeeds = filepath.Join(d.do.dataDir, "nats")
		keys, err := eventbus.LoadOrCreateRoleKeys(d.natsSeeds)
		if err != nil {
			return err
		}
		cfg.RoleKeys = keys
	}
	bus, err := eventbus.StartEmbedded(cfg)
	if err != nil {
		return err
	}
	d.natsURL = bus.ClientURL()
	d.stops = append(d.stops, func(context.Context) error { bus.Shutdown(); return nil })
	return nil
}

// seedFile is the nkey seed the component of role proves it on the bus with ("" when certificates do).
func (d *devStack) seedFile(role string) string {
	if d.natsSeeds == "" {
		return ""
	}
	return eventbus.SeedFile(d.natsSeeds, role)
}

// startDevConsensus starts the single consensus member, serving its Consensus API on a loopback port of its
// own (the frontend uses it as it would a remote member's).
func startDevConsensus(ctx context.Context, d *devStack) error {
	storageLis, err := d.listen("storage", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.storageLis, d.storageURL = storageLis, "http://"+storageLis.Addr().String()
	apiLis, err := d.listen("consensus API", "127.0.0.1:0")
	if err != nil {
		return err
	}
	proc := d.component("consensus")
	cfg := consensus.DefaultConfig()
	cfg.Name, cfg.DataDir = d.do.name, filepath.Join(d.do.dataDir, "consensus")
	cfg.ListenPeerURLs, cfg.InitialAdvertisePeerURLs = d.do.peerURLs, d.do.peerURLs
	cfg.InitialCluster = initialCluster(d.do.name, d.do.peerURLs)
	cfg.AdvertiseClientURLs, cfg.AdvertiseStorageURL = d.do.advertiseURLs, d.storageURL
	cfg.MaxRequestBytes = d.do.maxRequestBytes
	cfg.HeartbeatInterval, cfg.ElectionTimeout = d.do.raft.heartbeat(), d.do.raft.election()
	cfg.SnapshotCount = d.do.raft.snapshotCount
	cfg.ListenConsensusURL = ""
	node, err := consensus.New(cfg, consensus.Deps{Logger: proc.logger, Telemetry: proc.telemetry,
		Registry: proc.registry, ConsensusListener: apiLis, Peer: d.peer, Internal: proc.internal})
	if err == nil {
		err = node.Start(ctx)
	}
	if err != nil {
		return err
	}
	d.node, d.consensusURL = node, "http://"+apiLis.Addr().String()
	d.stops = append(d.stops, node.Stop)
	// As `cairn up` orders its children, the storage and the frontend start once the member leads and has
	// published itself, so the frontend's first view of the cluster is the current one.
	return waitHealthy(ctx, "consensus", node.Health)
}

// waitHealthy polls health until it passes or ctx ends.
func waitHealthy(ctx context.Context, what string, health obs.HealthFunc) error {
	for {
		err := health(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to become healthy: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startDevStorage starts the member's storage on the in-process consensus node as its log, publishing its
// applied records on the embedded NATS.
func startDevStorage(ctx context.Context, d *devStack) error {
	proc := d.component("storage")
	cfg := storage.Config{DataDir: filepath.Join(d.do.dataDir, "storage"), ListenURL: d.storageURL,
		QuotaBackendBytes: d.do.quotaBackendBytes, MaxRequestBytes: d.do.maxRequestBytes, MaxTxnOps: d.do.maxTxnOps}
	cfg.SetIntegrity(d.do.integrity)
	member, err := storage.Assemble(ctx, cfg, storage.Deps{Logger: proc.logger, Telemetry: proc.telemetry,
		Registry: proc.registry, Listener: d.storageLis, Log: d.node, Keyring: d.keyring, Internal: proc.internal}, storage.Bus{NATSURL: d.natsURL, NkeySeedFile: d.seedFile(eventbus.RoleStorage)})
	if err == nil {
		err = member.Start(ctx)
	}
	if err != nil {
		return err
	}
	d.stops = append(d.stops, member.Stop)
	return nil
}

// startDevLeasekeeper runs the one leasekeeper on the member's storage and the embedded NATS, and waits until it
// is active (at once on a fresh data dir or after a clean stop; after a crash, once the old claim times out).
func startDevLeasekeeper(ctx context.Context, d *devStack) error {
	lis, err := d.listen("leasekeeper", "127.0.0.1:0")
	if err != nil {
		return err
	}
	proc := d.component("leasekeeper")
	// Its own URL as its one peer: the claim is held without log writes (an idle dev stack writes nothing).
	listenURL := "http://" + lis.Addr().String()
	cfg := leasekeeper.Config{Name: d.do.name, ListenURL: listenURL, PeerURLs: []string{listenURL},
		StorageEndpoints: []string{d.storageURL}, NATSURL: d.natsURL, NATSNkeySeedFile: d.seedFile(eventbus.RoleLeasekeeper),
		SecretConfig: relayauth.SecretConfig{RelaySecret: d.relaySecret}}
	k, err := leasekeeper.New(cfg, leasekeeper.Deps{Logger: proc.logger, Telemetry: proc.telemetry,
		Registry: proc.registry, Listener: lis, Internal: proc.internal})
	if err != nil {
		return err
	}
	if err := k.Start(ctx); err != nil {
		return err
	}
	d.leaseURL = k.URL()
	d.stops = append(d.stops, k.Stop)
	return waitHealthy(ctx, "leasekeeper", func(context.Context) error {
		if !k.Active() {
			return errors.New("not the active leasekeeper yet")
		}
		return nil
	})
}

// startDevWatchhub runs the watchhub on the member's storage and the embedded NATS, on a loopback port of its
// own; the frontend relays Watch streams to it.
func startDevWatchhub(ctx context.Context, d *devStack) error {
	lis, err := d.listen("watchhub", "127.0.0.1:0")
	if err != nil {
		return err
	}
	proc := d.component("watchhub")
	cfg := watchhub.Config{ListenURL: "http://" + lis.Addr().String(), StorageEndpoints: []string{d.storageURL},
		NATSURL: d.natsURL, NATSNkeySeedFile: d.seedFile(eventbus.RoleWatchhub), MaxRequestBytes: d.do.maxRequestBytes,
		SecretConfig: relayauth.SecretConfig{RelaySecret: d.relaySecret}, MaxWatchLag: d.do.raft.maxWatchLag}
	hub, err := watchhub.New(cfg, watchhub.Deps{Logger: proc.logger, Telemetry: proc.telemetry,
		Registry: proc.registry, Listener: lis, Keyring: d.keyring, Internal: proc.internal})
	if err != nil {
		return err
	}
	if err := hub.Start(ctx); err != nil {
		return err
	}
	d.watchURL = hub.URL()
	d.stops = append(d.stops, hub.Stop)
	return waitHealthy(ctx, "watchhub", hub.Health)
}

// startDevFrontend serves etcd's API on the client URLs, in front of the member's consensus and storage. It is
// the one place that serves /metrics (the process's registry: every service's series), /health, /readyz and
// /livez, on the client URLs and on --listen-metrics-urls, as an etcd member serves them.
func startDevFrontend(ctx context.Context, d *devStack) error {
	proc := d.component("frontend")
	cfg := frontend.DefaultConfig()
	cfg.Name = d.do.name // the member of this name is the frontend's home member
	cfg.ListenClientURLs, cfg.AdvertiseClientURLs = d.do.clientURLs, d.do.advertiseURLs
	cfg.ListenMetricsURLs, cfg.EnablePprof = d.proc.opts.metricsURLs, d.proc.opts.enablePprof
	cfg.TLS, cfg.TLSPolicy = d.do.tls, d.proc.opts.tls.policy
	cfg.AuthToken, cfg.AuthTokenTTL, cfg.BcryptCost = d.do.authToken, d.do.authTokenTTL, d.do.bcryptCost
	cfg.ConsensusEndpoints, cfg.StorageEndpoints = []string{d.consensusURL}, []string{d.storageURL}
	cfg.LeaseEndpoints = []string{d.leaseURL}
	cfg.WatchEndpoints = []string{d.watchURL}
	cfg.RelaySecret = d.relaySecret
	cfg.MaxRequestBytes, cfg.MaxTxnOps = uint(d.do.maxRequestBytes), uint(d.do.maxTxnOps)
	cfg.LogLevel = d.proc.opts.logLevel
	deps := frontend.Deps{Logger: proc.logger, Telemetry: proc.telemetry, Registry: proc.registry, Internal: proc.internal}
	for _, u := range cfg.ListenClientURLs {
		addr, _, err := config.ClientHostPort(u)
		if err != nil {
			return fmt.Errorf("--listen-client-urls: %w", err)
		}
		lis, err := d.listen("client", addr)
		if err != nil {
			return err
		}
		deps.ClientListeners = append(deps.ClientListeners, lis)
	}
	for _, u := range cfg.ListenMetricsURLs {
		addr, err := config.HostPort(u)
		if err != nil {
			return fmt.Errorf("--listen-metrics-urls: %w", err)
		}
		lis, err := d.listen("metrics", addr)
		if err != nil {
			return err
		}
		deps.MetricsListeners = append(deps.MetricsListeners, lis)
	}
	fe, err := frontend.New(cfg, deps)
	if err != nil {
		return err
	}
	if err := fe.Start(ctx); err != nil {
		return err
	}
	d.stops = append(d.stops, fe.Stop)
	return nil
}

// initialCluster is --initial-cluster for a one-member cluster.
func initialCluster(name string, peerURLs []string) string {
	parts := make([]string, len(peerURLs))
	for i, u := range peerURLs {
		parts[i] = name + "=" + u
	}
	return strings.Join(parts, ",")
}
