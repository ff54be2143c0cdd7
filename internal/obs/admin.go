package obs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"regexp"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HealthFunc reports whether the service can do its job; a non-nil error is the reason it cannot.
type HealthFunc func(ctx context.Context) error

// NewRegistry returns a Prometheus registry with the Go runtime and process collectors registered. Beyond the
// Go collector's defaults it exports the runtime's estimate of the CPU the collector used
// (go_cpu_classes_gc_total_cpu_seconds_total), so what --gc-percent and --memory-limit-mib cost in CPU can be
// read per process under load (scripts/mem-under-load.sh).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/gc/total:cpu-seconds$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// HandlePprof serves net/http/pprof's profiles under /debug/pprof/ on mux, as etcd's --enable-pprof does, and
// like etcd turns on the mutex profile (one contention event in 5) unless the process set a rate already, so
// /debug/pprof/mutex shows where goroutines wait on each other.
func HandlePprof(mux *http.ServeMux) {
	if runtime.SetMutexProfileFraction(-1) == 0 {
		runtime.SetMutexProfileFraction(5)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// AdminMux returns the admin endpoints every service serves:
//   - /metrics: Prometheus text format from reg;
//   - /health: etcd's shape, {"health":"true","reason":""} with 200, or "false" and the reason with 503;
//   - /readyz and /livez: "ok" with 200, or the reason with 503 (/livez only says the process answers).
func AdminMux(reg *prometheus.Registry, health HealthFunc) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		err := checkHealth(r.Context(), health)
		body := map[string]string{"health": "true", "reason": ""}
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			body = map[string]string{"health": "false", "reason": err.Error()}
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := checkHealth(r.Context(), health); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprintln(w, "ok") })
	return mux
}

func checkHealth(ctx context.Context, health HealthFunc) error {
	if health == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return health(ctx)
}

// AdminServer serves an AdminMux (or any handler) on its own listener.
type AdminServer struct {
	srv *http.Server
	lis net.Listener
	log *slog.Logger
}

// ListenAdmin binds addr (host:port; port 0 picks a free one) for handler.
func ListenAdmin(addr string, handler http.Handler, log *slog.Logger) (*AdminServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener on %s: %w", addr, err)
	}
	return &AdminServer{
		srv: &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second},
		lis: lis,
		log: log,
	}, nil
}

// Addr is the bound address, with the real port when 0 was asked for.
func (a *AdminServer) Addr() string { return a.lis.Addr().String() }

// Start serves in the background until Stop.
func (a *AdminServer) Start() {
	go func() {
		if err := a.srv.Serve(a.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("admin server stopped", "addr", a.Addr(), "err", err)
		}
	}()
}

// Stop shuts the server down, waiting for in-flight requests until ctx ends.
func (a *AdminServer) Stop(ctx context.Context) error { return a.srv.Shutdown(ctx) }
