package storage

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/testing/metricstest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestEtcdMetrics: after a small load, storage serves etcd's series for what it owns, with etcd's types, labels
// and buckets, counting as etcd counts.
func TestEtcdMetrics(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.QuotaBackendBytes = 1 << 30
	m := startMember(t, cfg, newMemlog(t, 1), nil)
	ctx := ctxT(t)
	for _, key := range []string{"a", "b", "c"} {
		if _, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.client.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	// A txn of two operations (a put and a range) on its success branch: one txn, one more put, one range.
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("b"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL,
			TargetUnion: &pb.Compare_Version{Version: 1}}},
		Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("d"), Value: []byte("v")}}},
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("b")}}},
		},
	}
	if resp, err := m.client.Txn(ctx, txn); err != nil || !resp.Succeeded {
		t.Fatalf("txn: %v, %v", resp, err)
	}
	if _, err := m.client.Range(ctx, &pb.RangeRequest{Key: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Defragment(ctx); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "a bbolt commit observed", func() bool {
		n, _ := metricstest.Value(metricstest.Gather(t, m.metrics.registry), "etcd_disk_backend_commit_duration_seconds")
		return n > 0
	})

	families := metricstest.Gather(t, m.metrics.registry)
	counter, gauge, histogram := dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_HISTOGRAM
	metricstest.Expect(t, families, []metricstest.Want{
		{Name: "etcd_server_quota_backend_bytes", Type: gauge},
		{Name: "etcd_server_proposals_applied_total", Type: gauge},
		{Name: "etcd_server_proposals_pending", Type: gauge},
		{Name: "etcd_server_slow_apply_total", Type: counter},
		{Name: "etcd_disk_backend_commit_duration_seconds", Type: histogram, Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)},
		{Name: "etcd_disk_backend_defrag_duration_seconds", Type: histogram, Buckets: prometheus.ExponentialBuckets(.1, 2, 13)},
		{Name: "etcd_mvcc_db_total_size_in_bytes", Type: gauge},
		{Name: "etcd_mvcc_db_total_size_in_use_in_bytes", Type: gauge},
		{Name: "etcd_mvcc_put_total", Type: counter},
		{Name: "etcd_mvcc_delete_total", Type: counter},
		{Name: "etcd_mvcc_range_total", Type: counter},
		{Name: "etcd_mvcc_txn_total", Type: counter},
		{Name: "etcd_debugging_mvcc_keys_total", Type: gauge},
	})
	values := []struct {
		name string
		want float64
	}{
		{"etcd_server_quota_backend_bytes", 1 << 30},
		{"etcd_server_proposals_pending", 0},
		{"etcd_server_slow_apply_total", 0},
		{"etcd_disk_backend_defrag_duration_seconds", 1}, // the sample count
		{"etcd_mvcc_put_total", 4},
		{"etcd_mvcc_delete_total", 1},
		{"etcd_mvcc_range_total", 2},
		{"etcd_mvcc_txn_total", 1},
		{"etcd_debugging_mvcc_keys_total", 3},
	}
	for _, v := range values {
		if got, _ := metricstest.Value(families, v.name); got != v.want {
			t.Errorf("%s = %v, want %v", v.name, got, v.want)
		}
	}
	applied, _ := metricstest.Value(families, "etcd_server_proposals_applied_total")
	if want := float64(m.currentStore().Position().AppliedIndex); applied != want || applied < 5 {
		t.Errorf("etcd_server_proposals_applied_total = %v, want the applied index %v (at least 5)", applied, want)
	}
	size, _ := metricstest.Value(families, "etcd_mvcc_db_total_size_in_bytes")
	inUse, _ := metricstest.Value(families, "etcd_mvcc_db_total_size_in_use_in_bytes")
	if size <= 0 || inUse <= 0 || inUse > size {
		t.Errorf("db size %v, in use %v: want 0 < in use <= size", size, inUse)
	}
}
