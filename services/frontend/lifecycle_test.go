package frontend

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/config"
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
	// No leader: grpc health says NOT_SERVING; the auth store cannot be read, so no request passes unchecked.
	conn, err := grpc.NewClient(client.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil ||
		hc.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health without a leader = %v, %v; want NOT_SERVING", hc, err)
	}
	if _, err := pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("k")}); status.Code(err) != codes.Unavailable {
		t.Errorf("put with the auth store unknown = %v, want Unavailable", err)
	}
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

// TestValidateNamesTheFlag: each refused setting is a config.FieldError naming its flag.
func TestValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"valid", func(*Config) {}, nil},
		{"no name", func(c *Config) { c.Name = "" }, []string{"--name"}},
		{"no backends", func(c *Config) { c.ConsensusEndpoints = nil }, []string{"--consensus-endpoints"}},
		{"bad watch endpoint", func(c *Config) { c.WatchEndpoints = []string{"http://127.0.0.1"} }, []string{"--watch-endpoints"}},
		{"two at once", func(c *Config) { c.MaxTxnOps, c.ProbeInterval = 0, 0 }, []string{"--max-txn-ops", "--probe-interval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ConsensusEndpoints = []string{"http://127.0.0.1:2390"}
			tt.change(&cfg)
			fields := config.Fields(cfg.Validate())
			slices.Sort(fields)
			if !slices.Equal(fields, tt.want) {
				t.Fatalf("Validate() refused %v, want %v", fields, tt.want)
			}
		})
	}
}
