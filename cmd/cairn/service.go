package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/services/consensus"
)

// stopTimeout bounds a service's clean stop after SIGINT or SIGTERM.
const stopTimeout = 10 * time.Second

// processOptions are the flags every service subcommand shares, named as etcd names them.
type processOptions struct {
	logLevel    string
	metricsURLs []string
	enablePprof bool
	tls         tlsOptions
	// traceSampleRatio is --trace-sample-ratio; below 0 (not set) the OTEL_TRACES_SAMPLER variables decide.
	traceSampleRatio float64
}

// tlsOptions are the TLS flags every service shares: the internal links' certificate (--internal-*) and the
// policy of every TLS link (--tls-min-version, --tls-max-version, --cipher-suites).
type tlsOptions struct {
	internal tlsconfig.Files
	policy   tlsconfig.Policy
}

// register adds the TLS flags to fs.
func (o *tlsOptions) register(fs *flag.FlagSet) {
	o.internal.FlagPrefix = tlsconfig.InternalFlags
	o.internal.RegisterFlags(fs)
	o.policy.RegisterFlags(fs)
}

// register adds the shared flags to flags; metricsURL is the subcommand's default --listen-metrics-urls.
func (o *processOptions) register(flags *pflag.FlagSet, metricsURL string) {
	flags.StringVar(&o.logLevel, "log-level", "info", "Configures log level. Only supports debug, info, warn, error.")
	var defaults []string
	if metricsURL != "" {
		defaults = []string{metricsURL}
	}
	flags.StringSliceVar(&o.metricsURLs, "listen-metrics-urls", defaults, "List of URLs to serve /metrics, /health, /readyz and /livez on.")
	flags.BoolVar(&o.enablePprof, "enable-pprof", false, "Enable runtime profiling data via HTTP server at the metrics URLs + \"/debug/pprof/\".")
	goFlags := flag.NewFlagSet("tls", flag.ContinueOnError)
	o.tls.register(goFlags)
	registerTraceSampleRatio(goFlags, &o.traceSampleRatio)
	flags.AddGoFlagSet(goFlags)
}

// registerTraceSampleRatio adds --trace-sample-ratio to fs, with -1 (not set) as its default.
func registerTraceSampleRatio(fs *flag.FlagSet, ratio *float64) {
	fs.Float64Var(ratio, "trace-sample-ratio", -1, "Ratio (0 to 1) of client requests traced, parent-based "+
		"(a request sampled upstream is traced here too); overrides OTEL_TRACES_SAMPLER. Traces are exported only "+
		"when OTEL_EXPORTER_OTLP_ENDPOINT is set.")
}

// addGoFlags adds flags registered on a standard library FlagSet (the services' Config.RegisterFlags) to a
// cobra command, so `--flag value` and `--flag=value` both work.
func addGoFlags(cmd *cobra.Command, register func(*flag.FlagSet)) {
	goFlags := flag.NewFlagSet(cmd.Name(), flag.ContinueOnError)
	register(goFlags)
	cmd.Flags().AddGoFlagSet(goFlags)
}

// process is what one service subcommand shares with its service: the logger, the telemetry, the metrics
// registry, and the admin endpoints that serve them.
type process struct {
	opts      processOptions
	member    string
	level     slog.Level
	logger    *slog.Logger
	telemetry *obs.Telemetry
	registry  *prometheus.Registry
	admins    []*obs.AdminServer
	// internal secures every internal link the process serves and dials (nil: plain).
	internal *tlsconfig.Link
}

// newProcess sets up logging (JSON on stderr, tagged with service and member), tracing (OTLP only when
// OTEL_EXPORTER_OTLP_ENDPOINT is set) and a metrics registry for the service named service.
func newProcess(ctx context.Context, service, member string, opts processOptions) (*process, error) {
	level, err := obs.ParseLevel(opts.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	for _, raw := range opts.metricsURLs {
		err := config.CheckEtcdURL(raw)
		if err == nil {
			_, err = config.HostPort(raw)
		}
		if err != nil {
			return nil, fmt.Errorf("--listen-metrics-urls: %w", err)
		}
	}
	tel, err := obs.NewTelemetry(ctx, obs.TraceConfig{Service: service, Instance: member, SampleRatio: opts.traceSampleRatio})
	if err != nil {
		return nil, err
	}
	p := &process{
		opts:      opts,
		member:    member,
		level:     level,
		logger:    obs.NewLogger(os.Stderr, service, member, level),
		telemetry: tel,
		registry:  obs.NewRegistry(),
	}
	if p.internal, err = p.link(tlsconfig.KindInternal, opts.tls.internal); err != nil {
		_ = tel.Shutdown(ctx)
		return nil, err
	}
	return p, nil
}

// link is the process's TLS link of kind for files under the --tls-* policy (nil when files name no
// certificate), reporting refusals to the process's log and registry.
func (p *process) link(kind string, files tlsconfig.Files) (*tlsconfig.Link, error) {
	if err := p.opts.tls.policy.Validate(); err != nil {
		return nil, err
	}
	return tlsconfig.NewLink(kind, files, p.opts.tls.policy, tlsconfig.Deps{Logger: p.logger, Registry: p.registry})
}

// component is p with a logger of its own for the service named service, for the services `cairn dev` runs
// side by side; it shares p's telemetry and registry.
func (p *process) component(service string) *process {
	c := *p
	c.logger = obs.NewLogger(os.Stderr, service, p.member, p.level)
	c.admins = nil
	return &c
}

// serveAdmin serves /metrics, /health, /readyz, /livez (and /debug/pprof with --enable-pprof) on every
// --listen-metrics-urls; health decides /health.
func (p *process) serveAdmin(health obs.HealthFunc) error {
	mux := obs.AdminMux(p.registry, health)
	if p.opts.enablePprof {
		obs.HandlePprof(mux)
	}
	return p.serveHandler(mux)
}

func (p *process) serveHandler(handler http.Handler) error {
	for _, raw := range p.opts.metricsURLs {
		addr, err := config.HostPort(raw)
		if err != nil {
			return err
		}
		admin, err := obs.ListenAdmin(addr, handler, p.logger)
		if err != nil {
			return err
		}
		admin.Start()
		p.admins = append(p.admins, admin)
		p.logger.Info("serving metrics and health", "url", "http://"+admin.Addr())
	}
	return nil
}

// close stops the admin endpoints and flushes the traces.
func (p *process) close(ctx context.Context) {
	for _, admin := range p.admins {
		if err := admin.Stop(ctx); err != nil {
			p.logger.Warn("stopping admin endpoint", "addr", admin.Addr(), "err", err)
		}
	}
	if err := p.telemetry.Shutdown(ctx); err != nil {
		p.logger.Warn("flushing traces", "err", err)
	}
}

// waitForStop blocks until ctx ends (SIGINT or SIGTERM) or failed closes (the service stopped on its own,
// e.g. a removed member), then runs stop with stopTimeout and closes the process. It returns the reason the
// service failed, if it did, else stop's error.
func (p *process) waitForStop(ctx context.Context, failed <-chan struct{}, failure func() error, stop func(context.Context) error) error {
	var cause error
	select {
	case <-ctx.Done():
		p.logger.Info("received signal; stopping")
	case <-failed:
		cause = failure()
		if errors.Is(cause, consensus.ErrRemoved) {
			// Not a failure: the cluster let this member go, as etcd's "the member has been permanently removed".
			p.logger.Warn("the member has been permanently removed from the cluster; stopping", "err", cause)
		} else {
			p.logger.Error("service stopped by itself", "err", cause)
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	err := stop(stopCtx)
	p.close(stopCtx)
	if cause != nil {
		return cause
	}
	if err != nil {
		p.logger.Error("stop", "err", err)
	}
	p.logger.Info("stopped")
	return err
}
