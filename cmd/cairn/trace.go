package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/tools/traceview"
)

// traceOptions are `cairn trace`'s flags.
type traceOptions struct {
	process    processOptions
	grpcURL    string
	httpURL    string
	forwardURL string
	maxSpans   int
	slowest    int
	htmlFile   string
	live       time.Duration
	refresh    time.Duration
}

func newTraceCommand() *cobra.Command {
	opts := &traceOptions{}
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Receive OTLP traces from Cairn's services and show where each request's time went",
		Long: "Receives OTLP traces over gRPC (--listen-otlp-grpc) and HTTP (--listen-otlp-http, POST /v1/traces, " +
			"protobuf or JSON), keeps the newest --max-spans spans in memory, optionally forwards every export " +
			"unchanged to --forward-otlp (Jaeger, Tempo), and turns the spans into per-operation stage tables " +
			"(p50/p90/p99 and share of end-to-end time on the critical path), waterfalls of the median and slowest " +
			"trace, and the slowest traces: a page at the HTTP address's /, text at /report.txt, and both on exit " +
			"(text on stdout, the page in --html). Point the services at it with " +
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://GRPC-ADDR OTEL_EXPORTER_OTLP_INSECURE=true.",
		Example: "  cairn trace --forward-otlp grpc://127.0.0.1:14317\n" +
			"  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_EXPORTER_OTLP_INSECURE=true cairn up\n" +
			"  cairn trace report --html /tmp/traces.html",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTrace(cmd, opts) },
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.grpcURL, "listen-otlp-grpc", "http://127.0.0.1:4317", "URL to receive OTLP/gRPC on (empty: none).")
	flags.StringVar(&opts.httpURL, "listen-otlp-http", "http://127.0.0.1:4318", "URL to receive OTLP/HTTP on, and to serve the page (/) and /report.txt.")
	flags.StringVar(&opts.forwardURL, "forward-otlp", "", "Forward every export unchanged to this OTLP endpoint: grpc://host:port (grpcs:// for TLS) or http(s)://host:port[/v1/traces].")
	flags.IntVar(&opts.maxSpans, "max-spans", traceview.DefaultMaxSpans, "Spans kept in memory (about 300 bytes each); the oldest traces are evicted past it.")
	flags.IntVar(&opts.slowest, "slowest", 10, "Number of slowest traces to list.")
	flags.StringVar(&opts.htmlFile, "html", "", "Write the page to this file on exit.")
	flags.DurationVar(&opts.live, "live", 0, "Print the text report to stdout this often (0: only on exit).")
	flags.DurationVar(&opts.refresh, "page-refresh", 0, "Make the served page reload itself this often (0: never).")
	opts.process.register(flags, "")
	cmd.AddCommand(newTraceReportCommand())
	return cmd
}

func runTrace(cmd *cobra.Command, opts *traceOptions) error {
	ctx := cmd.Context()
	proc, err := newProcess(ctx, "trace", "", opts.process)
	if err != nil {
		return err
	}
	cfg := traceview.Config{ForwardURL: opts.forwardURL, MaxSpans: opts.maxSpans, Slowest: opts.slowest, PageRefresh: opts.refresh}
	if cfg.GRPCListener, err = listenURL("--listen-otlp-grpc", opts.grpcURL); err != nil {
		return err
	}
	if cfg.HTTPListener, err = listenURL("--listen-otlp-http", opts.httpURL); err != nil {
		closeListener(cfg.GRPCListener)
		return err
	}
	receiver, err := traceview.New(cfg, traceview.Deps{Logger: proc.logger})
	if err == nil {
		err = receiver.Start(ctx)
	}
	if err != nil {
		closeListener(cfg.GRPCListener)
		closeListener(cfg.HTTPListener)
		return err
	}
	if err := proc.serveAdmin(func(context.Context) error { return nil }); err != nil {
		_ = receiver.Stop(context.WithoutCancel(ctx))
		return err
	}
	out := cmd.OutOrStdout()
	printTraceEndpoints(out, cfg)
	liveDone := make(chan struct{})
	if opts.live > 0 {
		go func() {
			defer close(liveDone)
			liveReport(ctx, out, receiver, opts.live)
		}()
	} else {
		close(liveDone)
	}
	return proc.waitForStop(ctx, nil, nil, func(stopCtx context.Context) error {
		<-liveDone // ctx has ended: the live report stops with it
		err := receiver.Stop(stopCtx)
		report := receiver.Report()
		_ = report.WriteText(out)
		if opts.htmlFile != "" {
			if werr := writePageFile(opts.htmlFile, report, receiver.PageInfo()); werr != nil {
				return werr
			}
			fmt.Fprintf(out, "page written to %s\n", opts.htmlFile)
		}
		return err
	})
}

// printTraceEndpoints says where the receiver listens and what a service needs to export to it.
func printTraceEndpoints(out io.Writer, cfg traceview.Config) {
	if cfg.GRPCListener != nil {
		fmt.Fprintf(out, "receiving OTLP/gRPC on %s: export with OTEL_EXPORTER_OTLP_ENDPOINT=http://%s OTEL_EXPORTER_OTLP_INSECURE=true\n",
			cfg.GRPCListener.Addr(), cfg.GRPCListener.Addr())
	}
	if cfg.HTTPListener != nil {
		fmt.Fprintf(out, "receiving OTLP/HTTP on http://%s/v1/traces; where the time went: http://%s/\n",
			cfg.HTTPListener.Addr(), cfg.HTTPListener.Addr())
	}
}

// liveReport prints the text report every interval until ctx ends.
func liveReport(ctx context.Context, out io.Writer, receiver *traceview.Receiver, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			fmt.Fprintf(out, "\n== %s ==\n", now.Format(time.TimeOnly))
			_ = receiver.Report().WriteText(out)
		}
	}
}

// listenURL binds a host:port or http:// URL flag; an empty value binds nothing.
func listenURL(flag, raw string) (net.Listener, error) {
	if raw == "" {
		return nil, nil
	}
	addr, err := config.HostPort(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return lis, nil
}

func closeListener(lis net.Listener) {
	if lis != nil {
		_ = lis.Close()
	}
}

// writePageFile writes the page to path through a temporary file, so a reader never sees half a page.
func writePageFile(path string, report *traceview.Report, info traceview.PageInfo) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := report.WriteHTML(tmp, info); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("--html %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("--html %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--html %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}

func newTraceReportCommand() *cobra.Command {
	var url, htmlFile string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Print a running `cairn trace`'s stage breakdown, and optionally save its page",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base := strings.TrimSuffix(url, "/")
			if !strings.Contains(base, "://") {
				base = "http://" + base
			}
			if err := fetchTo(cmd.Context(), base+"/report.txt", cmd.OutOrStdout()); err != nil {
				return err
			}
			if htmlFile == "" {
				return nil
			}
			page, err := os.Create(htmlFile)
			if err != nil {
				return err
			}
			if err := fetchTo(cmd.Context(), base+"/", page); err != nil {
				_ = page.Close()
				return err
			}
			return page.Close()
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:4318", "The HTTP address of the cairn trace to ask (its --listen-otlp-http).")
	cmd.Flags().StringVar(&htmlFile, "html", "", "Also save its page to this file.")
	return cmd
}

// fetchTo copies the body of a GET of url to w.
func fetchTo(ctx context.Context, url string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("asking cairn trace: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("asking cairn trace: %s answered %s", url, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
