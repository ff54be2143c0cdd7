package clustertest

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/tools/bench"
)

// BenchmarkLeaseVsEtcd runs the lease benchmarks (`cairn bench lease-keepalive`, as etcd's benchmark
// lease-keepalive, and lease-grant-revoke) against a 3-member Cairn cluster with two leasekeepers, through its
// frontends (etcd's default heartbeat and election timeout), and against a 3-member reference etcd v3.7.3, in
// one run, and prints the comparison. b.N is ignored: each row runs its fixed total once. CAIRN_BENCH_MANY
// overrides the keep-alive total (default 100000); grant-revoke runs a tenth of it (1 client: a hundredth).
//
//	go test ./internal/testing/clustertest -run '^$' -bench LeaseVsEtcd -benchtime 1x
func BenchmarkLeaseVsEtcd(b *testing.B) {
	total := int64(100000)
	if v, err := strconv.ParseInt(os.Getenv("CAIRN_BENCH_MANY"), 10, 64); err == nil && v > 0 {
		total = v
	}
	etcd := etcdreftest.StartCluster(b, 3)
	cairn := Start(b, Options{HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: time.Second, Leasekeepers: 2})
	cairn.ActiveLeasekeeper(10 * time.Second)
	scenarios := bench.LeaseScenarios(total)
	b.ResetTimer()
	results, err := bench.Compare(context.Background(), bench.CompareConfig{
		Targets:   []bench.Target{{Name: "etcd", Endpoints: etcd.Endpoints()}, {Name: "cairn", Endpoints: cairn.Endpoints()}},
		Scenarios: scenarios, DialTimeout: 5 * time.Second, RequestTimeout: 30 * time.Second,
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if err := bench.WriteComparison(os.Stdout, results); err != nil {
		b.Fatal(err)
	}
}
