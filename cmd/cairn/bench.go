package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/cairn-kv/cairn/internal/tools/bench"
)

// benchOptions holds the flags shared by every `cairn bench` subcommand (etcd's benchmark global flags).
type benchOptions struct {
	endpoints      []string
	targetLeader   bool
	tls            transport.TLSInfo // --cacert, --cert, --key
	conns          int
	clients        int
	total          int64
	duration       time.Duration
	rate           float64
	precise        bool
	output         string
	dialTimeout    time.Duration
	requestTimeout time.Duration
	user           string // USER:PASSWORD
	trace          benchTraceOptions
	cpuProfile     string // file for a CPU profile of the bench's own process
}

func newBenchCommand() *cobra.Command {
	opts := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark an etcd-compatible cluster (Cairn or etcd), like etcd's benchmark tool",
		Example: "  cairn bench --endpoints=127.0.0.1:2379 --conns=100 --clients=1000 put --key-size=8 --sequential-keys --total=100000 --val-size=256\n" +
			"  cairn bench --conns=100 --clients=1000 range foo --consistency=s --total=100000 --output=json",
	}
	flags := cmd.PersistentFlags()
	flags.StringSliceVar(&opts.endpoints, "endpoints", []string{"127.0.0.1:2379"}, "gRPC endpoints")
	flags.StringVar(&opts.tls.TrustedCAFile, "cacert", "", "verify certificates of HTTPS-enabled servers using this CA bundle")
	flags.StringVar(&opts.tls.CertFile, "cert", "", "identify HTTPS client using this SSL certificate file")
	flags.StringVar(&opts.tls.KeyFile, "key", "", "identify HTTPS client using this SSL key file")
	flags.BoolVar(&opts.targetLeader, "target-leader", false, "connect only to the leader (its client URLs in the member list)")
	flags.IntVar(&opts.conns, "conns", 1, "Total number of gRPC connections")
	flags.IntVar(&opts.clients, "clients", 1, "Total number of gRPC clients")
	flags.Int64Var(&opts.total, "total", 10000, "Total number of requests")
	flags.DurationVar(&opts.duration, "duration", 0, "Stop issuing requests after this long; alone (without --total) it is the only bound")
	flags.Float64Var(&opts.rate, "rate", 0, "Maximum requests per second (0 is no limit)")
	flags.BoolVar(&opts.precise, "precise", false, "use full floating point precision")
	flags.StringVar(&opts.output, "output", "text", "Summary format: text (etcd's layout) or json (one object)")
	flags.DurationVar(&opts.dialTimeout, "dial-timeout", 5*time.Second, "dial timeout for client connections")
	flags.DurationVar(&opts.requestTimeout, "request-timeout", 30*time.Second, "timeout of each request (counted as an error)")
	flags.StringVar(&opts.user, "user", "", "username:password to authenticate every connection with (auth enabled)")
	opts.trace.register(flags)
	flags.StringVar(&opts.cpuProfile, "cpu-profile", "", "Write a CPU profile of this process (the load generator) over the run to this file (go tool pprof)")
	cmd.AddCommand(
		newBenchPutCommand(opts),
		newBenchRangeCommand(opts),
		newBenchTxnPutCommand(opts),
		newBenchLeaseKeepAliveCommand(opts),
		newBenchLeaseGrantRevokeCommand(opts),
		newBenchWatchCommand(opts),
		newBenchWatchLatencyCommand(opts),
		newBenchCompareCommand(opts),
		newBenchEtcdClusterCommand(),
	)
	return cmd
}

// runnerConfig turns the shared flags into a RunnerConfig. --duration given without --total bounds the run
// by time alone; given both, whichever comes first ends it.
func (o *benchOptions) runnerConfig(cmd *cobra.Command) (bench.RunnerConfig, error) {
	if o.output != "text" && o.output != "json" {
		return bench.RunnerConfig{}, fmt.Errorf("--output must be text or json, got %q", o.output)
	}
	var clientTLS *tls.Config
	if !o.tls.Empty() || o.tls.TrustedCAFile != "" { // as etcd's benchmark decides
		var err error
		if clientTLS, err = o.tls.ClientConfig(); err != nil {
			return bench.RunnerConfig{}, fmt.Errorf("--cacert, --cert, --key: %w", err)
		}
	}
	username, password, hasPassword := strings.Cut(o.user, ":")
	if o.user != "" && !hasPassword {
		return bench.RunnerConfig{}, fmt.Errorf("--user must be USER:PASSWORD, got %q", o.user)
	}
	total := o.total
	if o.duration > 0 && !cmd.Flags().Changed("total") {
		total = 0
	}
	return bench.RunnerConfig{
		Endpoints:      o.endpoints,
		TargetLeader:   o.targetLeader,
		TLS:            clientTLS,
		Username:       username,
		Password:       password,
		Conns:          o.conns,
		Clients:        o.clients,
		Total:          total,
		Duration:       o.duration,
		Rate:           o.rate,
		DialTimeout:    o.dialTimeout,
		RequestTimeout: o.requestTimeout,
		Progress:       cmd.ErrOrStderr(),
	}, nil
}

// runBenchmark runs op with the shared flags and prints the summary; params describe the op's own flags.
func (o *benchOptions) runBenchmark(cmd *cobra.Command, name string, op bench.Op, params map[string]string) error {
	cfg, err := o.runnerConfig(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	runner, tracing, end, err := o.startRunner(cmd, cfg)
	if err != nil {
		return err
	}
	defer end()
	summary, runErr := runner.Run(ctx, name, op)
	for key, value := range params {
		summary.Params[key] = value
	}
	if err := o.printSummary(cmd, summary); err != nil {
		return err
	}
	if err := tracing.writeReport(ctx, o.traceOutput(cmd)); err != nil {
		return err
	}
	return runErr
}

// startRunner makes a runner of cfg and starts it, after the run's tracing (--trace) and once the stack's
// tracing is ready, and starts the CPU profile (--cpu-profile); end stops the profile, the runner and then the
// tracing.
func (o *benchOptions) startRunner(cmd *cobra.Command, cfg bench.RunnerConfig) (runner *bench.Runner, tracing *benchTrace, end func(), err error) {
	runner, err = bench.NewRunner(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	stopProfile, err := o.startCPUProfile()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx := cmd.Context()
	tracing, err = startBenchTrace(ctx, o.trace, cmd.ErrOrStderr())
	if err != nil {
		stopProfile()
		return nil, nil, nil, err
	}
	tracing.awaitStack(ctx, cmd.ErrOrStderr())
	if err := runner.Start(ctx); err != nil {
		stopProfile()
		tracing.stop(ctx)
		return nil, nil, nil, err
	}
	return runner, tracing, func() {
		stopProfile()
		runner.Stop(ctx)
		tracing.stop(ctx)
	}, nil
}

// startCPUProfile starts profiling this process into --cpu-profile, if given; stop ends the profile and
// closes the file.
func (o *benchOptions) startCPUProfile() (stop func(), err error) {
	if o.cpuProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(o.cpuProfile)
	if err != nil {
		return nil, fmt.Errorf("bench: --cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench: --cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

func (o *benchOptions) printSummary(cmd *cobra.Command, summary bench.Summary) error {
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(summary)
	}
	return summary.WriteText(cmd.OutOrStdout(), o.precise)
}

func newBenchPutCommand(opts *benchOptions) *cobra.Command {
	var keys bench.KeySpace
	var valSize int
	cmd := &cobra.Command{
		Use:   "put",
		Short: "Benchmark put",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			op, err := bench.PutOp(bench.PutConfig{Keys: keys, ValSize: valSize})
			if err != nil {
				return err
			}
			return opts.runBenchmark(cmd, "put", op, map[string]string{
				"key_size": strconv.Itoa(keys.KeySize), "val_size": strconv.Itoa(valSize),
				"key_space_size": strconv.Itoa(keys.KeySpaceSize), "sequential_keys": strconv.FormatBool(keys.Sequential),
			})
		},
	}
	cmd.Flags().IntVar(&keys.KeySize, "key-size", 8, "Key size of put request")
	cmd.Flags().IntVar(&valSize, "val-size", 8, "Value size of put request")
	cmd.Flags().IntVar(&keys.KeySpaceSize, "key-space-size", 1, "Maximum possible keys")
	cmd.Flags().BoolVar(&keys.Sequential, "sequential-keys", false, "Use sequential keys")
	return cmd
}

func newBenchRangeCommand(opts *benchOptions) *cobra.Command {
	var cfg bench.RangeConfig
	cmd := &cobra.Command{
		Use:   "range KEY [END]",
		Short: "Benchmark range",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Key = args[0]
			if len(args) == 2 {
				cfg.End = args[1]
			}
			op, err := bench.RangeOp(cfg)
			if err != nil {
				return err
			}
			return opts.runBenchmark(cmd, "range", op, map[string]string{
				"key": cfg.Key, "end": cfg.End, "consistency": cfg.Consistency,
				"limit": strconv.FormatInt(cfg.Limit, 10), "count_only": strconv.FormatBool(cfg.CountOnly),
			})
		},
	}
	cmd.Flags().StringVar(&cfg.Consistency, "consistency", "l", "Linearizable(l) or Serializable(s)")
	cmd.Flags().Int64Var(&cfg.Limit, "limit", 0, "Maximum number of results to return from range request (0 is no limit)")
	cmd.Flags().BoolVar(&cfg.CountOnly, "count-only", false, "Only returns the count of keys")
	return cmd
}

func newBenchTxnPutCommand(opts *benchOptions) *cobra.Command {
	var cfg bench.TxnPutConfig
	cmd := &cobra.Command{
		Use:   "txn-put",
		Short: "Benchmark txn-put: transactions of --txn-ops puts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			op, err := bench.TxnPutOp(cfg)
			if err != nil {
				return err
			}
			return opts.runBenchmark(cmd, "txn-put", op, map[string]string{
				"key_size": strconv.Itoa(cfg.KeySize), "val_size": strconv.Itoa(cfg.ValSize),
				"key_space_size": strconv.Itoa(cfg.KeySpaceSize), "txn_ops": strconv.Itoa(cfg.OpsPerTxn),
			})
		},
	}
	cmd.Flags().IntVar(&cfg.KeySize, "key-size", 8, "Key size of txn put")
	cmd.Flags().IntVar(&cfg.ValSize, "val-size", 8, "Value size of txn put")
	cmd.Flags().IntVar(&cfg.KeySpaceSize, "key-space-size", 1, "Maximum possible keys")
	cmd.Flags().IntVar(&cfg.OpsPerTxn, "txn-ops", 1, "Number of puts per txn")
	return cmd
}
