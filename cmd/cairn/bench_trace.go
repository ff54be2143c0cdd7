package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairn-kv/cairn/internal/tools/localstack"
	"github.com/cairn-kv/cairn/internal/tools/traceview"
)

// benchTraceOptions are `cairn bench --trace`'s flags.
type benchTraceOptions struct {
	enabled bool
	listen  string
	settle  time.Duration
	connect time.Duration
	html    string
}

func (o *benchTraceOptions) register(flags *pflag.FlagSet) {
	flags.BoolVar(&o.enabled, "trace", false, "Receive the benchmarked stack's traces in a built-in OTLP receiver and print where the time went under the summary "+
		"(the stack must export to --trace-listen: a stack the benchmark starts does, an external one needs OTEL_EXPORTER_OTLP_ENDPOINT)")
	flags.StringVar(&o.listen, "trace-listen", "http://127.0.0.1:4317", "OTLP/gRPC address of the built-in receiver of --trace")
	flags.DurationVar(&o.settle, "trace-settle", 6*time.Second, "With --trace, wait after the run until no span of the run has arrived for this long (the exporters send every 5s)")
	flags.DurationVar(&o.connect, "trace-connect-wait", 30*time.Second, "With --trace, wait this long at most for the stack's first spans before the run "+
		"(its exporters reconnect with a backoff; its background calls send spans all the time)")
	flags.StringVar(&o.html, "trace-html", "", "With --trace, also write the page of the breakdown to this file")
}

// maxSettle bounds the wait for a run's spans, however long they keep trickling in.
const maxSettle = time.Minute

// benchTrace is the built-in receiver of one traced benchmark.
type benchTrace struct {
	opts     benchTraceOptions
	receiver *traceview.Receiver
	endpoint string
	from     time.Time
}

// startBenchTrace starts the built-in receiver when --trace is given (nil otherwise) and says on log what the
// stack must export to.
func startBenchTrace(ctx context.Context, opts benchTraceOptions, log io.Writer) (*benchTrace, error) {
	if !opts.enabled {
		return nil, nil
	}
	lis, err := listenURL("--trace-listen", opts.listen)
	if err != nil {
		return nil, err
	}
	receiver, err := traceview.New(traceview.Config{GRPCListener: lis, Slowest: 5},
		traceview.Deps{Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err == nil {
		err = receiver.Start(ctx)
	}
	if err != nil {
		closeListener(lis)
		return nil, err
	}
	t := &benchTrace{opts: opts, receiver: receiver, endpoint: "http://" + lis.Addr().String()}
	fmt.Fprintf(log, "tracing: receiving OTLP on %s; the stack must export there (OTEL_EXPORTER_OTLP_ENDPOINT=%s OTEL_EXPORTER_OTLP_INSECURE=true, "+
		"and OTEL_BSP_MAX_QUEUE_SIZE=65536 so that many clients' spans are not dropped)\n", t.endpoint, t.endpoint)
	t.from = time.Now()
	return t, nil
}

// awaitStack waits (up to --trace-connect-wait) for the first spans of a stack that is already running, so
// that the run's spans are not lost while its exporters reconnect; a stack the benchmark starts itself
// connects as it starts.
func (t *benchTrace) awaitStack(ctx context.Context, log io.Writer) {
	if t == nil || t.opts.connect <= 0 {
		return
	}
	deadline := time.NewTimer(t.opts.connect)
	defer deadline.Stop()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for t.receiver.Store().Stats().Received == 0 {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			fmt.Fprintf(log, "tracing: no span from the stack after %v; running anyway\n", t.opts.connect)
			return
		case <-ticker.C:
		}
	}
	t.from = time.Now()
}

// childEnv is what a stack the benchmark starts needs to export to the receiver.
func (t *benchTrace) childEnv() []string {
	if t == nil {
		return nil
	}
	return append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + t.endpoint, "OTEL_EXPORTER_OTLP_INSECURE=true"}, localstack.TraceQueueEnv...)
}

// report waits for the spans of the requests sent since the last report to settle and analyses them.
func (t *benchTrace) report(ctx context.Context) *traceview.Report {
	to := time.Now()
	store := t.receiver.Store()
	last, quietSince := store.StartedBefore(to), time.Now()
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	for time.Since(quietSince) < t.opts.settle && time.Since(to) < maxSettle {
		select {
		case <-ctx.Done():
			return traceview.Analyze(nil, traceview.Options{})
		case <-ticker.C:
		}
		if n := store.StartedBefore(to); n != last {
			last, quietSince = n, time.Now()
		}
	}
	report := traceview.Analyze(t.receiver.Store().Traces(), traceview.Options{Slowest: 5, From: t.from, To: to, ClientRequests: true})
	t.from = time.Now()
	return report
}

// writeReport writes where the time went to w (and the page to --trace-html).
func (t *benchTrace) writeReport(ctx context.Context, w io.Writer) error {
	if t == nil {
		return nil
	}
	report := t.report(ctx)
	if report.Traces == 0 {
		fmt.Fprintf(w, "\nWhere the time went: no traces arrived at %s; start the stack with OTEL_EXPORTER_OTLP_ENDPOINT=%s OTEL_EXPORTER_OTLP_INSECURE=true\n",
			t.endpoint, t.endpoint)
		return nil
	}
	fmt.Fprintf(w, "\nWhere the time went (%d traced requests):\n", report.Traces)
	if err := report.WriteText(w); err != nil {
		return err
	}
	if t.opts.html != "" {
		if err := writePageFile(t.opts.html, report, t.receiver.PageInfo()); err != nil {
			return err
		}
		fmt.Fprintf(w, "page written to %s\n", t.opts.html)
	}
	return nil
}

// stop stops the receiver.
func (t *benchTrace) stop(ctx context.Context) {
	if t != nil {
		_ = t.receiver.Stop(context.WithoutCancel(ctx))
	}
}

// traceOutput is where the breakdown goes: under the summary on stdout, or on stderr when stdout is JSON.
func (o *benchOptions) traceOutput(cmd *cobra.Command) io.Writer {
	if o.output == "json" {
		return cmd.ErrOrStderr()
	}
	return cmd.OutOrStdout()
}
