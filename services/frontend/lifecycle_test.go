package frontend

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/obs"
)

// TestFrontendServesGivenListenersAndRegistry: a frontend serves the client and metrics listeners its caller
// bound, its /metrics shows the registry it was given (a process's, with other services' series) as well as its
// own, and Stop may be called twice.
func TestFrontendServesGivenListenersAndRegistry(t *testing.T) {
	listen := func() net.Listener {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return lis
	}
	client, metricsLis := listen(), listen()
	registry := obs.NewRegistry()
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_other_service_total", Help: "Another service's series."})
	registry.MustRegister(other)
	other.Inc()
	cfg := DefaultConfig()
	cfg.ConsensusEndpoints = []string{"http://127.0.0.1:1"} // nothing there: the frontend serves, unhealthy
	cfg.ListenClientURLs = []string{"http://127.0.0.1:1"}   // not bound: the listener is
	cfg.ListenMetricsURLs = []string{"http://127.0.0.1:1"}
	fe, err := New(cfg, Deps{Registry: registry, ClientListeners: []net.Listener{client},
		MetricsListeners: []net.Listener{metricsLis}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := fe.ClientURLs()[0], "http://"+client.Addr().String(); got != want {
		t.Fatalf("ClientURLs() = %s, want the given listener's %s", got, want)
	}
	for _, addr := range []string{client.Addr().String(), metricsLis.Addr().String()} {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, series := range []string{"cairn_other_service_total 1", "cairn_frontend_has_leader"} {
			if !strings.Contains(string(body), series) {
				t.Errorf("/metrics on %s lacks %s", addr, series)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 {
		if err := fe.Stop(ctx); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if conn, err := net.DialTimeout("tcp", client.Addr().String(), time.Second); err == nil {
		conn.Close()
		t.Fatal("the client listener still accepts after Stop")
	}
}
