package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/tools/bench"
)

// watchFlags are the flags of the watch benchmarks besides the shared ones.
type watchFlags struct {
	cfg          bench.WatchConfig
	watchURLs    []string
	memoryURLs   []string
	eventTimeout time.Duration
}

func (f *watchFlags) register(cmd *cobra.Command, perStreamFlag string, perStreamDefault int) {
	flags := cmd.Flags()
	flags.IntVar(&f.cfg.Streams, "streams", 10, "Total watch streams")
	flags.IntVar(&f.cfg.WatchersPerStream, perStreamFlag, perStreamDefault, "Total watchers per stream")
	flags.IntVar(&f.cfg.Keys.KeySize, "key-size", 32, "Key size of watch and put requests")
	flags.IntVar(&f.cfg.ValSize, "val-size", 32, "Value size of put requests (at least 16: it carries the put's time)")
	flags.BoolVar(&f.cfg.PrevKV, "prevkv", false, "PrevKV enabled on watch requests")
	flags.StringSliceVar(&f.watchURLs, "watch-endpoints", nil, "Open the watch streams here (e.g. watchhubs) instead of on --endpoints")
	flags.IntVar(&f.cfg.WatchConns, "watch-conns", 1, "Connections to each of --watch-endpoints; the streams take them in turn")
	flags.StringSliceVar(&f.memoryURLs, "memory-metrics-urls", nil, "/metrics URLs of the servers holding the watchers, for heap bytes per watcher (with --enable-pprof on them, a GC runs first)")
	flags.DurationVar(&f.eventTimeout, "event-timeout", time.Minute, "How long to wait for the last events after the puts")
}

func newBenchWatchCommand(opts *benchOptions) *cobra.Command {
	var f watchFlags
	cmd := &cobra.Command{
		Use: "watch",
		Short: "Benchmark watch: --streams × --watch-per-stream watchers on --watched-key-total keys, --total puts at " +
			"--rate; event latency (put issued → event received), events/s, heap per watcher",
		Example: "  cairn bench --endpoints=127.0.0.1:2379 --total=200 --rate=20 watch --streams=10 --watch-per-stream=1000 " +
			"--memory-metrics-urls=http://127.0.0.1:23801/metrics",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return opts.runWatchBenchmark(cmd, "watch", f, nil) },
	}
	f.register(cmd, "watch-per-stream", 100)
	cmd.Flags().IntVar(&f.cfg.Keys.KeySpaceSize, "watched-key-total", 1, "Total number of keys to be watched")
	return cmd
}

// newBenchWatchLatencyCommand is etcd's watch-latency: every watcher on one key, --put-total puts at
// --put-rate.
func newBenchWatchLatencyCommand(opts *benchOptions) *cobra.Command {
	var f watchFlags
	var putTotal int64
	var putRate float64
	cmd := &cobra.Command{
		Use:   "watch-latency",
		Short: "Benchmark watch latency: --streams × --watchers-per-stream watchers on one key, --put-total puts at --put-rate",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.cfg.Keys.KeySpaceSize = 1
			return opts.runWatchBenchmark(cmd, "watch-latency", f, func(cfg *bench.RunnerConfig) {
				cfg.Total, cfg.Rate = putTotal, putRate
			})
		},
	}
	f.register(cmd, "watchers-per-stream", 10)
	cmd.Flags().Int64Var(&putTotal, "put-total", 1000, "Total number of put requests")
	cmd.Flags().Float64Var(&putRate, "put-rate", 100, "Number of keys to put per second")
	return cmd
}

// runWatchBenchmark creates the watchers, drives the puts, waits for every event and prints the summary of
// event latencies with the watch figures.
func (o *benchOptions) runWatchBenchmark(cmd *cobra.Command, name string, f watchFlags, adjust func(*bench.RunnerConfig)) error {
	cfg, err := o.runnerConfig(cmd)
	if err != nil {
		return err
	}
	if adjust != nil {
		adjust(&cfg)
	}
	f.cfg.WatchEndpoints, f.cfg.MemoryURLs, f.cfg.EventTimeout, f.cfg.Keys.Sequential = f.watchURLs, f.memoryURLs, f.eventTimeout, true
	wb, err := bench.NewWatchBench(name, f.cfg)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	runner, tracing, end, err := o.startRunner(cmd, cfg)
	if err != nil {
		return err
	}
	defer end()
	defer wb.Close()
	if err := wb.Open(ctx, runner); err != nil {
		return err
	}
	began := time.Now()
	if _, err := runner.Drive(ctx, wb.Report(), wb.Op()); err != nil {
		return err
	}
	stats, finishErr := wb.Finish(ctx)
	summary := wb.Report().Summary(time.Since(began))
	summary.Params = runner.Config().Params()
	for k, v := range stats.Params() {
		summary.Params[k] = v
	}
	summary.Params["prevkv"] = strconv.FormatBool(f.cfg.PrevKV)
	summary.Params["watched_keys"] = strconv.Itoa(f.cfg.Keys.KeySpaceSize)
	if err := o.printSummary(cmd, summary); err != nil {
		return err
	}
	if o.output == "text" {
		fmt.Fprintf(cmd.OutOrStdout(), "\nWatch:\n  Watchers:\t%d on %d streams (created in %.2f secs).\n"+
			"  Events:\t%d of %d received, %.0f events/sec.\n", stats.Watchers, stats.Streams, stats.CreateSec,
			stats.ReceivedEvents, stats.ExpectedEvents, stats.EventsPerSec)
		if stats.CanceledWatchers > 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "  Canceled:\t%d watchers by the server (their later events not waited for).\n",
				stats.CanceledWatchers)
		}
		if stats.HeapBytesPerWatcher >= 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "  Heap:\t%.0f bytes per watcher (%s).\n", stats.HeapBytesPerWatcher,
				strings.Join(f.memoryURLs, ","))
		}
	}
	if err := tracing.writeReport(ctx, o.traceOutput(cmd)); err != nil {
		return err
	}
	return finishErr
}
