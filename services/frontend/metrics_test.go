package frontend_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/metricstest"
)

// TestEtcdMetrics: after unary and streaming calls, /metrics on the client URL (where etcdctl and etcd's
// dashboards read it) serves etcd's client-API series with etcd's types and labels: grpc_server_* from the
// grpc-ecosystem middleware, for both kinds of RPC, the client byte counters, and the process's resident memory
// that `etcdctl check datascale` reads.
func TestEtcdMetrics(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1})
	client := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	snapshot, err := client.Snapshot(ctx) // a server-streaming RPC
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, snapshot); err != nil {
		t.Fatal(err)
	}
	snapshot.Close()

	families, err := metricstest.Scrape(c.Endpoints()[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	counter, gauge, histogram := dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_HISTOGRAM
	grpcLabels := []string{"grpc_type", "grpc_service", "grpc_method"}
	metricstest.Expect(t, families, []metricstest.Want{
		{Name: "grpc_server_started_total", Type: counter, Labels: grpcLabels},
		{Name: "grpc_server_handled_total", Type: counter, Labels: append(grpcLabels, "grpc_code")},
		{Name: "grpc_server_msg_received_total", Type: counter, Labels: grpcLabels},
		{Name: "grpc_server_msg_sent_total", Type: counter, Labels: grpcLabels},
		{Name: "grpc_server_handling_seconds", Type: histogram, Labels: grpcLabels, Buckets: prometheus.DefBuckets},
		{Name: "etcd_network_client_grpc_sent_bytes_total", Type: counter},
		{Name: "etcd_network_client_grpc_received_bytes_total", Type: counter},
		{Name: "process_resident_memory_bytes", Type: gauge},
	})
	kv, maintenance := "grpc_service=etcdserverpb.KV", "grpc_service=etcdserverpb.Maintenance"
	for _, v := range []struct {
		name   string
		labels []string
	}{
		{"grpc_server_handled_total", []string{kv, "grpc_method=Put", "grpc_type=unary", "grpc_code=OK"}},
		{"grpc_server_handled_total", []string{kv, "grpc_method=Range", "grpc_type=unary", "grpc_code=OK"}},
		{"grpc_server_handling_seconds", []string{kv, "grpc_method=Put", "grpc_type=unary"}},
		{"grpc_server_started_total", []string{maintenance, "grpc_method=Snapshot", "grpc_type=server_stream"}},
		{"grpc_server_handled_total", []string{maintenance, "grpc_method=Snapshot", "grpc_type=server_stream", "grpc_code=OK"}},
		{"grpc_server_msg_sent_total", []string{maintenance, "grpc_method=Snapshot", "grpc_type=server_stream"}},
		{"etcd_network_client_grpc_sent_bytes_total", nil},
		{"etcd_network_client_grpc_received_bytes_total", nil},
		{"process_resident_memory_bytes", nil},
	} {
		if got, _ := metricstest.Value(families, v.name, v.labels...); got < 1 {
			t.Errorf("%s%v = %v, want at least 1", v.name, v.labels, got)
		}
	}
}
