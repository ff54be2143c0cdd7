package main

import (
	"context"
	goflag "flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/datadir"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/tools/localstack"
	"github.com/cairn-kv/cairn/services/storage"
)

// defaultChildMemoryLimitMiB is every child's soft memory limit: under etcd's KV benchmark it holds a stack to
// about 1.5x a 3-member etcd's memory, at no more CPU per request than 32 MiB took before the put path's
// collections were halved (the README's Benchmarks section has the figures); 32 MiB holds about a third more
// memory for less collector CPU. A child whose live heap outgrows it raises it (internal/gctune).
const defaultChildMemoryLimitMiB = 20

func newUpCommand() *cobra.Command {
	var cfg localstack.Config
	var enc encryptionFlag
	var integrity storage.Config // --auto-compaction-* and the corruption checks, passed to every storage
	var tuning etcdTuning
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a local multi-process Cairn cluster: NATS, 3 members (consensus + storage), 2 leasekeepers, 2 watchhubs and the frontends",
		Long: "Starts every Cairn service as its own child process of this binary on loopback, each after what it " +
			"needs is healthy; prints the client endpoint and every process (pid, ports, log file), writes the same " +
			"to DATA-DIR/stack.json, restarts a child that dies, and stops everything on SIGINT or SIGTERM. " +
			"The data, and the ports chosen on the first run, are kept in --data-dir for the next run.",
		Example: "  cairn up\n  cairn up --data-dir /tmp/cairn-up --members 5 --client-port 12379\n" +
			"  etcdctl --endpoints http://127.0.0.1:2379 put foo bar",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd, cfg, enc, integrity, &tuning) },
	}
	flags := cmd.Flags()
	flags.StringVar(&cfg.DataDir, "data-dir", "up.cairn", "Directory for the members' data, the logs, layout.json and stack.json.")
	flags.IntVar(&cfg.Members, "members", 0, "Number of members (consensus + storage); default 3 for a new data dir, else what it holds.")
	flags.IntVar(&cfg.Leasekeepers, "leasekeepers", 2, "Number of leasekeepers (the first to claim is active, the others stand by).")
	flags.IntVar(&cfg.Watchhubs, "watchhubs", 2, "Number of watchhubs (the frontends spread Watch streams over them).")
	flags.IntVar(&cfg.Frontends, "frontends", 0, "Number of frontends side by side; default one per member, named after it (its etcd endpoint).")
	flags.IntVar(&cfg.ClientPort, "client-port", 2379, "Client port of the first frontend; the others get free ports, kept in --data-dir.")
	flags.StringVar(&cfg.LogLevel, "log-level", "info", "--log-level of every service.")
	flags.BoolVar(&cfg.EnablePprof, "enable-pprof", false, "Serve /debug/pprof on every service's metrics port (without it no child samples a heap profile: GODEBUG memprofilerate=0).")
	flags.StringVar(&cfg.TraceSampleRatio, "trace-sample-ratio", "", "--trace-sample-ratio of every child (0 to 1, parent-based; overrides OTEL_TRACES_SAMPLER).")
	flags.IntVar(&cfg.ChildGOMAXPROCS, "child-gomaxprocs", 0, "GOMAXPROCS of every child; 0: $GOMAXPROCS if set, else max(1, cores/4) (the children share this machine's cores).")
	flags.IntVar(&cfg.ChildMemoryLimitMiB, "child-memory-limit-mib", defaultChildMemoryLimitMiB, "--memory-limit-mib of every child but the watchhubs and the trace child (70% of it for the consensus members): a soft limit on each process's memory, raised while its live heap needs more (0: none; a GOMEMLIMIT environment variable overrides it).")
	flags.StringVar(&cfg.FromSnapshot, "from-snapshot", "", "Restore this snapshot (etcdctl snapshot save of Cairn or etcd) into every member of a new --data-dir, then start.")
	flags.StringVar(&cfg.BackupDir, "backup-dir", "", "Run a cairn backup child keeping verified snapshots in this directory.")
	flags.DurationVar(&cfg.BackupInterval, "backup-interval", 30*time.Minute, "Time between backups with --backup-dir.")
	flags.IntVar(&cfg.BackupKeep, "backup-keep", 48, "Snapshots kept with --backup-dir.")
	enc.register(flags) // passed to every storage and watchhub
	flags.BoolVar(&cfg.TLS, "tls", false, "Run every link with mutual TLS and the client ports with TLS, on a CA and per-process certificates created in --data-dir/pki (kept across restarts; chosen on the data dir's first run).")
	flags.BoolVar(&cfg.Trace, "trace", false, "Run a cairn trace child and make every other child export its spans to it; prints the URL of its page (where the time went).")
	flags.StringVar(&cfg.TraceForward, "trace-forward-otlp", "", "With --trace, the trace child's --forward-otlp (grpc://host:port or http://host:port): keep Jaeger or Tempo too.")
	flags.StringVar(&cfg.AuthToken, "auth-token", "", "Every frontend's --auth-token (simple, or jwt,pub-key=...,priv-key=...,sign-method=...).")
	tlsFlags := goflag.NewFlagSet("tls", goflag.ContinueOnError)
	cfg.ClientTLS.RegisterFlags(tlsFlags) // given a certificate, every frontend serves https
	flags.AddGoFlagSet(tlsFlags)
	integrityFlags := goflag.NewFlagSet("integrity", goflag.ContinueOnError)
	integrity.RegisterIntegrityFlags(integrityFlags)
	flags.AddGoFlagSet(integrityFlags)
	tuning.registerRaft(flags) // etcd's flags, passed to the members' processes
	tuning.registerAPI(flags)
	tuning.registerWatch(flags)
	cmd.AddCommand(newUpMemberCommand())
	return cmd
}

func runUp(cmd *cobra.Command, cfg localstack.Config, enc encryptionFlag, integrity storage.Config, tuning *etcdTuning) error {
	if err := tuning.validate(); err != nil {
		return err
	}
	binary, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locating the cairn binary: %w", err)
	}
	cfg.Binary = binary
	if cfg.BackupDir != "" {
		if cfg.BackupDir, err = filepath.Abs(cfg.BackupDir); err != nil {
			return err
		}
	}
	if cfg.ClientTLS, err = cfg.ClientTLS.Absolute(); err != nil {
		return err
	}
	encryptionConfig, err := enc.absolute()
	if err != nil {
		return err
	}
	if encryptionConfig != "" {
		// The storages seal, the watchhubs open the bus records: both need the file.
		args := []string{"--encryption-config", encryptionConfig}
		cfg.ExtraArgs = map[string][]string{"storage": args, "watchhub": args}
	}
	if args := integrity.IntegrityArgs(); len(args) > 0 {
		if cfg.ExtraArgs == nil {
			cfg.ExtraArgs = map[string][]string{}
		}
		cfg.ExtraArgs["storage"] = append(append([]string(nil), cfg.ExtraArgs["storage"]...), args...)
	}
	for svc, args := range tuning.childArgs(cmd.Flags()) {
		if cfg.ExtraArgs == nil {
			cfg.ExtraArgs = map[string][]string{}
		}
		cfg.ExtraArgs[svc] = append(append([]string(nil), cfg.ExtraArgs[svc]...), args...)
	}
	level, err := obs.ParseLevel(cfg.LogLevel)
	if err != nil {
		return err
	}
	cfg.Logger = obs.NewLogger(cmd.ErrOrStderr(), "up", "", level) // JSON, as every service logs
	lock, err := lockDataDir(cfg.DataDir, "cairn up", datadir.Stack)
	if err != nil {
		return err
	}
	defer lock.Release()
	stack, err := localstack.New(cfg)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if err := stack.Start(ctx); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "cairn is up: etcd client endpoints %s\n\n", strings.Join(stack.ClientEndpoints(), ","))
	if flags := stack.EtcdctlFlags(); flags != "" {
		fmt.Fprintf(out, "every link is mutual TLS; etcdctl flags: --endpoints %s %s\n\n", strings.Join(stack.ClientEndpoints(), ","), flags)
	}
	if url := stack.TraceURL(); url != "" {
		fmt.Fprintf(out, "every process exports its spans to the trace child; where the time went: %s (text: %sreport.txt)\n\n", url, url)
	}
	_ = stack.Status().WriteText(out)
	fmt.Fprintf(out, "\nstack description: %s\nCtrl-C stops every process; the data stays for the next `cairn up`.\n", stack.StackFile())
	<-ctx.Done()
	fmt.Fprintln(out, "stopping")
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*stopTimeout)
	defer cancel()
	return stack.Stop(stopCtx)
}
